"""The only reader of policy YAML: a directory of files -> a :class:`PolicySet`.

Every ``*.yaml`` / ``*.yml`` under the directory and its subfolders is read in
sorted order of relative path (files and folders whose name starts with ``.``
are skipped, so Kubernetes ConfigMap mounts with their ``..data`` folders load
once). Each file is validated against the schema, the files are merged, every
reference is checked and the result compiled. Anything wrong is reported as
``file:line: key.path: message``, all problems of the set at once, by raising
:class:`PolicyError`; a set with a problem is never partly used.

Problems found (each test-covered):

- YAML syntax, duplicate keys in one mapping, more than one document;
- schema: unknown keys, wrong types, bad durations, bad key forms;
- a provider / model / policy / team name defined in two files (naming both);
- references: model -> provider, route -> policy, fallback chain /
  ``on_prompt_too_long`` / ``summarize_model`` -> models;
- a route ``override`` that does not validate once deep-merged over its policy;
- an ``env:NAME`` team key whose variable is unset or empty; a key used twice;
- a provider certificate file (``ca_file``, ``client_cert``, ``client_key``) that
  cannot be read or used (no PEM certificate, key not matching, key encrypted).

Provider file paths that are not absolute are resolved against the folder of the
policy file that names them (the current directory for :func:`load_policy_texts`),
without resolving symlinks (a Kubernetes ``..data`` mount keeps working after an
update); the loaded :class:`Provider` holds the absolute path.

Provider ``api_key_env`` variables are *not* required here: they are read when
a request goes upstream, so CI can ``check`` files without the secrets.
:func:`check_policy_dir` loads the same way and also returns, as warnings, the
``api_key_env`` variables of the providers models use that are unset or empty
(``llm-gateway check`` prints them; ``--strict`` makes them errors).

This module reads the files; :mod:`gateway.policy.validate` checks each one against
the schema and :mod:`gateway.routing.build` merges, cross-checks and compiles the set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gateway.errors import PolicyError, Problem
from gateway.policy.schema import policy_json_schema
from gateway.policy.source import parse_yaml
from gateway.policy.validate import SECTIONS as SECTIONS
from gateway.routing.build import build_policy_set
from gateway.routing.policyset import PolicySet

__all__ = [
    "Problem",
    "bundled_policy_dir",
    "check_policy_dir",
    "load_policy_dir",
    "load_policy_texts",
    "parse_yaml",
    "policy_json_schema",
]


def bundled_policy_dir() -> Path:
    """The policies shipped with the package (``serve --demo``).

    In a wheel they live in ``gateway/_bundled_policies``; in a source checkout
    (``pip install -e .``) they are the repository's ``policies/``.
    """
    package = Path(__file__).resolve().parent.parent
    wheel = package / "_bundled_policies"
    return wheel if wheel.is_dir() else package.parent / "policies"


# ---- reading ------------------------------------------------------------------


def load_policy_dir(path: Path | str, env: Mapping[str, str] | None = None) -> PolicySet:
    """Read, validate, merge and compile every policy file under ``path``.

    ``path`` may also be a single file. ``env`` (default ``os.environ``) resolves
    ``env:NAME`` team keys. Raises :class:`PolicyError` listing every problem.
    """
    return _load_dir(path, env, None)


def check_policy_dir(
    path: Path | str, env: Mapping[str, str] | None = None
) -> tuple[PolicySet, list[Problem]]:
    """:func:`load_policy_dir`, and the warnings of the loaded set (``llm-gateway check``).

    A warning is a provider that a model uses whose ``api_key_env`` variable is unset or
    empty in ``env`` (the providers ``PolicySet.missing_provider_env`` names), located at
    its ``api_key_env`` line. Requests to it would go upstream without a key.
    """
    warnings: list[Problem] = []
    return _load_dir(path, env, warnings), warnings


def _load_dir(
    path: Path | str, env: Mapping[str, str] | None, warnings: list[Problem] | None
) -> PolicySet:
    root = Path(path)
    shown = root.as_posix()
    if root.is_file():
        files = [root]
        rel_of = {root: root.name}
        display_of = {root: shown}
    elif root.is_dir():
        files = _policy_files(root)
        rel_of = {p: p.relative_to(root).as_posix() for p in files}
        display_of = {p: (root / rel_of[p]).as_posix() for p in files}
        if not files:
            raise PolicyError([Problem(shown, 0, "no policy files (*.yaml, *.yml) found")])
    else:
        raise PolicyError([Problem(shown, 0, "no such policy directory")])
    texts: list[tuple[str, str, bytes, str]] = []
    problems: list[Problem] = []
    for p in files:
        try:
            texts.append((rel_of[p], display_of[p], p.read_bytes(), os.path.abspath(p.parent)))
        except OSError as exc:
            problems.append(Problem(display_of[p], 0, f"cannot read: {exc.strerror or exc}"))
    return build_policy_set(texts, os.environ if env is None else env, problems, warnings)


def load_policy_texts(
    texts: Mapping[str, str | bytes], env: Mapping[str, str] | None = None
) -> PolicySet:
    """Like :func:`load_policy_dir` over in-memory files ``{relative path: content}`` (tests).

    Relative provider file paths are resolved against the current directory.
    """
    cwd = os.getcwd()
    items = [
        (rel, rel, t.encode("utf-8") if isinstance(t, str) else t, cwd)
        for rel, t in sorted(texts.items())
    ]
    return build_policy_set(items, {} if env is None else env, [])


def _policy_files(root: Path) -> list[Path]:
    found: list[tuple[str, Path]] = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if p.suffix in (".yaml", ".yml") and p.is_file():
            found.append((rel.as_posix(), p))
    return [p for _, p in sorted(found)]
