"""Claude Code (npm ``@anthropic-ai/claude-code``) in print mode through the gateway.

It warms up with ``HEAD /``, then calls ``POST /v1/messages?beta=true`` (streaming)
with its ``anthropic-beta`` headers; the key goes as ``x-api-key``
(``ANTHROPIC_API_KEY``) or ``Authorization: Bearer`` (``ANTHROPIC_AUTH_TOKEN``).
"""

from __future__ import annotations

import json
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


# ---- on a model of the other format (docs/translation.md) ---------------------------
# Claude Code speaks Anthropic Messages only; gpt-test is served by the fake's
# OpenAI-format provider (``api: openai``, upstream name fake-model): the gateway sends
# chat completions upstream and translates the answer (stream or JSON) back.
OPENAI_MODEL = "gpt-test"
OPENAI_UPSTREAM = "fake-model"
CHAT = "/v1/chat/completions"


def on_openai_model(claude: str, *args: str, **env: str) -> Command:
    return ask(claude, *args, ANTHROPIC_MODEL=OPENAI_MODEL, **env)


def test_openai_model_prompt(claude: str, tmp_path: Path) -> None:
    out = run_scenario(Scenario([on_openai_model(claude)]), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=OPENAI_UPSTREAM) in cmd.stdout, show(out)
    posts = gateway_posts(out, MESSAGES)
    assert posts and all(r.headers.get("x-gateway-model") == OPENAI_MODEL for r in posts)
    upstream = fake_posts(out, OPENAI_UPSTREAM)
    assert [r["path"] for r in upstream] == [CHAT] * len(posts), show(out)
    body = upstream[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["role"] == "system"  # Claude Code's system prompt
    # Anthropic's own headers, query and the client's key stay on the client's side
    headers = upstream[0]["headers"]
    assert "anthropic-beta" not in headers and upstream[0]["query"] == ""
    assert headers["authorization"] != "Bearer team-a-client-key"


def test_openai_model_tool_round_trip(claude: str, tmp_path: Path) -> None:
    """The chat-format model calls Bash; Claude Code runs it and its tool_result goes back
    upstream as a ``role: tool`` message with the call's id; the final answer is shown."""
    args = {"command": "echo gateway-tool-ok | tee marker.txt",
            "description": "Write the marker file"}  # fmt: skip
    sc = Scenario(
        [on_openai_model(claude, "Write the marker file", "--allowedTools", "Bash")],
        script=[(OPENAI_UPSTREAM, Success(tool_call={"name": "Bash", "arguments": args}))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert out.files.get("marker.txt", "").strip() == "gateway-tool-ok", show(out)
    assert "The tool returned: gateway-tool-ok" in cmd.stdout, show(out)
    posts = gateway_posts(out, MESSAGES)
    assert [r.status for r in posts] == [200, 200], show(out)
    first, second = fake_posts(out, OPENAI_UPSTREAM)
    assert first["path"] == second["path"] == CHAT, show(out)
    offered = {t["function"]["name"]: t for t in first["body"]["tools"]}
    assert offered["Bash"]["type"] == "function"
    assert "command" in offered["Bash"]["function"]["parameters"]["properties"]
    assert "Write the marker file" in json.dumps(first["body"]["messages"])
    *_, called, result = second["body"]["messages"]
    assert called["role"] == "assistant", show(out)
    (call,) = called["tool_calls"]
    assert call["id"].startswith("call_fake"), call  # the id the fake gave its call
    assert call["function"]["name"] == "Bash"
    assert json.loads(call["function"]["arguments"]) == args
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"], result
    assert "gateway-tool-ok" in result["content"], result


def test_openai_model_rate_limit_absorbed(claude: str, tmp_path: Path) -> None:
    """An OpenAI 429 with Retry-After under an Anthropic client: retried by the gateway."""
    sc = Scenario(
        [on_openai_model(claude, CLAUDE_CODE_MAX_RETRIES="0")],
        script=[(OPENAI_UPSTREAM, Error.openai_rate_limit(retry_after=0.2))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=OPENAI_UPSTREAM) in cmd.stdout, show(out)
    assert_absorbed(out, MESSAGES, OPENAI_UPSTREAM)
    assert all(r["path"] == CHAT for r in fake_posts(out, OPENAI_UPSTREAM))


def test_openai_model_midstream_cut_default_client_recovers(claude: str, tmp_path: Path) -> None:
    """A translated stream cut mid-way ends in an Anthropic error event; Claude Code asks
    again without streaming and reads the translated JSON answer."""
    sc = Scenario([on_openai_model(claude)], script=[(OPENAI_UPSTREAM, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=OPENAI_UPSTREAM)) == 1, show(out)
    bodies = [r["body"] for r in fake_posts(out, OPENAI_UPSTREAM)]
    assert [b.get("stream") for b in bodies] == [True, None], show(out)


def test_fallback_across_formats(claude: str, tmp_path: Path) -> None:
    """claude-test (Anthropic format) is overloaded (529) every time; the route's fallback
    chain names gpt-backup (OpenAI format), which answers the same request."""
    sc = Scenario(
        [ask(claude, CLAUDE_CODE_MAX_RETRIES="0")],
        script=[(MODEL, Error.anthropic_overloaded())] * 6,
        policy={"fallback": {"chain": ["gpt-backup"]}},
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model="gpt-backup") in cmd.stdout, show(out)
    (post,) = gateway_posts(out, MESSAGES)
    assert post.status == 200, show(out)
    assert post.headers.get("x-gateway-model") == "gpt-backup", post.headers
    assert "fallback" in post.headers.get("x-gateway-recovery", ""), post.headers
    primary, backup = fake_posts(out, MODEL), fake_posts(out, "gpt-backup")
    assert primary and all(r["path"] == MESSAGES for r in primary), show(out)
    assert [r["path"] for r in backup] == [CHAT], show(out)
