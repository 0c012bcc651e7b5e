"""The client's error when recovery could not get past a failure: one status and type per
failure category, in the JSON error and the in-stream error event alike."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gateway.testing import FakeProvider, Reset
from tests.harness import CLIENT_KEY, Harness

NO_RETRY = {"retry": {"max_retries": 0}, "turn_retry": {"max": 0}}
CHAT = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("path", "model", "extra"),
    [("/v1/chat/completions", "gpt-test", {}),
     ("/v1/messages", "claude-test", {"max_tokens": 64})],
)  # fmt: skip
async def test_a_reset_that_recovery_cannot_pass_is_a_502_api_error(
    make_gateway: Any, fake: FakeProvider, path: str, model: str, extra: dict[str, Any]
) -> None:
    """The provider resets the connection, no retry left: 502 ``api_error`` in the
    endpoint's format, the type its stream's error event has for the same failure."""
    gw: Harness = await make_gateway(NO_RETRY)
    fake.script(None, [Reset()])
    body = {"model": model, "messages": CHAT, **extra}
    async with (
        aiohttp.ClientSession() as s,
        s.post(gw.url + path, json=body, headers={"authorization": f"Bearer {CLIENT_KEY}"}) as r,
    ):
        status, answer = r.status, await r.json()
    assert status == 502
    assert answer["error"]["type"] == "api_error"
    assert answer["error"]["message"].startswith("upstream failed after 1 attempt(s)")
