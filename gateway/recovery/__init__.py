"""The recovery loops: the engine that carries out the pure decisions of
:mod:`gateway.resilience` over an :class:`~gateway.recovery.seams.Attempter`, and what it
does before the first attempt (admission), about a prompt too long (compacting), after the
first byte (continuing) and in choosing a deployment (deployment_choice). No sockets here:
the attempts themselves are :mod:`gateway.live`'s."""
