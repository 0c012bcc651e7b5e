"""Claude Code on Claude served by Bedrock and by Vertex (the fake clouds: SigV4 checked on
every Bedrock request, Google tokens on Vertex), under its own default model name and
under a name of the platform's choosing.

Under a name it does not know, Claude Code ends ``messages`` with a ``role: system`` turn
(announced by the beta ``mid-conversation-system-2026-04-07``) and sends betas the clouds
refuse; the fakes refuse both as the clouds do, so these pass only if the gateway sends
each cloud the Messages dialect it takes (docs/clouds.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.providers.kinds import BEDROCK_BETAS, VERTEX_BETAS
from gateway.testing import Error, Success
from tests.clients.checks import REPLY, fake_posts, gateway_posts, only, show
from tests.clients.runner import run_scenario
from tests.clients.scenario import Outcome, Scenario
from tests.clients.test_claude_code import MESSAGES, ask, claude  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.clients, pytest.mark.heavy]

DEFAULT = "claude-opus-4-8"  # Claude Code's own default model name
UPSTREAM = {
    "bedrock": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "vertex": "claude-sonnet-4-5@20250929",
}
PROVIDER = {"bedrock": "bedrock-us", "vertex": "vertex-eu"}
BETAS = {"bedrock": BEDROCK_BETAS, "vertex": VERTEX_BETAS}
#: (the name Claude Code is given, the cloud serving it)
SERVED = [
    (DEFAULT, "bedrock"),
    ("claude-bedrock", "bedrock"),
    (DEFAULT, "vertex"),
    ("claude-vertex", "vertex"),
]


def on_cloud(name: str, cloud: str) -> dict[str, Any]:
    return {name: {"provider": PROVIDER[cloud], "upstream_model": UPSTREAM[cloud]}}


def assert_cloud_dialect(out: Outcome, cloud: str) -> list[dict[str, Any]]:
    """Every request the cloud got: signed (Bedrock) or with a token (Vertex), no system
    turn, only betas it takes; every answer of the gateway a 200. The requests."""
    calls = [r for r in fake_posts(out, UPSTREAM[cloud]) if r["cloud"] == cloud]
    assert calls, show(out)
    for r in calls:
        auth = r["headers"]["authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 " if cloud == "bedrock" else "Bearer ya29")
        body = r["body"]
        if cloud == "bedrock" and "input" in body:  # a count: the InvokeModel body inside
            continue
        assert all(m["role"] in ("user", "assistant") for m in body["messages"]), show(out)
        sent = body.get("anthropic_beta", []) if cloud == "bedrock" else (
            [b for b in r["headers"].get("anthropic-beta", "").split(",") if b]
        )  # fmt: skip
        assert set(sent) <= BETAS[cloud], sent
    posts = [r for r in out.gateway_requests if r.method == "POST"]
    assert posts and all(r.status == 200 for r in posts), show(out)
    return calls


@pytest.mark.parametrize(("name", "cloud"), SERVED)
def test_prompt(claude: str, tmp_path: Path, name: str, cloud: str) -> None:  # noqa: F811
    sc = Scenario([ask(claude, ANTHROPIC_MODEL=name)], models=on_cloud(name, cloud), clouds=True)
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM[cloud]) in cmd.stdout, show(out)
    assert_cloud_dialect(out, cloud)
    # the system turn Claude Code sent was folded, the beta announcing it dropped
    dropped = gateway_posts(out, MESSAGES)[0].headers.get("x-gateway-dropped", "")
    assert "anthropic-beta:mid-conversation-system-" in dropped, show(out)


@pytest.mark.parametrize(("name", "cloud"), SERVED)
def test_tool_round_trip(claude: str, tmp_path: Path, name: str, cloud: str) -> None:  # noqa: F811
    """The cloud's Claude asks for Bash; Claude Code runs it and sends the result back."""
    call = {"name": "Bash", "arguments": {"command": "echo gateway-tool-ok > marker.txt",
                                          "description": "Write the marker file"}}  # fmt: skip
    sc = Scenario(
        [ask(claude, "Write the marker file", "--allowedTools", "Bash", ANTHROPIC_MODEL=name)],
        script=[(UPSTREAM[cloud], Success(tool_call=call))],
        models=on_cloud(name, cloud),
        clouds=True,
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert out.files.get("marker.txt", "").strip() == "gateway-tool-ok", show(out)
    calls = assert_cloud_dialect(out, cloud)
    last = calls[-1]["body"]["messages"][-1]["content"]
    assert any(b.get("type") == "tool_result" for b in last), show(out)


@pytest.mark.parametrize(("name", "cloud"), SERVED)
def test_context(claude: str, tmp_path: Path, name: str, cloud: str) -> None:  # noqa: F811
    """``/context``: Claude Code's token counts of its context, answered by the cloud."""
    sc = Scenario(
        [ask(claude, "/context", ANTHROPIC_MODEL=name)], models=on_cloud(name, cloud), clouds=True
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert "token" in cmd.stdout.lower(), show(out)
    counts = gateway_posts(out, MESSAGES + "/count_tokens")
    assert counts and not any("x-gateway-estimate" in r.headers for r in counts), show(out)
    assert_cloud_dialect(out, cloud)  # the cloud's own counts, every one a 200


def test_overloaded_anthropic_fails_over_to_bedrock(claude: str, tmp_path: Path) -> None:  # noqa: F811
    """Claude Code's default name served by Anthropic, then Bedrock: Anthropic's 529 is
    answered by Bedrock, with the client's own retries off."""
    models = {
        DEFAULT: {
            "deployments": [
                {"provider": "fake-anthropic", "upstream_model": DEFAULT},
                {"provider": "bedrock-us", "upstream_model": UPSTREAM["bedrock"]},
            ],
            "balance": "ordered",
        }
    }
    sc = Scenario(
        [ask(claude, ANTHROPIC_MODEL=DEFAULT, CLAUDE_CODE_MAX_RETRIES="0")],
        script=[(DEFAULT, Error.anthropic_overloaded())],
        models=models,
        clouds=True,
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM["bedrock"]) in cmd.stdout, show(out)
    assert_cloud_dialect(out, "bedrock")
    first = gateway_posts(out, MESSAGES)[0]
    assert first.headers.get("x-gateway-attempts") == "2", first.headers
