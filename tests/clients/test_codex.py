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


def scenario(codex: str, prompt: str, *extra: str, retries: bool = True, **kw: object) -> Scenario:
    config = CONFIG if retries else CONFIG + NO_CLIENT_RETRIES
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
