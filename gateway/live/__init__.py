"""The live path of a request: attempts over HTTP (the attempter, and the exchange of one
attempt), the head of a streamed answer, the relay of a stream to the client (the pump of
one upstream stream), and Anthropic's token count as attempts. What they are given is in
:mod:`gateway.live.context`. The decisions they carry out are :mod:`gateway.recovery`'s and
:mod:`gateway.resilience`'s."""
