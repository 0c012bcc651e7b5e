"""The gateway's HTTP/1.1 server: :mod:`.protocol` (connections, parsing, drain) and
:mod:`.messages` (requests and answers)."""

from gateway.server.messages import Request, Response, StreamResponse
from gateway.server.protocol import HttpServer

__all__ = ["HttpServer", "Request", "Response", "StreamResponse"]
