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
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gateway.egress import FILE_FIELDS, check_files
from gateway.policy.merge import deep_merge
from gateway.policy.policyset import PolicySet, ResolvedRoute, resolve_deployments
from gateway.policy.schema import (
    Model,
    Policy,
    PolicyFile,
    Provider,
    Route,
    Team,
    policy_json_schema,
)
from gateway.policy.source import (
    Loc,
    PolicyError,
    Problem,
    Source,
    format_loc,
    parse,
    parse_yaml,
)

__all__ = [
    "PolicyError",
    "Problem",
    "bundled_policy_dir",
    "check_policy_dir",
    "load_policy_dir",
    "load_policy_texts",
    "parse_yaml",
    "policy_json_schema",
]

#: Top-level sections of a file, in the order they are checked; their value types
#: are those of :class:`PolicyFile` (a test keeps the two in step).
SECTIONS: dict[str, type[BaseModel]] = {
    "providers": Provider,
    "models": Model,
    "policies": Policy,
    "teams": Team,
}
_KIND = {"providers": "provider", "models": "model", "policies": "policy", "teams": "team"}


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
    return _build(texts, os.environ if env is None else env, problems, warnings)


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
    return _build(items, {} if env is None else env, [])


def _policy_files(root: Path) -> list[Path]:
    found: list[tuple[str, Path]] = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if p.suffix in (".yaml", ".yml") and p.is_file():
            found.append((rel.as_posix(), p))
    return [p for _, p in sorted(found)]


# ---- schema ---------------------------------------------------------------------


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    if kind in ("value_error", "assertion_error"):
        ctx = err.get("ctx") or {}
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    msg = err["msg"]
    value = err.get("input")
    if isinstance(value, str | int | float | bool) and "keys" not in err["loc"]:
        msg += f", got {value!r}"
    return msg


def _clean_loc(loc: tuple[int | str, ...]) -> Loc:
    """Drop pydantic's own segments (``[key]``, ``function-after[...]``) from an error location."""
    return tuple(p for p in loc if not (isinstance(p, str) and (p == "[key]" or "[" in p)))


def _schema_problems(src: Source, prefix: Loc, exc: ValidationError) -> Iterator[Problem]:
    for err in exc.errors():
        yield src.problem((*prefix, *_clean_loc(err["loc"])), _message(err))


@dataclass(frozen=True, slots=True)
class _Entry:
    value: Any  # the validated model
    src: Source
    loc: Loc  # (section, name)

    @property
    def where(self) -> str:
        return f"{self.src.display}:{self.src.line(self.loc)}"


def _validate_file(
    src: Source, problems: list[Problem], invalid: dict[str, set[str]]
) -> list[_Entry]:
    """Validate each entry of each section; return the valid ones."""
    data = src.data
    if data is None:
        return []
    if not isinstance(data, dict):
        problems.append(
            Problem(
                src.display,
                src.line(()),
                "(top level): a policy file is a mapping with any of "
                + ", ".join(f"{s}:" for s in SECTIONS),
            )
        )
        return []
    entries: list[_Entry] = []
    for section, body in data.items():
        model = SECTIONS.get(section) if isinstance(section, str) else None
        if model is None:
            problems.append(
                src.problem((section,), "unknown key (expected " + ", ".join(SECTIONS) + ")")
            )
            continue
        if body is None:  # `teams:` with everything below commented out
            continue
        if not isinstance(body, dict):
            problems.append(src.problem((section,), f"must be a mapping of {_KIND[section]} names"))
            continue
        for name, raw in body.items():
            if not isinstance(name, str) or not name:
                problems.append(
                    src.problem(
                        (section, name), f"{_KIND[section]} name must be a non-empty string"
                    )
                )
                continue
            try:
                value = model.model_validate({} if raw is None else raw)
            except ValidationError as exc:
                problems.extend(_schema_problems(src, (section, name), exc))
                invalid[section].add(name)
                continue
            if isinstance(value, Provider):
                checked = _provider_files(src, (section, name), value, problems)
                if checked is None:
                    invalid[section].add(name)
                    continue
                value = checked
            entries.append(_Entry(value, src, (section, name)))
    return entries


def _provider_files(
    src: Source, loc: Loc, provider: Provider, problems: list[Problem]
) -> Provider | None:
    """``provider`` with absolute file paths, or ``None`` when a file cannot be used."""
    updates: dict[str, str] = {}
    for name in FILE_FIELDS:
        path = getattr(provider, name)
        if path is not None and not os.path.isabs(path):
            updates[name] = os.path.abspath(os.path.join(src.base, path))
    if updates:
        provider = provider.model_copy(update=updates)
    found = check_files(provider)
    for name, message in found:
        problems.append(src.problem((*loc, name), message))
    return None if found else provider


# ---- the set --------------------------------------------------------------------


def _unknown(kind: str, name: str, known: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {kind} '{name}'{hint}"


def _provider_refs(model: Model) -> Iterator[tuple[Loc, str]]:
    """Every provider name a model refers to, with its path inside the model."""
    if model.provider is not None:
        yield ("provider",), model.provider
    for i, d in enumerate(model.deployments):
        yield ("deployments", i, "provider"), d.provider


def _deployment_problems(
    name: str, entry: _Entry, providers: Mapping[str, Provider]
) -> Iterator[Problem]:
    """A model's deployment names differ; ``upstream_api`` is for OpenAI-format providers.
    Deployments may speak different APIs: each attempt is translated for its own."""
    model: Model = entry.value
    if "upstream_api" in model.model_fields_set:
        others = sorted({providers[p].api for p in model.providers} - {"openai"})
        if others:
            yield entry.src.problem(
                (*entry.loc, "upstream_api"),
                "upstream_api chooses between OpenAI's chat completions and Responses APIs; "
                f"this model is served by {', '.join(others)}-format providers",
            )
    seen: set[str] = set()
    for d in resolve_deployments(name, model, providers):
        if d.name in seen:
            yield entry.src.problem(
                (*entry.loc, "deployments"),
                f"two deployments are named '{d.name}': give each a distinct name",
            )
        seen.add(d.name)


def _model_refs(policy: Policy) -> Iterator[tuple[Loc, str]]:
    """Every model name a policy refers to, with its path inside the policy."""
    for i, m in enumerate(policy.fallback.chain):
        yield ("fallback", "chain", i), m
    for i, m in enumerate(policy.fallback.on_prompt_too_long):
        yield ("fallback", "on_prompt_too_long", i), m
    if policy.compaction.summarize_model is not None:
        yield ("compaction", "summarize_model"), policy.compaction.summarize_model


def _in_override(override: Mapping[str, Any], loc: Loc) -> bool:
    """Whether the override itself sets the policy field at ``loc`` (ignoring list indexes)."""
    node: Any = override
    for part in loc:
        if isinstance(part, int):
            return True
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _build(
    texts: list[tuple[str, str, bytes, str]],
    env: Mapping[str, str],
    problems: list[Problem],
    warnings: list[Problem] | None = None,
) -> PolicySet:
    """Parse, validate, merge and check ``texts``; the set, or :class:`PolicyError`."""
    unreadable = bool(problems)  # files that could not even be read
    sources: list[Source] = []
    files: dict[str, str] = {}
    for rel, display, raw, folder in texts:
        src = Source(rel, display, folder)
        files[rel] = hashlib.sha256(raw).hexdigest()
        parse(src, raw, problems)
        sources.append(src)

    invalid: dict[str, set[str]] = {s: set() for s in SECTIONS}
    defined = _merge(sources, problems, invalid)
    # References are only meaningful when every file could be read: a file with a
    # syntax error would otherwise make every name it defines look unknown.
    refs = _Refs(defined, invalid, check=not unreadable and all(s.ok for s in sources))
    refs.check_models_and_policies(problems)

    routes: dict[str, list[ResolvedRoute]] = {}
    keys = _Keys(env)
    for team_name, entry in defined["teams"].items():
        routes[team_name] = _team_routes(team_name, entry, refs, problems)
        keys.add(team_name, entry, problems)

    if problems:
        raise PolicyError(sorted(problems, key=lambda p: (p.file, p.line)))
    policy_set = PolicySet(
        providers=refs.providers,
        models=refs.models,
        policies=refs.policies,
        teams={n: e.value for n, e in defined["teams"].items()},
        routes=routes,
        key_hashes=keys.hashes,
        files=files,
    )
    if warnings is not None:
        warnings.extend(_missing_key_warnings(policy_set, defined["providers"], env))
    return policy_set


def _merge(
    sources: list[Source], problems: list[Problem], invalid: dict[str, set[str]]
) -> dict[str, dict[str, _Entry]]:
    """The valid entries of every file by section and name; a name defined twice is a
    problem naming both places (the first definition stands)."""
    defined: dict[str, dict[str, _Entry]] = {s: {} for s in SECTIONS}
    for src in sources:
        for entry in _validate_file(src, problems, invalid):
            section, name = str(entry.loc[0]), str(entry.loc[1])
            first = defined[section].get(name)
            if first is not None:
                problems.append(
                    src.problem(
                        entry.loc,
                        f"{_KIND[section]} '{name}' is already defined in {first.where}",
                    )
                )
                continue
            defined[section][name] = entry
    return defined


class _Refs:
    """The named providers, models and policies of a set, and whether a name is known.

    A name whose entry failed validation counts as known (its own problem is reported
    already); with ``check`` off (a file could not be read) every name is known.
    """

    def __init__(
        self, defined: dict[str, dict[str, _Entry]], invalid: dict[str, set[str]], check: bool
    ) -> None:
        self.defined = defined
        self.invalid = invalid
        self.check = check
        self.providers: dict[str, Provider] = {n: e.value for n, e in defined["providers"].items()}
        self.models: dict[str, Model] = {n: e.value for n, e in defined["models"].items()}
        self.policies: dict[str, Policy] = {n: e.value for n, e in defined["policies"].items()}
        if "default" not in self.policies and "default" not in invalid["policies"]:
            self.policies["default"] = Policy()

    def known(self, section: str, table: Mapping[str, Any], name: str) -> bool:
        return not self.check or name in table or name in self.invalid[section]

    def check_models_and_policies(self, problems: list[Problem]) -> None:
        """Model -> provider; policy -> models (fallback chains, summarize_model)."""
        for name, entry in self.defined["models"].items():
            m: Model = entry.value
            for loc, ref in _provider_refs(m):
                if not self.known("providers", self.providers, ref):
                    problems.append(
                        entry.src.problem(
                            (*entry.loc, *loc), _unknown("provider", ref, self.providers)
                        )
                    )
            if self.check and all(p in self.providers for p in m.providers):
                problems.extend(_deployment_problems(name, entry, self.providers))
        for entry in self.defined["policies"].values():
            for loc, ref in _model_refs(entry.value):
                if not self.known("models", self.models, ref):
                    problems.append(
                        entry.src.problem((*entry.loc, *loc), _unknown("model", ref, self.models))
                    )


def _team_routes(
    team_name: str, entry: _Entry, refs: _Refs, problems: list[Problem]
) -> list[ResolvedRoute]:
    """A team's routes with their policies resolved (``override`` deep-merged)."""
    team: Team = entry.value
    src = entry.src
    resolved: list[ResolvedRoute] = []
    route_names: dict[str, int] = {}
    for i, route in enumerate(team.routes):
        rloc: Loc = (*entry.loc, "routes", i)
        if route.name is not None:
            if route.name in route_names:
                problems.append(
                    src.problem(
                        (*rloc, "name"),
                        f"route name '{route.name}' is already used by routes"
                        f"[{route_names[route.name]}]",
                    )
                )
            route_names.setdefault(route.name, i)
        policy = _route_policy(route, rloc, src, refs, problems)
        if policy is None:
            continue
        resolved.append(
            ResolvedRoute(
                id=route.name or f"{team_name}/{i}",
                team=team_name,
                policy=policy,
                policy_name=route.policy,
                match_model=route.match.model,
                match_path=route.match.path,
            )
        )
    return resolved


def _route_policy(
    route: Route, rloc: Loc, src: Source, refs: _Refs, problems: list[Problem]
) -> Policy | None:
    """The route's policy with its override applied; ``None`` (and a problem) if unusable."""
    base = refs.policies.get(route.policy)
    if base is None:
        if not refs.known("policies", refs.policies, route.policy):
            problems.append(
                src.problem((*rloc, "policy"), _unknown("policy", route.policy, refs.policies))
            )
        return None
    if not route.override:
        return base
    merged = deep_merge(base.model_dump(), route.override)
    try:
        policy = Policy.model_validate(merged)
    except ValidationError as exc:
        problems.extend(_schema_problems(src, (*rloc, "override"), exc))
        return None
    for loc, ref in _model_refs(policy):
        if _in_override(route.override, loc) and not refs.known("models", refs.models, ref):
            problems.append(
                src.problem((*rloc, "override", *loc), _unknown("model", ref, refs.models))
            )
    return policy


class _Keys:
    """Team keys as digests (``env:NAME`` hashed here), each used once across the set."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.hashes: dict[str, str] = {}  # digest -> team
        self.where: dict[str, Loc] = {}

    def add(self, team_name: str, entry: _Entry, problems: list[Problem]) -> None:
        team: Team = entry.value
        for j, key in enumerate(team.keys):
            kloc: Loc = (*entry.loc, "keys", j)
            if key.startswith("env:"):
                var = key.removeprefix("env:")
                secret = self.env.get(var)
                if not secret:
                    problems.append(
                        entry.src.problem(kloc, f"environment variable {var} is not set or empty")
                    )
                    continue
                digest = hashlib.sha256(secret.encode("utf-8")).hexdigest()
            else:
                digest = key.removeprefix("sha256:")
            other = self.hashes.get(digest)
            if other is not None:
                where = (
                    f"listed twice (first at {format_loc(self.where[digest])})"
                    if other == team_name
                    else f"already used by team '{other}'"
                )
                problems.append(entry.src.problem(kloc, f"the same key is {where}"))
                continue
            self.hashes[digest] = team_name
            self.where[digest] = kloc


def _missing_key_warnings(
    policy_set: PolicySet, providers: Mapping[str, _Entry], env: Mapping[str, str]
) -> list[Problem]:
    """One warning per provider whose key variable ``serve`` would report missing."""
    missing = set(policy_set.missing_provider_env(env))
    used = {p for m in policy_set.models.values() for p in m.providers}
    found: list[Problem] = []
    for name, entry in providers.items():
        envs = entry.value.api_key_env
        for i, var in enumerate((envs,) if isinstance(envs, str) else envs or ()):
            if var in missing and name in used:
                loc = (*entry.loc, "api_key_env") + (() if isinstance(envs, str) else (i,))
                found.append(
                    entry.src.problem(
                        loc,
                        f"environment variable {var} is not set or empty: requests to"
                        f" provider '{name}' would go upstream without a key",
                    )
                )
    return sorted(found, key=lambda p: (p.file, p.line))


# Keep the declared file format and the sections checked here in step.
assert set(SECTIONS) == set(PolicyFile.model_fields), "SECTIONS out of step with PolicyFile"
