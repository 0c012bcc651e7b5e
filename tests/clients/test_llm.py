"""Simon Willison's ``llm`` with OpenAI-compatible model entries pointing at the gateway.

Two entries in ``extra-openai-models.yaml``: one on chat completions, one on the
Responses API (``responses: true``, llm >= 0.27), both with tools enabled.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import CutAfter, Error
from tests.clients.checks import REPLY, assert_absorbed, only, show
from tests.clients.runner import python_client, run_scenario
from tests.clients.scenario import Command, Scenario

pytestmark = pytest.mark.clients

UPSTREAM = "fake-model"  # gpt-test's upstream name in the harness
MODELS_YAML = """\
- model_id: gateway-chat
  model_name: gpt-test
  api_base: "{url}/v1"
  api_key_name: gateway
  supports_tools: true
- model_id: gateway-responses
  model_name: gpt-test
  api_base: "{url}/v1"
  api_key_name: gateway
  supports_tools: true
  responses: true
"""
FILES = {
    "llm/extra-openai-models.yaml": MODELS_YAML,
    "llm/keys.json": '{"gateway": "{key}"}',  # what `llm keys set gateway` writes
}
TOOL = 'def lookup_weather(city: str) -> str:\n    return "sunny in " + city\n'
APIS = {"gateway-chat": "/v1/chat/completions", "gateway-responses": "/v1/responses"}
MODEL_IDS = list(APIS)


@pytest.fixture(scope="module")
def llm() -> str:
    return str(python_client("llm", "llm>=0.27", "llm"))


def prompt(llm: str, model: str, text: str = "Say hello", *extra: str) -> Command:
    env = {"LLM_USER_PATH": "{work}/llm"}
    return Command([llm, "-m", model, *extra, text], env=env, timeout=60)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("model", MODEL_IDS)
def test_prompt(llm: str, tmp_path: Path, model: str, stream: bool) -> None:
    extra = [] if stream else ["--no-stream"]
    out = run_scenario(Scenario([prompt(llm, model, "Say hello", *extra)], files=FILES), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    posts = [r for r in out.gateway_requests if r.method == "POST"]
    assert [r.path for r in posts] == [APIS[model]], show(out)


@pytest.mark.parametrize("model", MODEL_IDS)
def test_tool_round_trip(llm: str, tmp_path: Path, model: str) -> None:
    """The model calls lookup_weather, llm runs it and sends the result back."""
    cmd = prompt(llm, model, "Use lookup_weather for Paris", "--functions", TOOL, "--td")
    out = run_scenario(Scenario([cmd], files=FILES), tmp_path)
    result = only(out)
    assert result.returncode == 0, show(out)
    assert "The tool returned: sunny in fake city" in result.stdout, show(out)
    posts = [r for r in out.gateway_requests if r.method == "POST"]
    assert len(posts) == 2, show(out)
    second = out.fake_requests[-1]["body"]
    assert "sunny in fake city" in str(second), show(out)


@pytest.mark.parametrize("model", MODEL_IDS)
def test_rate_limit_absorbed(llm: str, tmp_path: Path, model: str) -> None:
    sc = Scenario(
        [prompt(llm, model)],
        files=FILES,
        script=[(UPSTREAM, Error.openai_rate_limit(retry_after=0.2))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert_absorbed(out, APIS[model], UPSTREAM)


@pytest.mark.parametrize("model", MODEL_IDS)
def test_midstream_cut_is_an_error(llm: str, tmp_path: Path, model: str) -> None:
    sc = Scenario([prompt(llm, model)], files=FILES, script=[(UPSTREAM, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode != 0, show(out)
    assert "Error" in cmd.stderr and "interrupted" in cmd.stderr, show(out)
    assert REPLY.format(model=UPSTREAM) not in cmd.stdout, show(out)


@pytest.mark.parametrize("model", MODEL_IDS)
def test_midstream_cut_continued(llm: str, tmp_path: Path, model: str) -> None:
    sc = Scenario(
        [prompt(llm, model)],
        files=FILES,
        script=[(UPSTREAM, CutAfter(3))],
        policy={"stream": {"on_midstream_failure": "continue"}},
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=UPSTREAM)) == 1, show(out)
