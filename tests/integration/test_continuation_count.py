"""output_recovery.max_continuations means follow-up requests, on JSON answers and streams
alike (one decision for both paths: gateway/resilience/followup.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gateway.testing import FakeProvider
from tests.harness import Harness

LONG = "word " * 400  # 500 tokens: cut at 8 tokens it is always cut
MESSAGES = [{"role": "user", "content": "Write on."}]


@pytest.mark.parametrize("limit", [0, 1, 2, 3])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_max_continuations_is_the_number_of_follow_up_requests(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider, limit: int, stream: bool
) -> None:
    """An answer cut every time: 1 request plus exactly max_continuations follow-ups, and
    the client gets the parts joined, still marked as cut."""
    gw = await make_gateway({"output_recovery": {"max_continuations": limit}})
    fake.reply["fake-model"] = LONG
    fake.cut_at["fake-model"] = 8
    client = gw.async_openai()
    if stream:
        chunks = await client.chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            stream=True,  # type: ignore[arg-type]
        )
        text, finish = "", None
        async for c in chunks:
            if c.choices:
                text += c.choices[0].delta.content or ""
                finish = c.choices[0].finish_reason or finish
    else:
        r = await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
        text, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
    assert len(fake.requests) == 1 + limit
    assert text == LONG[: 32 * (1 + limit)]
    assert finish == "length"
    continued = gw.metric("llm_gateway_continuations_total", team="team-a", model="gpt-test")
    assert continued == limit
