"""The live path of a request: attempts over HTTP (the attempter), the head of a streamed
answer, the relay of a stream to the client, and Anthropic's token count as attempts. The
decisions they carry out are :mod:`gateway.recovery`'s and :mod:`gateway.resilience`'s."""
