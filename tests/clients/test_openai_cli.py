"""The ``openai`` command line of ``openai<2`` (``openai api chat.completions.create``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import CutAfter, Error
from tests.clients.checks import REPLY, assert_absorbed, only, show
from tests.clients.runner import python_client, run_scenario
from tests.clients.scenario import Command, Scenario

pytestmark = pytest.mark.clients

MODEL = "gpt-test"  # the harness sends it upstream as "fake-model"
UPSTREAM = "fake-model"


@pytest.fixture(scope="module")
def openai_cli() -> str:
    return str(python_client("openai", "openai<2", "openai"))


def chat(cli: str, *extra: str) -> Command:
    # The CLI's -b flag is used verbatim: "-b URL/v1" would call URL/v1chat/completions
    # (it needs the trailing slash); the environment variables are the robust way.
    argv = [cli, "api", "chat.completions.create", "-m", MODEL, "-g", "user", "Say hello"]
    env = {"OPENAI_BASE_URL": "{url}/v1", "OPENAI_API_KEY": "{key}"}
    return Command([*argv, *extra], env=env, timeout=60)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_prompt(openai_cli: str, tmp_path: Path, stream: bool) -> None:
    out = run_scenario(Scenario([chat(openai_cli, *(["--stream"] if stream else []))]), tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_rate_limit_absorbed(openai_cli: str, tmp_path: Path, stream: bool) -> None:
    """The provider's 429 + Retry-After is retried by the gateway: one clean answer."""
    sc = Scenario(
        [chat(openai_cli, *(["--stream"] if stream else []))],
        script=[(UPSTREAM, Error.openai_rate_limit(retry_after=0.2))],
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert REPLY.format(model=UPSTREAM) in cmd.stdout, show(out)
    assert "rate" not in cmd.stderr.lower(), show(out)
    assert_absorbed(out, "/v1/chat/completions", UPSTREAM)


def test_midstream_cut_is_an_error(openai_cli: str, tmp_path: Path) -> None:
    """A stream cut after 3 chunks ends with the CLI's own error, not a silent short answer."""
    sc = Scenario([chat(openai_cli, "--stream")], script=[(UPSTREAM, CutAfter(3))])
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode != 0, show(out)
    assert "Error" in cmd.stderr and "interrupted" in cmd.stderr, show(out)
    assert REPLY.format(model=UPSTREAM) not in cmd.stdout, show(out)


def test_midstream_cut_continued(openai_cli: str, tmp_path: Path) -> None:
    """With ``on_midstream_failure: continue`` the CLI gets the whole answer, once."""
    sc = Scenario(
        [chat(openai_cli, "--stream")],
        script=[(UPSTREAM, CutAfter(3))],
        policy={"stream": {"on_midstream_failure": "continue"}},
    )
    out = run_scenario(sc, tmp_path)
    cmd = only(out)
    assert cmd.returncode == 0, show(out)
    assert cmd.stdout.count(REPLY.format(model=UPSTREAM)) == 1, show(out)
