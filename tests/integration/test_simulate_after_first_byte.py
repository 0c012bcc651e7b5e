"""``simulate`` makes the decisions after the first byte that the live gateway makes: the
same loops (gateway/recovery/continuing.py) and decisions (resilience/followup.py), compared on
the same scenario (a resumed stream, resumes running out, continuations of a cut
answer, as a stream and as JSON)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

from gateway.simulate import Scenario, simulate
from gateway.testing import CutAfter, Error, FakeProvider, Success
from tests.harness import Harness

MESSAGES = [{"role": "user", "content": "Write on."}]


def live_decisions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The decisions of the live path, from its log events."""
    out = []
    for e in events:
        if e["event"] == "stream_interrupted":
            out.append((e["action"], e["reason"] or ""))
        elif e["event"] == "output_continuation":
            out.append(("continue", str(e["n"])))
        elif e["event"] == "output_not_continued":
            out.append(("not_continued", e["reason"]))
    return out


async def live(gw: Harness, stream: bool) -> tuple[list[tuple[str, str]], str]:
    client = gw.async_openai()
    with capture_logs() as events:
        if stream:
            chunks = await client.chat.completions.create(
                model="gpt-test",
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
            )
            with contextlib.suppress(openai.APIError):  # the stream's error event raises
                async for _ in chunks:
                    pass
        else:
            await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
    done = next(e for e in events if e["event"] == "request_completed")
    return live_decisions(events), f"{done['attempts']} {done['recovery']}"


async def simulated(gw: Harness, script: str, stream: bool) -> tuple[list[tuple[str, str]], str]:
    route = gw.gateway.policies.route("team-a", "gpt-test", "/v1/chat/completions")
    assert route is not None
    sim = await simulate(
        Scenario(route.policy, route.id, "team-a", "gpt-test", script, 0, stream=stream)
    )
    return sim.decisions, f"{sim.attempts} {','.join(sim.recovery) or None}"


@pytest.mark.parametrize(
    ("policy", "setup", "script", "stream", "expected"),
    [
        pytest.param(
            {"stream": {"on_midstream_failure": "continue"}},
            lambda fp: fp.push(CutAfter(3), model="fake-model"),
            "200:cut@40,200",
            True,
            [("resume", "")],
            id="stream-resumed",
        ),
        pytest.param(
            {"stream": {"on_midstream_failure": "continue", "max_resumes": 1}},
            lambda fp: [fp.push(CutAfter(3), model="fake-model") for _ in range(2)],
            "200:cut@40,200:cut@40",
            True,
            [("resume", ""), ("error_event", "max_resumes")],
            id="resumes-run-out",
        ),
        pytest.param(
            {"stream": {"on_midstream_failure": "continue", "max_resumes": 2}},
            lambda fp: [
                fp.push(CutAfter(3), model="fake-model"),
                fp.push(Success(text="Another answer altogether."), model="fake-model"),
            ],
            "200:cut@40,200:diverge",
            True,
            [("resume", ""), ("error_event", "resume_diverged")],
            id="regeneration-diverged",
        ),
        pytest.param(
            {},
            lambda fp: fp.push(CutAfter(3), model="fake-model"),
            "200:cut@40",
            True,
            [("error_event", "policy_error")],
            id="policy-error-event",
        ),
        pytest.param(
            {"output_recovery": {"max_continuations": 1}},
            lambda fp: fp.cut_at.__setitem__("fake-model", 8),
            "200:length,200:length",
            True,
            [("continue", "1"), ("not_continued", "max_continuations")],
            id="stream-continued",
        ),
        pytest.param(
            {"output_recovery": {"max_continuations": 2}},
            lambda fp: fp.cut_at.__setitem__("fake-model", 8),
            "200:length,200:length,200:length",
            False,
            [("continue", "1"), ("continue", "2"), ("not_continued", "max_continuations")],
            id="json-continued",
        ),
    ],
)
async def test_simulate_decides_after_the_first_byte_as_the_live_path(
    make_gateway: Callable[..., Awaitable[Harness]],
    fake: FakeProvider,
    policy: dict[str, Any],
    setup: Callable[[FakeProvider], Any],
    script: str,
    stream: bool,
    expected: list[tuple[str, str]],
) -> None:
    """Same scenario, same decisions, same number of attempts and recovery header."""
    gw = await make_gateway(policy)
    fake.reply["fake-model"] = "word " * 200
    setup(fake)
    live_result = await live(gw, stream)
    sim_result = await simulated(gw, script, stream)
    assert live_result[0] == expected
    assert sim_result == live_result


async def test_every_stop_is_an_event_and_a_counted_reason(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider
) -> None:
    """A cut answer the client capped is not continued, and a 400 is given up on: each
    is a log event with its reason and a sample of recovery_stops_total, and simulate
    shows the give-up the same way."""
    gw = await make_gateway()
    fake.reply["fake-model"] = "word " * 200
    client = gw.async_openai()
    stops = "llm_gateway_recovery_stops_total"
    with capture_logs() as events:
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
    stop = next(e for e in events if e["event"] == "output_not_continued")
    assert (stop["reason"], stop["n"]) == ("client_max_tokens", 0)
    assert gw.metric(stops, decision="continuation", reason="client_max_tokens") == 1
    fake.script("fake-model", [Error.bad_request()])
    with capture_logs() as events, contextlib.suppress(openai.BadRequestError):
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
    gave_up = next(e for e in events if e["event"] == "give_up")
    assert (gave_up["reason"], gave_up["category"]) == ("not_retryable", "invalid_request")
    assert gw.metric(stops, decision="give_up", reason="not_retryable") == 1
    route = gw.gateway.policies.route("team-a", "gpt-test", "/v1/chat/completions")
    assert route is not None
    sim = await simulate(Scenario(route.policy, route.id, "team-a", "gpt-test", "400", 0))
    assert sim.timeline.splitlines()[1].endswith("give up (not_retryable)")
