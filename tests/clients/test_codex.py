"""The Codex CLI (npm ``@openai/codex``): ``codex exec`` over the Responses API.

Configured the way a user would: a ``model_providers`` entry in
``$CODEX_HOME/config.toml`` with ``wire_api = "responses"`` and ``env_key`` naming
the variable that holds the gateway key.
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

UPSTREAM = "fake-model"  # gpt-test's upstream name in the harness
RESPONSES = "/v1/responses"
CONFIG = """\
model = "gpt-test"
model_provider = "gateway"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.gateway]
name = "llm-gateway"
base_url = "{url}/v1"
env_key = "LLM_GATEWAY_KEY"
wire_api = "responses"
"""
# The client's own retries off: whatever reaches codex shows in its exit code.
NO_CLIENT_RETRIES = "request_max_retries = 0\nstream_max_retries = 0\n"


@pytest.fixture(scope="module")
def codex() -> str:
    return str(node_client("@openai/codex", "codex"))


def scenario(
    codex: str,
    prompt: str,
    *extra: str,
    retries: bool = True,
    model: str = "gpt-test",
    top: str = "",
    **kw: object,
) -> Scenario:
    """``top``: more top-level ``config.toml`` settings."""
    config = top + CONFIG.replace('model = "gpt-test"', f'model = "{model}"')
    config = config if retries else config + NO_CLIENT_RETRIES
    env = {"CODEX_HOME": "{work}/codex-home", "LLM_GATEWAY_KEY": "{key}"}
    argv = [codex, "exec", "--skip-git-repo-check", *extra, prompt]
    files = {"codex-home/config.toml": config}
    return Scenario([Command(argv, env=env, timeout=120)], files=files, **kw)  # type: ignore[arg-type]


def test_prompt(codex: str, tmp_path: Path) -> None:
    out = run_scenario(scenario(codex, "Say hello"), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert [r.path for r in out.gateway_requests if r.method == "POST"] == [RESPONSES]
    upstream = fake_posts(out)[0]
    assert upstream["headers"]["authorization"] != "Bearer team-a-client-key"


def test_tool_round_trip(codex: str, tmp_path: Path) -> None:
    """The model calls exec_command; codex runs it and sends the function_call_output."""
    call = {"name": "exec_command", "arguments": {"cmd": "echo gateway-tool-ok > marker.txt"}}
    sc = scenario(
        codex,
        "Write the marker file",
        "-s",
        "danger-full-access",
        script=[(UPSTREAM, Success(tool_call=call))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert out.files.get("marker.txt", "").strip() == "gateway-tool-ok", show(out)
    assert "The tool returned:" in cmd.stdout, show(out)
    last = fake_posts(out)[-1]["body"]["input"]
    assert any(i.get("type") == "function_call_output" for i in last), show(out)
    assert len(gateway_posts(out, RESPONSES)) == 2, show(out)


def test_rate_limit_absorbed(codex: str, tmp_path: Path) -> None:
    sc = scenario(
        codex, "Say hello", retries=False, script=[(UPSTREAM, Error.openai_rate_limit(0.2))]
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert_absorbed(out, RESPONSES, UPSTREAM)


def test_midstream_cut_is_an_error(codex: str, tmp_path: Path) -> None:
    """With its stream retries off, a cut stream is codex's own error, never an answer."""
    sc = scenario(codex, "Say hello", retries=False, script=[(UPSTREAM, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode != 0, show(out)
    assert "ERROR: stream disconnected before completion" in cmd.stderr, show(out)
    assert REPLY.format(model=UPSTREAM) not in cmd.stdout, show(out)


def test_midstream_cut_shows_gateway_reason(codex: str, tmp_path: Path) -> None:
    sc = scenario(codex, "Say hello", retries=False, script=[(UPSTREAM, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode != 0, show(out)
    assert "interrupted" in cmd.stderr, show(out)


def test_midstream_cut_default_client_retries(codex: str, tmp_path: Path) -> None:
    """With its default stream retries codex asks again and gets the whole answer."""
    out = run_scenario(scenario(codex, "Say hello", script=[(UPSTREAM, CutAfter(3))]), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert len(gateway_posts(out, RESPONSES)) == 2, show(out)


def test_midstream_cut_continued(codex: str, tmp_path: Path) -> None:
    sc = scenario(
        codex,
        "Say hello",
        retries=False,
        script=[(UPSTREAM, CutAfter(3))],
        policy={"stream": {"on_midstream_failure": "continue"}},
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=UPSTREAM)) == 1, show(out)
    assert len(gateway_posts(out, RESPONSES)) == 1, show(out)


# ---- on an Anthropic-format model (docs/translation.md) -----------------------------
# codex speaks the Responses API only; claude-test is served by the fake's Anthropic-format
# provider (``api: anthropic``): the gateway sends Messages upstream and translates back.
ANTHROPIC_MODEL = "claude-test"
MESSAGES = "/v1/messages"
# codex offers its hosted ``web_search`` tool (OpenAI runs the search) unless told not to;
# a model of another format answers without it: the tool is dropped and named in
# x-gateway-dropped (test_anthropic_model_answers_without_the_hosted_web_search). The other
# tests turn it off, as a codex user on such a model may.
NO_WEB_SEARCH = 'web_search = "disabled"\n'


def on_anthropic_model(codex: str, prompt: str, *extra: str, **kw: object) -> Scenario:
    return scenario(codex, prompt, *extra, model=ANTHROPIC_MODEL, top=NO_WEB_SEARCH, **kw)  # type: ignore[arg-type]


def test_anthropic_model_prompt(codex: str, tmp_path: Path) -> None:
    out = run_scenario(on_anthropic_model(codex, "Say hello"), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=ANTHROPIC_MODEL) in cmd.stdout, show(out)
    (post,) = gateway_posts(out, RESPONSES)
    assert post.headers.get("x-gateway-model") == ANTHROPIC_MODEL, post.headers
    (upstream,) = fake_posts(out)
    assert upstream["path"] == MESSAGES, show(out)
    body = upstream["body"]
    assert body["stream"] is True and body["max_tokens"] > 0
    assert isinstance(body["system"], list | str) and body["system"]  # codex's instructions
    # codex's sub-agent functions come as a Responses namespace tool: offered flattened
    names = {t["name"] for t in body["tools"]}
    assert {"exec_command", "multi_agent_v1__spawn_agent"} <= names, sorted(names)
    assert upstream["headers"]["x-api-key"] != "team-a-client-key"


def test_anthropic_model_tool_round_trip(codex: str, tmp_path: Path) -> None:
    """The Anthropic-format model calls exec_command (a tool_use); codex runs it and its
    function_call_output goes back upstream as a tool_result with the same id."""
    args = {"cmd": "echo gateway-tool-ok | tee marker.txt"}
    sc = on_anthropic_model(
        codex,
        "Write the marker file",
        "-s",
        "danger-full-access",
        script=[(ANTHROPIC_MODEL, Success(tool_call={"name": "exec_command", "arguments": args}))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert out.files.get("marker.txt", "").strip() == "gateway-tool-ok", show(out)
    assert "The tool returned:" in cmd.stdout, show(out)
    assert [r.status for r in gateway_posts(out, RESPONSES)] == [200, 200], show(out)
    first, second = fake_posts(out, ANTHROPIC_MODEL)
    assert first["path"] == second["path"] == MESSAGES, show(out)
    *_, called, answered = second["body"]["messages"]
    assert called["role"] == "assistant" and answered["role"] == "user", show(out)
    (use,) = [b for b in called["content"] if b["type"] == "tool_use"]
    assert use["id"].startswith("toolu_fake") and use["name"] == "exec_command", use
    assert use["input"] == args
    (result,) = answered["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == use["id"], result
    assert "gateway-tool-ok" in str(result["content"]), result


def test_anthropic_model_namespaced_tool_call(codex: str, tmp_path: Path) -> None:
    """The model calls one of codex's namespaced functions by its flat name; codex gets it
    back in its namespace (``multi_agent_v1`` / ``close_agent``) and runs its own handler
    (which rejects the made-up agent id: the proof that it was dispatched)."""
    call = {"name": "multi_agent_v1__close_agent", "arguments": {"target": "agent-nobody"}}
    sc = on_anthropic_model(
        codex, "Close the agent", script=[(ANTHROPIC_MODEL, Success(tool_call=call))]
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert "The tool returned: invalid agent id agent-nobody" in cmd.stdout, show(out)
    _, second = fake_posts(out, ANTHROPIC_MODEL)
    *_, called, answered = second["body"]["messages"]
    (use,) = [b for b in called["content"] if b["type"] == "tool_use"]
    assert use["name"] == "multi_agent_v1__close_agent", use
    assert answered["content"][0]["tool_use_id"] == use["id"], show(out)


def test_anthropic_model_overload_absorbed(codex: str, tmp_path: Path) -> None:
    """An Anthropic 529 overloaded under a Responses client: retried by the gateway."""
    sc = on_anthropic_model(
        codex, "Say hello", retries=False, script=[(ANTHROPIC_MODEL, Error.anthropic_overloaded())]
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=ANTHROPIC_MODEL) in cmd.stdout, show(out)
    assert_absorbed(out, RESPONSES, ANTHROPIC_MODEL)
    assert all(r["path"] == MESSAGES for r in fake_posts(out, ANTHROPIC_MODEL))


def test_anthropic_model_answers_without_the_hosted_web_search(codex: str, tmp_path: Path) -> None:
    """With its default config codex offers the hosted web_search tool, which an Anthropic
    model cannot run: it is dropped and named in x-gateway-dropped (docs/translation.md),
    and codex gets its answer."""
    sc = scenario(codex, "Say hello", model=ANTHROPIC_MODEL, retries=False)
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=ANTHROPIC_MODEL) in cmd.stdout, show(out)
    answered = gateway_posts(out, RESPONSES)
    assert {r.status for r in answered} == {200}, show(out)
    assert all("tools.web_search" in r.headers["x-gateway-dropped"] for r in answered), show(out)
    assert all("web_search" not in str(r["body"].get("tools")) for r in fake_posts(out)), show(out)
