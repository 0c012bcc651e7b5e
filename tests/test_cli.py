"""The llm-gateway command line: check, schema, hash-key, and argument wiring."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gateway import cli

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "policies"


def run(
    *args: str, stdin: str = "", cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m gateway ARGS` as a user would (this checkout first on the path);
    ``env`` adds to the environment."""
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
        timeout=60,
        check=False,
    )


def test_check_bundled_policies_passes() -> None:
    """`check policies` on the bundled set exits 0 with a summary."""
    result = run("check", "policies")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("policies: OK (")
    assert "10 models" in result.stdout
    assert result.stderr == ""


def test_check_broken_dir_fails_with_file_line(tmp_path: Path) -> None:
    """`check` on a broken set exits 1 and prints file:line: message per problem to stderr."""
    broken = tmp_path / "broken"
    (broken / "teams").mkdir(parents=True)
    (broken / "base.yaml").write_text(
        "providers:\n  sim: {api: sim}\npolicies:\n  standard:\n    retry:\n      max_retrise: 3\n"
    )
    (broken / "teams" / "t.yaml").write_text("teams:\n  t:\n    keys: [env:CLI_TEST_UNSET_KEY]\n")
    result = run("check", "broken", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "broken/base.yaml:6: policies.standard.retry.max_retrise: unknown key",
        "broken/teams/t.yaml:3: teams.t.keys[0]: environment variable CLI_TEST_UNSET_KEY"
        " is not set or empty",
        "2 problems found",
    ]


PROVIDERS = """\
providers:
  oa:
    api: openai
    base_url: https://x/v1
    api_key_env: CLI_TEST_NO_KEY
  an: {api: anthropic, base_url: https://y, api_key_env: CLI_TEST_EMPTY_KEY}
  spare: {api: openai, base_url: https://z/v1, api_key_env: CLI_TEST_UNUSED_KEY}
models:
  gpt: {provider: oa, price: {input: 1, output: 2}}
  claude: {provider: an, price: {input: 3, output: 15}}
"""
WARNINGS = [
    "p/providers.yaml:5: warning: providers.oa.api_key_env: environment variable"
    " CLI_TEST_NO_KEY is not set or empty: requests to provider 'oa' would go upstream"
    " without a key",
    "p/providers.yaml:6: warning: providers.an.api_key_env: environment variable"
    " CLI_TEST_EMPTY_KEY is not set or empty: requests to provider 'an' would go upstream"
    " without a key",
]
NO_KEYS = {"CLI_TEST_EMPTY_KEY": ""}  # CLI_TEST_NO_KEY and CLI_TEST_UNUSED_KEY are unset


@pytest.fixture
def keyless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path/p``: providers whose api_key_env variables are unset (one empty)."""
    for var in ("CLI_TEST_NO_KEY", "CLI_TEST_UNUSED_KEY"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "providers.yaml").write_text(PROVIDERS)
    return tmp_path


def test_check_warns_about_unset_provider_keys(keyless: Path) -> None:
    """Unset (or empty) api_key_env variables of the providers models use are warnings,
    file:line: warning: message on stderr, and `check` still exits 0 (CI has no secrets).
    A provider no model uses is not reported (serve does not need its key either)."""
    result = run("check", "p", cwd=keyless, env=NO_KEYS)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == WARNINGS
    assert result.stdout == "p: OK (1 file, 3 providers, 2 models, 1 policy, 0 teams, 0 routes)\n"


def test_check_strict_makes_warnings_errors(keyless: Path) -> None:
    """`check --strict` reports the same lines as problems and exits 1."""
    result = run("check", "--strict", "p", cwd=keyless, env=NO_KEYS)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        *(w.replace(" warning: ", " ", 1) for w in WARNINGS),
        "2 problems found",
    ]


def test_check_strict_passes_with_the_keys_set(keyless: Path) -> None:
    """With every used provider's key set, `check --strict` exits 0 and warns about nothing."""
    keys = {"CLI_TEST_NO_KEY": "k1", "CLI_TEST_EMPTY_KEY": "k2"}
    result = run("check", "--strict", "p", cwd=keyless, env=keys)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("p: OK (")


def test_check_strict_still_reports_errors_first(keyless: Path) -> None:
    """A set with errors fails with its errors alone, strict or not (warnings are about a
    set that loads); an unset team env: key is an error either way."""
    (keyless / "p" / "t.yaml").write_text("teams:\n  t:\n    keys: [env:CLI_TEST_UNSET_KEY]\n")
    for args in (("check", "p"), ("check", "--strict", "p")):
        result = run(*args, cwd=keyless, env=NO_KEYS)
        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            "p/t.yaml:3: teams.t.keys[0]: environment variable CLI_TEST_UNSET_KEY"
            " is not set or empty",
            "1 problem found",
        ]


def test_check_warnings_match_what_serve_reports(keyless: Path) -> None:
    """The warnings name exactly the variables serve logs as provider_key_missing."""
    from gateway.routing.load import check_policy_dir

    env = {"CLI_TEST_EMPTY_KEY": ""}
    policy_set, warnings = check_policy_dir(keyless / "p", env=env)
    assert [w.message.split()[3] for w in warnings] == ["CLI_TEST_NO_KEY", "CLI_TEST_EMPTY_KEY"]
    assert sorted(w.message.split()[3] for w in warnings) == policy_set.missing_provider_env(env)
    assert [w.line for w in warnings] == [5, 6]
    assert (
        check_policy_dir(keyless / "p", env={"CLI_TEST_NO_KEY": "a", "CLI_TEST_EMPTY_KEY": "b"})[1]
        == []
    )


def test_check_missing_dir(tmp_path: Path) -> None:
    """`check` on a missing directory exits 1 and says so."""
    result = run("check", "nope", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "nope: no such policy directory"


def test_schema_is_json_schema_accepting_bundled_files() -> None:
    """`schema` prints a draft 2020-12 JSON Schema that accepts every bundled file."""
    from gateway.routing.load import parse_yaml

    result = run("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    files = sorted(BUNDLED.rglob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        assert list(validator.iter_errors(parse_yaml(path.read_text()))) == [], path


def test_hash_key_round_trip() -> None:
    """`hash-key` prints sha256:<hex> of the stdin key, trailing newline stripped."""
    result = run("hash-key", stdin="demo-key\n")
    assert result.returncode == 0
    expected = "sha256:" + hashlib.sha256(b"demo-key").hexdigest()
    assert result.stdout == expected + "\n"
    assert run("hash-key", stdin="demo-key").stdout == expected + "\n"
    assert expected in (BUNDLED / "teams" / "demo.yaml").read_text()


def test_hashed_key_selects_the_team(tmp_path: Path) -> None:
    """A key hashed with `hash-key` and pasted into a team file selects that team."""
    from gateway.routing.load import load_policy_dir

    digest = run("hash-key", stdin="s3cret\n").stdout.strip()
    (tmp_path / "t.yaml").write_text(f"teams:\n  t: {{keys: ['{digest}']}}\n")
    assert load_policy_dir(tmp_path).team_for_key("s3cret") == "t"


def test_hash_key_empty_stdin() -> None:
    """`hash-key` with nothing on stdin exits 2."""
    result = run("hash-key", stdin="")
    assert result.returncode == 2
    assert "no key" in result.stderr


def test_no_command_is_a_usage_error() -> None:
    """Without a subcommand the CLI prints usage and exits 2."""
    result = run()
    assert result.returncode == 2
    assert "usage: llm-gateway" in result.stderr


def test_serve_builds_settings_from_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve` passes only the given flags to GatewaySettings and calls gateway.web.app.serve."""
    import types

    seen: list[Any] = []
    fake_app = types.ModuleType("gateway.web.app")
    fake_app.serve = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.web.app", fake_app)
    monkeypatch.delenv("GATEWAY_PORT", raising=False)
    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "9999", "--policies", "x"]) == 0
    (settings,) = seen
    assert (settings.host, settings.port, settings.policy_dir, settings.demo) == (
        "0.0.0.0", 9999, Path("x"), False,
    )  # fmt: skip


def test_serve_demo_uses_bundled_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve --demo` without --policies serves the bundled policy directory."""
    import types

    from gateway.routing.load import bundled_policy_dir

    seen: list[Any] = []
    fake_app = types.ModuleType("gateway.web.app")
    fake_app.serve = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.web.app", fake_app)
    assert cli.main(["serve", "--demo"]) == 0
    assert seen[0].demo is True
    assert seen[0].policy_dir == bundled_policy_dir()


def test_simulate_passes_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """`simulate` hands the parsed arguments to gateway.simulate.main and returns its status."""
    import types

    seen: list[Any] = []
    fake_sim = types.ModuleType("gateway.simulate")

    def fake_main(args: Any) -> int:
        seen.append(args)
        return 3

    fake_sim.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.simulate", fake_sim)
    argv = ["simulate", "--policies", "p", "--team", "t", "--model", "m", "--script", "429,200"]
    assert cli.main(argv) == 3
    (args,) = seen
    assert (args.policies, args.team, args.model, args.script) == (Path("p"), "t", "m", "429,200")
    assert (args.path, args.seed) == ("/v1/chat/completions", 0)
