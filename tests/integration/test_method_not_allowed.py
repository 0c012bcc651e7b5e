"""A known path called with a method it does not serve: the gateway's own 405.

It is the gateway's answer, not a provider's: an ``invalid_request_error`` in the
endpoint's own format (OpenAI's envelope, or Anthropic's on ``/v1/messages``) with an
``allow`` header, whatever the key, and nothing goes upstream.
"""

from __future__ import annotations

import aiohttp
import pytest

from gateway.formats.endpoints import Endpoint
from gateway.testing import FakeProvider
from tests.harness import CLIENT_KEY, Harness

AUTH = {"authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY}

#: (method, path, the allow header) of every /v1/ endpoint called with a wrong method.
WRONG = [
    *((m, ep.value, "POST") for ep in Endpoint for m in ("GET", "PUT", "DELETE", "PATCH")),
    *(("POST", "/v1/models", "GET, HEAD"), ("DELETE", "/v1/models", "GET, HEAD")),
]


@pytest.mark.parametrize("key", [True, False], ids=["key", "no-key"])
@pytest.mark.parametrize(("method", "path", "allow"), WRONG)
async def test_wrong_method_is_the_gateways_own_405(
    gw: Harness, fake: FakeProvider, method: str, path: str, allow: str, key: bool
) -> None:
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, gw.url + path, headers=AUTH if key else {}, json={}) as r,
    ):
        body = await r.json()
        assert r.status == 405
        allowed = r.headers.get("allow")
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["code"] == "method_not_allowed"
    assert method in body["error"]["message"] and path in body["error"]["message"]
    assert fake.requests == []
    assert allowed == allow


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("POST", "/healthz", "GET, HEAD"), ("PUT", "/readyz", "GET, HEAD"),
     ("DELETE", "/", "GET, HEAD"), ("POST", "/metrics", "GET, HEAD")],
)  # fmt: skip
async def test_wrong_method_on_a_plain_path_names_the_allowed_ones(
    gw: Harness, method: str, path: str, allow: str
) -> None:
    async with aiohttp.ClientSession() as s, s.request(method, gw.url + path) as r:
        assert r.status == 405
        assert r.headers["allow"] == allow
