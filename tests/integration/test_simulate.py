"""``llm-gateway simulate`` tells the truth: its timeline matches what the live gateway does."""

from __future__ import annotations

import re
import subprocess
import sys

from structlog.testing import capture_logs

from gateway.formats import MESSAGES
from gateway.policy.schema import Policy
from gateway.simulate import Scenario, run, simulate
from gateway.testing import Error, FakeProvider
from tests.harness import Harness

NO_JITTER = {
    "retry": {
        "max_retries": 4,
        "rate_limit": {"retry_after_jitter": 0, "jitter": 0},
        "transient": {"jitter": 0, "base": "20ms"},
    },
    "turn_retry": {"max": 0},
}


async def test_simulate_matches_live_gateway(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """The same script gives the same attempts, categories and waits, simulated and live."""
    gw: Harness = await make_gateway(policy=NO_JITTER)
    route = gw.gateway.policies.route("team-a", "gpt-test", "/v1/chat/completions")
    timeline = await run(
        Scenario(route.policy, route.id, "team-a", "gpt-test", "429:ms=200,500,500,200", 0)
    )
    simulated = [float(w) for w in re.findall(r"retry in ([\d.]+)s", timeline)]
    assert "answered after 4 attempt(s)" in timeline

    fake.script("fake-model", [Error.openai_rate_limit(retry_after_ms=200),
                               Error.openai_server(500), Error.openai_server(500)])  # fmt: skip
    with capture_logs() as events:
        await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}]
        )
    live = [e for e in events if e["event"] == "api_retry"]
    assert [e["category"] for e in live] == ["rate_limit", "server_error", "server_error"]
    assert (
        [round(e["wait_seconds"], 2) for e in live] == simulated == [0.2, 0.04, 0.05]
    )  # 80 ms capped at 50
    assert len(fake.requests) == 4


def test_simulate_cli_prints_timeline() -> None:
    """The CLI prints a readable timeline for the bundled demo policies, with no network."""
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "simulate", "--policies", "policies", "--team", "demo",
         "--model", "sim-down", "--script", "500,500,200"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert "fallback -> sim-ok" in out.stdout
    assert "answered after 3 attempt(s)" in out.stdout


def test_simulate_rejects_bad_script() -> None:
    """A script item that is not a status, timeout or reset is a clear error, exit 2."""
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "simulate", "--policies", "policies", "--team", "demo",
         "--model", "sim-ok", "--script", "429,banana"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "'banana'" in out.stderr


PTL = "400:code=context_length_exceeded"
SUMMARIZE = Policy.model_validate(
    {"compaction": {"strategies": ["summarize", "drop_middle"], "summarize_model": "small"},
     "timeouts": {"total": "10s"}}
)  # fmt: skip


async def test_simulate_shows_the_summary_call() -> None:
    """The summary call takes a script item and shows as a '-' row under its attempt."""
    timeline = await run(Scenario(SUMMARIZE, "r", "t", "big", f"{PTL},200,200", 0, "agent"))
    lines = timeline.splitlines()
    assert "big" in lines[1] and "summarize (19->10 messages" in lines[1]
    assert lines[2].split()[:4] == ["-", "0.00", "small", "summary"]
    assert lines[3].split()[:3] == ["2", "0.00", "big"] and lines[3].endswith("answered")
    assert lines[-1].startswith("answered after 2 attempt(s)")


async def test_simulate_summary_failures() -> None:
    """Two 500s fail the step (drop_middle next); an auth error is not retried; a timeout
    uses the summary's deadline, never past the request's (timeouts.total 10s < 30s)."""
    timeline = await run(Scenario(SUMMARIZE, "r", "t", "big", f"{PTL},500,500", 0, "agent"))
    assert "summarize failed (server_error); drop_middle (19->10" in timeline
    assert timeline.count("summary 500 server_error") == 2
    timeline = await run(Scenario(SUMMARIZE, "r", "t", "big", f"{PTL},401", 0, "agent"))
    assert timeline.count("summary 401") == 1 and "summarize failed (auth)" in timeline
    timeline = await run(Scenario(SUMMARIZE, "r", "t", "big", f"{PTL},timeout", 0, "agent"))
    assert "summarize failed (timeout)" in timeline
    assert timeline.splitlines()[-2].split()[:2] == ["2", "10.00"]


async def test_simulate_short_conversation_skips_summarize() -> None:
    """One short message has no middle: no summary call, nothing shown."""
    timeline = await run(Scenario(SUMMARIZE, "r", "t", "big", f"{PTL},200", 0))
    assert "summary" not in timeline and "give up (prompt_too_long)" in timeline


async def test_simulate_counts_the_request_in_the_retry_budget(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """With a budget of one retry per request, 500 then 200 is answered, simulated and live."""
    policy = {
        **NO_JITTER,
        "retry": {**NO_JITTER["retry"], "budget": {"ratio": 1.0, "min_per_second": 0}},
    }
    gw: Harness = await make_gateway(policy=policy)
    route = gw.gateway.policies.route("team-a", "gpt-test", "/v1/chat/completions")
    timeline = await run(Scenario(route.policy, route.id, "team-a", "gpt-test", "500,200", 0))
    fake.script("fake-model", [Error.openai_server(500)])
    answer = await gw.async_openai().chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content and len(fake.requests) == 2
    assert "retry_budget_exhausted" not in timeline
    assert "answered after 2 attempt(s)" in timeline


async def test_simulate_client_timeout_shortens_the_deadline() -> None:
    """A client timeout of 1 s stops the retries that would pass it, as the live deadline does."""
    script = "500,500,500,500,500"
    timeline = await run(Scenario(Policy(), "r", "t", "big", script, 0, client_timeout=1.0))
    assert "give up (deadline)" in timeline
    assert "give up (deadline)" not in await run(Scenario(Policy(), "r", "t", "big", script, 0))


async def test_simulate_compacts_ahead_as_the_handler_does() -> None:
    """A prompt over the model's window is compacted before attempt 1 with proactive: true."""
    policy = Policy.model_validate(
        {"compaction": {"proactive": True, "strategies": ["snip_tool_results"]}}
    )
    timeline = await run(Scenario(policy, "r", "t", "big", "200", 0, "agent", context_window=8000))
    first = timeline.splitlines()[1]
    assert first.split()[:2] == ["-", "0.00"] and "snip_tool_results ahead (19->19" in first
    assert "ahead" not in await run(Scenario(policy, "r", "t", "big", "200", 0, "agent"))


async def test_simulate_stream_silent_past_the_deadline_is_not_resumed() -> None:
    """A stream quiet until the request's deadline ends there, final (as the relay's
    deadline does); quiet for stream_idle before it, it is resumed."""
    policy = Policy.model_validate(
        {"stream": {"on_midstream_failure": "continue"},
         "timeouts": {"total": "5s", "stream_idle": "10s"}}
    )  # fmt: skip
    sim = await simulate(Scenario(policy, "r", "t", "big", "200:stall@40,200", 0))
    assert sim.decisions == [("error_event", "deadline")]
    assert "silence to the deadline" in sim.timeline and "in 5.00s" in sim.timeline
    sim = await simulate(
        Scenario(policy, "r", "t", "big", "200:stall@40,200", 0, client_timeout=60)
    )
    assert sim.decisions == [("error_event", "deadline")]  # the policy's total still holds
    longer = policy.model_copy(
        update={"timeouts": policy.timeouts.model_copy(update={"total": 60.0})}
    )
    sim = await simulate(Scenario(longer, "r", "t", "big", "200:stall@40,200", 0))
    assert sim.decisions == [("resume", "")]


async def test_simulate_asks_the_summary_model_in_its_own_format() -> None:
    """A summary model behind an Anthropic provider is asked, and answers, in Messages."""
    info = {"small": (MESSAGES, 200_000)}
    timeline = await run(
        Scenario(
            SUMMARIZE, "r", "t", "big", f"{PTL},200,200", 0, "agent", summary_info=info.__getitem__
        )
    )
    assert "summarize (19->10 messages" in timeline and "summarize failed" not in timeline


async def test_simulate_refused_translation_moves_along_the_chain(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """A body the Anthropic model's format cannot carry (temperature 1.5) is not sent
    there: both the live gateway and simulate move on to the chain's next model."""
    gw: Harness = await make_gateway(policy={"fallback": {"chain": ["gpt-backup"]}})
    policies = gw.gateway.policies
    route = policies.route("team-a", "claude-test", "/v1/chat/completions")
    with capture_logs() as events:
        await gw.async_openai().chat.completions.create(
            model="claude-test", messages=[{"role": "user", "content": "hi"}], temperature=1.5
        )
    live = [
        (e["model"], e["fallback_model"], e["reason"])
        for e in events
        if e["event"] == "fallback_used"
    ]
    assert live == [("claude-test", "gpt-backup", "untranslatable")]
    assert [r.model for r in fake.requests] == ["gpt-backup"]
    with capture_logs() as events:
        timeline = await run(Scenario(
            route.policy, route.id, "team-a", "claude-test", "200", 0,
            deployments_of=lambda m: (policies.deployments[m], policies.models[m].balance),
            fields={"temperature": 1.5},
        ))  # fmt: skip
    simulated = [
        (e["model"], e["fallback_model"], e["reason"])
        for e in events
        if e["event"] == "fallback_used"
    ]
    assert simulated == live
    assert "not sent: untranslatable" in timeline and "answered after 2 attempt(s)" in timeline
