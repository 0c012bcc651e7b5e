"""aider (PyPI ``aider-chat``): chat completions through litellm, ``--message`` mode.

aider edits files from the model's text (no function calling), so its "tool"
round trip is an edit: the model answers a ``whole``-format block and aider
writes the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.testing import CutAfter, Error, Success
from tests.clients.checks import REPLY, assert_absorbed, gateway_posts, only, show
from tests.clients.runner import python_client, run_scenario
from tests.clients.scenario import Command, Scenario

pytestmark = [pytest.mark.clients, pytest.mark.heavy]

UPSTREAM = "fake-model"  # gpt-test's upstream name in the harness
CHAT = "/v1/chat/completions"
ENV = {
    "OPENAI_API_BASE": "{url}/v1",
    "OPENAI_API_KEY": "{key}",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm: no model-price download
    "AIDER_ANALYTICS_DISABLE": "1",
}
ARGS = [
    "--model", "openai/gpt-test", "--edit-format", "whole",
    "--no-analytics", "--no-check-update", "--no-show-release-notes",
    "--no-show-model-warnings", "--no-git", "--yes-always", "--no-pretty", "--no-fancy-input",
]  # fmt: skip
# aider downloads litellm's model price list once a day into ~/.aider/caches; a fresh
# cache file is the only way to stop that (there is no switch).
MODEL_INFO = {"max_input_tokens": 32768, "max_output_tokens": 4096, "mode": "chat"}
MODEL_CACHE = json.dumps({"openai/gpt-test": {**MODEL_INFO, "litellm_provider": "openai"}})
FILES = {"home/.aider/caches/model_prices_and_context_window.json": MODEL_CACHE}


@pytest.fixture(scope="module")
def aider() -> str:
    return str(python_client("aider", "aider-chat", "aider"))


def ask(aider: str, message: str, *extra: str, **env: str) -> Command:
    return Command([aider, *ARGS, *extra, "--message", message], env={**ENV, **env}, timeout=180)


def no_network_attempts(out: object) -> None:
    text = "".join(c.stdout + c.stderr for c in out.commands)  # type: ignore[attr-defined]
    assert "NameResolutionError" not in text and "Max retries exceeded" not in text, text


def test_prompt(aider: str, tmp_path: Path) -> None:
    out = run_scenario(Scenario([ask(aider, "Say hello")], files=FILES), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert [r.path for r in gateway_posts(out, CHAT)] == [CHAT], show(out)
    no_network_attempts(out)


def test_edit_round_trip(aider: str, tmp_path: Path) -> None:
    reply = "hello.txt\n```\ngateway-edit-ok\n```\n"
    sc = Scenario(
        [ask(aider, "Put gateway-edit-ok in hello.txt", "hello.txt")],
        files={**FILES, "hello.txt": "old\n"},
        script=[(UPSTREAM, Success(text=reply))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert "Applied edit to hello.txt" in cmd.stdout, show(out)
    assert out.files["hello.txt"].strip() == "gateway-edit-ok", show(out)


def test_rate_limit_absorbed(aider: str, tmp_path: Path) -> None:
    sc = Scenario(
        [ask(aider, "Say hello")],
        files=FILES,
        script=[(UPSTREAM, Error.openai_rate_limit(retry_after=0.2))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert "rate" not in cmd.stdout.lower(), show(out)
    assert_absorbed(out, CHAT, UPSTREAM)


def test_midstream_cut_is_an_error(aider: str, tmp_path: Path) -> None:
    """aider reports the cut as litellm's APIConnectionError with the gateway's reason,
    then (its own choice) retries the request and prints the whole answer once."""
    sc = Scenario([ask(aider, "Say hello")], files=FILES, script=[(UPSTREAM, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert "APIConnectionError" in cmd.stdout and "interrupted" in cmd.stdout, show(out)
    assert "Retrying in" in cmd.stdout, show(out)
    assert len(gateway_posts(out, CHAT)) == 2, show(out)  # the client's retry, not ours


def test_midstream_cut_continued(aider: str, tmp_path: Path) -> None:
    sc = Scenario(
        [ask(aider, "Say hello")],
        files=FILES,
        script=[(UPSTREAM, CutAfter(3))],
        policy={"stream": {"on_midstream_failure": "continue"}},
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=UPSTREAM)) == 1, show(out)
    assert len(gateway_posts(out, CHAT)) == 1, show(out)
