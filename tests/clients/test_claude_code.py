"""Claude Code (npm ``@anthropic-ai/claude-code``) in print mode through the gateway.

It warms up with ``HEAD /``, then calls ``POST /v1/messages?beta=true`` (streaming)
with its ``anthropic-beta`` headers; the key goes as ``x-api-key``
(``ANTHROPIC_API_KEY``) or ``Authorization: Bearer`` (``ANTHROPIC_AUTH_TOKEN``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import CutAfter, Error, Success
from tests.clients.checks import (
    REPLY,
    assert_absorbed,
    fake_posts,
    gateway_posts,
    only,
    show,
)
from tests.clients.runner import node_client, run_scenario
from tests.clients.scenario import Command, Scenario

pytestmark = [pytest.mark.clients, pytest.mark.heavy]

MODEL = "claude-test"
QUIET = {
    # No telemetry, error reports, update checks or other calls home.
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
BASE_ENV = {
    **QUIET,
    "ANTHROPIC_BASE_URL": "{url}",
    "ANTHROPIC_MODEL": MODEL,
    # Its small/fast model (titles, quota checks) must be a model of the gateway too.
    "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-haiku-test",
    "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-test",
    "CLAUDE_CONFIG_DIR": "{home}/.claude",
}
MESSAGES = "/v1/messages"


@pytest.fixture(scope="module")
def claude() -> str:
    return str(node_client("@anthropic-ai/claude-code", "claude"))


def ask(claude: str, text: str = "Say hello", *extra: str, **env: str) -> Command:
    argv = [claude, "-p", text, "--output-format", "text", *extra]
    return Command(argv, env={**BASE_ENV, "ANTHROPIC_API_KEY": "{key}", **env}, timeout=120)


def test_prompt_with_x_api_key(claude: str, tmp_path: Path) -> None:
    out = run_scenario(Scenario([ask(claude)]), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=MODEL) in cmd.stdout, show(out)
    posts = gateway_posts(out, MESSAGES)
    assert posts and all(r.query == "beta=true" for r in posts), show(out)
    assert posts[0].request_headers.get("x-api-key") == "***", show(out)
    # Query string and provider headers go upstream; the client's key never does.
    upstream = fake_posts(out, MODEL)[0]
    assert upstream["query"] == "beta=true"
    assert "claude-code" in upstream["headers"]["anthropic-beta"]
    assert upstream["headers"]["x-api-key"] != "team-a-client-key"


def test_prompt_with_bearer_token(claude: str, tmp_path: Path) -> None:
    cmd = ask(claude)
    cmd.env.pop("ANTHROPIC_API_KEY")
    cmd.env["ANTHROPIC_AUTH_TOKEN"] = "{key}"
    out = run_scenario(Scenario([cmd]), tmp_path)
    assert only(out).returncode == 0, show(out)
    assert REPLY.format(model=MODEL) in only(out).stdout, show(out)
    assert gateway_posts(out, MESSAGES)[0].request_headers.get("authorization") == "***"


def test_tool_round_trip(claude: str, tmp_path: Path) -> None:
    """The model asks for Bash; Claude Code runs it (allowed) and sends the result back."""
    call = {"name": "Bash", "arguments": {"command": "echo gateway-tool-ok > marker.txt",
                                          "description": "Write the marker file"}}  # fmt: skip
    sc = Scenario(
        [ask(claude, "Write the marker file", "--allowedTools", "Bash")],
        script=[(MODEL, Success(tool_call=call))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert out.files.get("marker.txt", "").strip() == "gateway-tool-ok", show(out)
    assert "The tool returned:" in cmd.stdout, show(out)
    second = fake_posts(out, MODEL)[-1]["body"]["messages"][-1]["content"]
    assert any(b.get("type") == "tool_result" for b in second), show(out)


@pytest.mark.parametrize(
    "error",
    [Error.anthropic_rate_limit(retry_after=0.2), Error.anthropic_overloaded()],
    ids=["429", "529"],
)
def test_provider_error_absorbed(claude: str, tmp_path: Path, error: Error) -> None:
    # The client's own retries are off, so an error reaching it would fail the command.
    sc = Scenario([ask(claude, CLAUDE_CODE_MAX_RETRIES="0")], script=[(MODEL, error)])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=MODEL) in cmd.stdout, show(out)
    assert_absorbed(out, MESSAGES, MODEL)


def test_midstream_cut_is_an_error(claude: str, tmp_path: Path) -> None:
    """With its retries and non-streaming fallback off, the cut is Claude Code's error."""
    env = {"CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK": "1"}
    sc = Scenario([ask(claude, **env)], script=[(MODEL, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode != 0, show(out)
    assert "interrupted" in cmd.stdout + cmd.stderr, show(out)
    assert REPLY.format(model=MODEL) not in cmd.stdout, show(out)


def test_midstream_cut_default_client_recovers(claude: str, tmp_path: Path) -> None:
    """By default Claude Code answers a broken stream by asking again without streaming."""
    sc = Scenario([ask(claude)], script=[(MODEL, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=MODEL)) == 1, show(out)
    bodies = [r["body"] for r in fake_posts(out, MODEL)]
    assert [b.get("stream") for b in bodies] == [True, None], show(out)


def test_midstream_cut_continued(claude: str, tmp_path: Path) -> None:
    env = {"CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK": "1"}
    sc = Scenario(
        [ask(claude, **env)],
        script=[(MODEL, CutAfter(3))],
        policy={"stream": {"on_midstream_failure": "continue"}},
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=MODEL)) == 1, show(out)
    assert len(gateway_posts(out, MESSAGES)) == 1, show(out)
