"""Claude's Messages as Bedrock and Vertex take them, whatever a client sends as it would to
Anthropic: Claude Code, under a model name it does not know, ends ``messages`` with a
``role: system`` turn (announced by the ``mid-conversation-system-*`` beta) and sends betas
the clouds refuse. The fakes refuse both as the clouds do; through the gateway the request
is answered, the system turn folded into ``system``, the refused betas dropped and named."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.testing import Error
from gateway.testing.fake_provider import FakeProvider, RecordedRequest
from tests.clouds import test_clouds_e2e
from tests.clouds.test_clouds_e2e import BEDROCK_CLAUDE, CLAUDE, CLAUDE_CODE, Clouds

clouds = test_clouds_e2e.clouds  # the end-to-end tests' fixture: the gateway and its fakes

KEPT = "interleaved-thinking-2025-05-14"  # a beta both clouds take
DROPPED = (
    "claude-code-20250219",
    "mid-conversation-system-2026-04-07",
    "prompt-caching-scope-2026-01-05",
)
BETAS = ",".join((DROPPED[0], KEPT, *DROPPED[1:]))
REMINDER = "The user changed the working directory to /srv/app."
#: Claude Code's turn shape under a name it does not know: a system turn at the end.
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": "Which directory?"},
    {"role": "user", "content": [{"type": "text", "text": "This one."}]},
    {"role": "system", "content": REMINDER},
]
ON = {"claude-bedrock": "bedrock", "claude-vertex": "vertex"}


def _fake(clouds: Clouds, model: str) -> FakeProvider:
    fake: FakeProvider = getattr(clouds, ON[model])
    return fake


def _sent(clouds: Clouds, model: str) -> tuple[RecordedRequest, list[str]]:
    """The one request the cloud got for ``model`` and the betas it carried."""
    (call,) = _fake(clouds, model).requests
    if ON[model] == "bedrock":
        return call, call.body.get("anthropic_beta", [])
    return call, call.headers.get("anthropic-beta", "").split(",")


def _assert_folded(call: RecordedRequest, betas: list[str]) -> None:
    assert [m["role"] for m in call.body["messages"]] == ["user", "assistant", "user"]
    assert call.body["system"] == [*CLAUDE_CODE["system"], {"type": "text", "text": REMINDER}]
    assert betas == [KEPT]


async def _ask(clouds: Clouds, model: str) -> Any:
    """Claude Code's request (its ``?beta=true`` too) on ``model``, its raw answer."""
    client = clouds.gw.async_anthropic()
    return await client.messages.with_raw_response.create(
        model=model,
        max_tokens=200,
        messages=MESSAGES,  # type: ignore[arg-type]
        extra_headers={"anthropic-beta": BETAS},
        extra_query={"beta": "true"},
        **CLAUDE_CODE,  # type: ignore[arg-type]
    )


def _assert_named(headers: Any) -> None:
    assert headers["x-gateway-dropped"] == ",".join(f"anthropic-beta:{b}" for b in DROPPED)


@pytest.mark.parametrize("model", sorted(ON))
async def test_system_turn_and_unknown_betas_answered(clouds: Clouds, model: str) -> None:
    """A system turn at the end of ``messages`` and betas the cloud refuses: 200; the
    cloud got the system text at the end of ``system``, no system turn, and of the betas
    only the one it takes; ``x-gateway-dropped`` names the others."""
    raw = await _ask(clouds, model)
    assert raw.status_code == 200
    msg = await raw.parse()
    assert msg.content[0].text  # type: ignore[union-attr]
    _assert_folded(*_sent(clouds, model))
    _assert_named(raw.headers)


@pytest.mark.parametrize("model", sorted(ON))
async def test_system_turn_and_unknown_betas_streamed(clouds: Clouds, model: str) -> None:
    """The same as a stream (Bedrock's event-stream frames, Vertex's SSE): the whole
    answer, the same body and betas at the cloud, the same header."""
    client = clouds.gw.async_anthropic()
    async with client.messages.with_streaming_response.create(
        model=model,
        max_tokens=200,
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=True,
        extra_headers={"anthropic-beta": BETAS},
        **CLAUDE_CODE,  # type: ignore[arg-type]
    ) as resp:
        assert resp.status_code == 200
        _assert_named(resp.headers)
        text = "".join([line async for line in resp.iter_lines()])
    assert "message_stop" in text and "text_delta" in text
    _assert_folded(*_sent(clouds, model))


async def test_overloaded_anthropic_fails_over_to_bedrock_with_a_system_turn(
    clouds: Clouds,
) -> None:
    """Claude Code's body on a model served by Anthropic then Bedrock: Anthropic's 529
    becomes Bedrock's answer, not Bedrock's 400 (Anthropic itself got the body as sent)."""
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    raw = await _ask(clouds, CLAUDE)
    assert raw.status_code == 200 and raw.headers["x-gateway-attempts"] == "2"
    msg = await raw.parse()
    assert BEDROCK_CLAUDE in msg.content[0].text  # type: ignore[union-attr]
    (first,) = clouds.direct.requests
    assert first.body["messages"][-1]["role"] == "system"  # Anthropic takes it as it is
    assert first.headers["anthropic-beta"] == BETAS
    _assert_folded(*_sent(clouds, "claude-bedrock"))
    _assert_named(raw.headers)


@pytest.mark.parametrize("model", sorted(ON))
async def test_count_tokens_with_a_system_turn(clouds: Clouds, model: str) -> None:
    """Claude Code's count of the same body: the cloud counts it (Bedrock's CountTokens,
    Vertex's count-tokens:rawPredict) instead of refusing it."""
    client = clouds.gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(
        model=model,
        messages=MESSAGES,  # type: ignore[arg-type]
        extra_headers={"anthropic-beta": BETAS},
        **{k: v for k, v in CLAUDE_CODE.items() if k != "metadata"},  # type: ignore[arg-type]
    )
    assert raw.status_code == 200 and "x-gateway-estimate" not in raw.headers
    assert (await raw.parse()).input_tokens > 10
    assert len(_fake(clouds, model).requests) == 1
    _assert_named(raw.headers)
