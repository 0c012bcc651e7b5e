"""``llm-gateway check`` and ``serve`` on cloud providers: a kind whose extra is not
installed is refused with file:line and the command that installs it; credentials that
cannot be found are a warning, and an error with ``--strict``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.errors import PolicyError
from gateway.routing.load import load_policy_dir
from gateway.testing.fake_google_token import FakeGoogleToken
from tests.clouds.cloud_env import isolate

POLICY = """\
providers:
  direct: {api: anthropic, base_url: http://127.0.0.1:9}
  vertex-eu:
    api: vertex
    project: acme-ml
    region: europe-west1
  bedrock-us: {api: bedrock, region: us-east-1, api_key_env: BEDROCK_KEY}
models:
  claude-sonnet-4-5:
    deployments:
      - {provider: direct, price: {input: 3, output: 15}}  # no table knows 127.0.0.1
      - {provider: vertex-eu, upstream_model: claude-sonnet-4-5@20250929}
      - {provider: bedrock-us, upstream_model: us.anthropic.claude-sonnet-4-5-20250929-v1:0}
"""


@pytest.fixture
def policy_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("BEDROCK_KEY", "k")
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "clouds.yaml").write_text(POLICY)
    return folder


def test_a_kind_without_its_extra_fails_check_and_serve(
    policy_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without awscrt (the [aws] extra), a bedrock provider is a problem at its api line,
    with the pip command, for check and for serve's loader."""
    monkeypatch.setitem(sys.modules, "awscrt", None)  # as an import finds it: missing
    assert main(["check", str(policy_dir)]) == 1
    err = capsys.readouterr().err
    assert f"{policy_dir.as_posix()}/clouds.yaml:7: providers.bedrock-us.api:" in err
    assert "pip install 'llm-gateway[aws]'" in err
    with pytest.raises(PolicyError) as refused:
        load_policy_dir(policy_dir)
    assert "llm-gateway[aws]" in str(refused.value.problems[0])


def test_credentials_not_found_warn_and_fail_strict(
    policy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """No Google credentials: check warns at the vertex provider's line; --strict fails."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    assert main(["check", str(policy_dir)]) == 0
    err = capsys.readouterr().err
    assert (
        f"{policy_dir.as_posix()}/clouds.yaml:4: warning: providers.vertex-eu.api: credentials:"
        in err
    )
    assert "GOOGLE_APPLICATION_CREDENTIALS" in err
    assert main(["check", "--strict", str(policy_dir)]) == 1


async def test_credentials_found_pass_strict(
    policy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """With a service-account file, --strict passes (the lookup really ran: the fake
    token endpoint was asked)."""
    async with FakeGoogleToken() as google:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        import asyncio

        code = await asyncio.to_thread(main, ["check", "--strict", str(policy_dir)])
        assert code == 0, capsys.readouterr().err
        assert google.requests


GEMINI_POLICY = """\
providers:
  google-ai: {api: gemini%s}
  vertex-eu: {api: vertex, project: acme-ml, region: europe-west1}
  bedrock-us: {api: bedrock, region: us-east-1, api_key_env: BEDROCK_KEY}
models:
  gemini-2.5-pro:
    deployments:
      - {provider: google-ai}
      - {provider: vertex-eu, upstream_model: gemini-2.5-pro, upstream_api: %s}
"""


@pytest.mark.parametrize(
    ("key", "api", "problem"),
    [
        (", api_key_env: GEMINI_KEY", "gemini", None),
        (", api_key_env: GEMINI_KEY", "chat", None),
        ("", "gemini", "api gemini needs api_key_env"),
        (", api_key_env: GEMINI_KEY", "converse", "one of messages, chat, gemini"),
    ],
)
def test_gemini_providers_as_check_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, api: str, problem: str | None
) -> None:
    """``api: gemini`` needs its key's variable; a Vertex deployment may say
    ``upstream_api: gemini`` (or ``chat``), not Bedrock's ``converse``."""
    isolate(monkeypatch, tmp_path / "home")
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "g.yaml").write_text(GEMINI_POLICY % (key, api))
    if problem is None:
        policies = load_policy_dir(folder)
        fmts = [d.fmts[0].name for d in policies.deployments["gemini-2.5-pro"]]
        assert fmts == ["gemini", api]
        return
    with pytest.raises(PolicyError) as refused:
        load_policy_dir(folder)
    assert problem in str(refused.value.problems[0])
