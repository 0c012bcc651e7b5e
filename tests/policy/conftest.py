"""Helpers for policy tests: write a policy directory and load it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from gateway.errors import PolicyError
from gateway.routing.load import load_policy_dir
from gateway.routing.policyset import PolicySet


def write_dir(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``{relative path: YAML}`` (dedented) under ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.fixture
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., PolicySet]:
    """Write files to ./p (cwd = tmp_path, so messages read ``p/file.yaml:N``) and load them."""
    monkeypatch.chdir(tmp_path)

    def _load(files: Mapping[str, str], env: Mapping[str, str] | None = None) -> PolicySet:
        write_dir(tmp_path / "p", files)
        return load_policy_dir(Path("p"), env=env or {})

    return _load


@pytest.fixture
def problems(load: Callable[..., PolicySet]) -> Callable[..., list[str]]:
    """Load files that must fail; return the problems as ``file:line: message`` strings."""

    def _problems(files: Mapping[str, str], env: Mapping[str, str] | None = None) -> list[str]:
        with pytest.raises(PolicyError) as info:
            load(files, env)
        assert str(info.value) == "\n".join(str(p) for p in info.value.problems)
        return [str(p) for p in info.value.problems]

    return _problems
