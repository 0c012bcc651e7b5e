"""``simulate``'s entry points in memory: a :class:`Scenario` run through the real loops,
and the command line's checks of its ``NAME=VALUE`` options (no subprocess, no socket)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import structlog

from gateway import simulate as sim
from gateway.policy.schema import Policy
from gateway.simulate import Scenario, run, simulate

pytestmark = pytest.mark.fast

POLICIES = Path(__file__).resolve().parents[1] / "policies"


async def test_a_scenario_with_only_what_it_must_name() -> None:
    """Seed 0, a short conversation, one deployment, the chat format: the defaults."""
    timeline = await run(Scenario(Policy(), "r", "t", "m", "500,200"))
    assert "retry in" in timeline and "answered after 2 attempt(s)" in timeline
    again = await simulate(Scenario(Policy(), "r", "t", "m", "500,200", 0, "short"))
    assert again.timeline == timeline and again.models == ["m", "m"]


async def test_the_recorder_notes_what_the_loops_decide() -> None:
    """A give-up lands on its attempt's row; a continuation on the part it continues."""
    gave_up = await run(Scenario(Policy(), "r", "t", "m", "400"))
    assert "give up (not_retryable)" in gave_up and gave_up.endswith("(virtual time)")
    continued = await simulate(Scenario(Policy(), "r", "t", "m", "200:length,200"))
    assert continued.decisions == [("continue", "1")]
    assert "continue (#1)" in continued.timeline and continued.recovery == ["continuation"]


def args(**given: Any) -> argparse.Namespace:
    base = {
        "policies": str(POLICIES), "team": "demo", "model": "sim-ok", "script": "200",
        "path": "/v1/chat/completions", "field": None, "timeout": None, "seed": 0,
        "deployment": None, "stream": False, "conversation": "short", "session": None,
    }  # fmt: skip
    return argparse.Namespace(**{**base, **given})


@pytest.mark.parametrize(
    ("given", "status", "said"),
    [
        ({}, 0, "answered after 1 attempt(s)"),
        ({"deployment": ["no-equals"]}, 2, "--deployment 'no-equals': write NAME=SCRIPT"),
        ({"deployment": ["=500"]}, 2, "unknown deployment ''"),
        ({"field": ["=1"]}, 2, "--field '=1': write NAME=JSON"),
        ({"field": ["temperature=warm"]}, 2, "--field 'temperature=warm': write NAME=JSON"),
        ({"field": ["temperature=0.5"]}, 0, "answered after 1 attempt(s)"),
        ({"team": "nobody"}, 1, "unknown team 'nobody'"),
        ({"path": "/v2/x"}, 1, "unknown endpoint '/v2/x'"),
        ({"model": "nope"}, 1, "404: unknown model 'nope'"),
        ({"script": "bogus"}, 2, "bogus"),
    ],
)
def test_the_command_line(
    given: dict[str, Any],
    status: int,
    said: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(structlog, "configure", lambda **_: None)  # keep this process's logs
    assert sim.main(args(**given)) == status
    out = capsys.readouterr()
    assert said in (out.out if status == 0 else out.err)


AGENT_POLICY = """
providers:
  anthropic: {api: openai, base_url: https://a.example.com/v1, api_key_env: KEY_A}
  bedrock-us: {api: openai, base_url: https://b.example.com/v1, api_key_env: KEY_B}
  vertex-eu: {api: openai, base_url: https://c.example.com/v1, api_key_env: KEY_C}
models:
  agent-model:
    deployments: [{provider: anthropic}, {provider: bedrock-us}, {provider: vertex-eu}]
teams:
  t:
    keys: ["sha256:0000000000000000000000000000000000000000000000000000000000000000"]
    models: ["*"]
"""


def test_simulate_shows_where_a_session_goes_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--session S``: the session's order of the deployments, and the attempts by it: a
    429 on its first sends the retry to its second at once."""
    from gateway.resilience import affinity

    monkeypatch.setattr(structlog, "configure", lambda **_: None)
    (tmp_path / "p.yaml").write_text(AGENT_POLICY)
    names = ["anthropic", "bedrock-us", "vertex-eu"]
    order = [names[i] for i in affinity.ranked(affinity.digest("t", "s-1"), names, [1, 1, 1])]
    given = {"policies": str(tmp_path), "team": "t", "model": "agent-model", "session": "s-1"}
    assert sim.main(args(**given, deployment=[f"{order[0]}=429:ra=30"])) == 0
    out = capsys.readouterr().out
    label = affinity.label(affinity.digest("t", "s-1"))
    assert f"session {label} ranks " + ", ".join(f"agent-model@{n}" for n in order) in out
    assert "s-1" not in out.replace(f"session {label}", "")  # the value is never shown
    lines = out.splitlines()
    rows = [
        line.split()[2]
        for line in lines[lines.index(next(x for x in lines if x.startswith("attempt"))) + 1 : -1]
    ]
    assert rows == [f"agent-model@{order[0]}", f"agent-model@{order[1]}"], out
