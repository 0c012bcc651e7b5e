"""``llm-gateway simulate`` tells the truth: its timeline matches what the live gateway does."""

from __future__ import annotations

import re
import subprocess
import sys

from structlog.testing import capture_logs

from gateway.simulate import run
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
    timeline = await run(route.policy, route.id, "team-a", "gpt-test", "429:ms=200,500,500,200", 0)
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
