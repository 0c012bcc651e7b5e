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


def run(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run `python -m gateway ARGS` as a user would (this checkout first on the path)."""
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath},
        timeout=60,
        check=False,
    )


def test_check_bundled_policies_passes() -> None:
    """`check policies` on the bundled set exits 0 with a summary."""
    result = run("check", "policies")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("policies: OK (")
    assert "7 models" in result.stdout
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


def test_check_does_not_need_provider_keys(tmp_path: Path) -> None:
    """Provider api_key_env variables need not be set for `check` (CI has no secrets)."""
    (tmp_path / "p.yaml").write_text(
        "providers:\n  oa: {api: openai, base_url: https://x/v1, api_key_env: CLI_TEST_NO_KEY}\n"
        "models:\n  gpt: {provider: oa}\n"
    )
    assert run("check", str(tmp_path)).returncode == 0


def test_check_missing_dir(tmp_path: Path) -> None:
    """`check` on a missing directory exits 1 and says so."""
    result = run("check", "nope", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "nope: no such policy directory"


def test_schema_is_json_schema_accepting_bundled_files() -> None:
    """`schema` prints a draft 2020-12 JSON Schema that accepts every bundled file."""
    from gateway.policy.load import parse_yaml

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
    from gateway.policy.load import load_policy_dir

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
    """`serve` passes only the given flags to GatewaySettings and calls gateway.app.serve."""
    import types

    seen: list[Any] = []
    fake_app = types.ModuleType("gateway.app")
    fake_app.serve = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.app", fake_app)
    monkeypatch.delenv("GATEWAY_PORT", raising=False)
    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "9999", "--policies", "x"]) == 0
    (settings,) = seen
    assert (settings.host, settings.port, settings.policy_dir, settings.demo) == (
        "0.0.0.0", 9999, Path("x"), False,
    )  # fmt: skip


def test_serve_demo_uses_bundled_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve --demo` without --policies serves the bundled policy directory."""
    import types

    from gateway.policy.load import bundled_policy_dir

    seen: list[Any] = []
    fake_app = types.ModuleType("gateway.app")
    fake_app.serve = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.app", fake_app)
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
