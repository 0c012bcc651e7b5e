"""Which client connections have a request on its way (what an early end of a drain's
accept window must not cut)."""

from __future__ import annotations

import pytest

from gateway.web.listener import Guard

pytestmark = pytest.mark.fast


class Inner:
    def data_received(self, data: bytes) -> None:
        pass


def guard() -> Guard:
    return Guard(Inner(), 8192)


def test_a_request_on_its_way_is_arriving() -> None:
    """New, or a head read in part or whole and not handled yet: arriving; while handled,
    and idle between requests: not."""
    g = guard()
    assert g.arriving()  # a new connection: its request may be in the next packet
    g.data_received(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
    assert g.arriving()  # part of a head
    g.data_received(b"\r\n")
    assert g.arriving()  # a whole head, no handler yet
    g.begin()
    assert not g.arriving()  # in flight: counted elsewhere
    g.end()
    assert not g.arriving()  # an idle keep-alive connection
    g.data_received(b"GET /readyz HTTP/1.1\r\n\r\n")
    assert g.arriving()
