"""The recovery loops: the engine that carries out the pure decisions of
:mod:`gateway.resilience` over an :class:`~gateway.recovery.seams.Attempter`, and what it
does before the first attempt (admission), about a prompt too long (compacting), after the
first byte (continuing) and in choosing a deployment (deployment_choice). What they take
and act through (the request, an attempt's outcome, the attempter, the environment and
the events they report) is declared in :mod:`gateway.recovery.seams`, which imports none
of them. No sockets here: the attempts themselves are :mod:`gateway.live`'s."""
