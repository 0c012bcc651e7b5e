# long: every cross-check between the policy files' sections, in the one pass that builds the set
"""Assembling the :class:`PolicySet` from parsed files, and cross-checking it.

Files are validated (:mod:`gateway.policy.validate`) and merged (a name defined in
two files is a problem naming both); references (model -> provider, policy ->
models, route -> policy, route ``override``) are checked; routes are resolved and
team keys hashed, each key used once. Any problem raises :class:`PolicyError` with
all of them; :func:`_missing_key_warnings` names unset provider key variables.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from gateway.errors import PolicyError, Problem
from gateway.policy.merge import deep_merge
from gateway.policy.schema import Model, Policy, Provider, Route, Team
from gateway.policy.source import Loc, Source, format_loc, parse
from gateway.policy.validate import KIND, SECTIONS, Entry, schema_problems, validate_file
from gateway.providers import kinds as clouds
from gateway.routing.policyset import PolicySet, ResolvedRoute, chooses_api, resolve_deployments


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


#: What a deployment's ``upstream_api`` may say on the cloud kinds; on the others, OpenAI's
#: two APIs where the kind speaks them (:func:`chooses_api`).
_DEPLOYMENT_APIS: dict[str, tuple[str, ...]] = {
    "bedrock": ("messages", "converse"),
    "vertex": ("messages", "chat", "gemini"),
}
_OPENAI_APIS = ("chat", "responses")


def _deployment_problems(
    name: str, entry: Entry, providers: Mapping[str, Provider]
) -> Iterator[Problem]:
    """A model's deployment names differ; ``upstream_api`` is for OpenAI-format providers.
    Deployments may speak different APIs: each attempt is translated for its own."""
    model: Model = entry.value
    if "upstream_api" in model.model_fields_set:
        others = sorted(
            {providers[p].api for p in model.providers if not chooses_api(providers[p])}
        )
        if others:
            yield entry.src.problem(
                (*entry.loc, "upstream_api"),
                "upstream_api chooses between OpenAI's chat completions and Responses APIs; "
                f"this model is served by {', '.join(others)}-format providers",
            )
    for i, dep in enumerate(model.deployments):
        p = providers.get(dep.provider)
        if dep.upstream_api is None or p is None:
            continue
        allowed = _DEPLOYMENT_APIS.get(p.api, _OPENAI_APIS if chooses_api(p) else ())
        if dep.upstream_api not in allowed:
            choice = f"one of {', '.join(allowed)}" if allowed else "not for this provider kind"
            yield entry.src.problem(
                (*entry.loc, "deployments", i, "upstream_api"),
                f"upstream_api {dep.upstream_api!r} on an {p.api!r} provider: {choice}",
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


def build_policy_set(
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
    problems.extend(_missing_extras(defined["providers"]))

    routes: dict[str, list[ResolvedRoute]] = {}
    keys = _Keys(env)
    for team_name, entry in defined["teams"].items():
        routes[team_name] = _team_routes(team_name, entry, refs, problems)
        keys.add(team_name, entry, problems)
        problems.extend(_budget_problems(entry, refs))

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
        warnings.extend(_credential_warnings(policy_set, defined["providers"]))
        warnings.extend(_price_warnings(policy_set, defined["models"]))
    return policy_set


def _missing_extras(providers: Mapping[str, Entry]) -> Iterator[Problem]:
    """A cloud provider whose library is not installed, with the command that installs it."""
    from gateway.upstream.credential_kinds import missing_extra  # imports no cloud library

    for entry in providers.values():
        api = entry.value.api
        if api in clouds.KINDS and (command := missing_extra(api)) is not None:
            yield entry.src.problem(
                (*entry.loc, "api"), f"api {api} needs an optional extra: {command}"
            )


def _credential_warnings(
    policy_set: PolicySet, providers: Mapping[str, Entry]
) -> Iterator[Problem]:
    """A cloud provider a model uses whose credentials cannot be found from here (checked
    now, as ``serve`` would at start: the lookup may read files or call a metadata
    server); ``check --strict`` fails on it."""
    used = {p for m in policy_set.models.values() for p in m.providers}
    for name, entry in providers.items():
        p = entry.value
        if name not in used or p.api not in clouds.KINDS or p.api_key_env is not None:
            continue
        from gateway.upstream.credential_kinds import credential_of  # imports no cloud library

        credential = credential_of(name, p)
        problem = credential.check() if credential is not None else None
        if problem is not None:
            yield entry.src.problem((*entry.loc, "api"), f"credentials: {problem}")


def _merge(
    sources: list[Source], problems: list[Problem], invalid: dict[str, set[str]]
) -> dict[str, dict[str, Entry]]:
    """The valid entries of every file by section and name; a name defined twice is a
    problem naming both places (the first definition stands)."""
    defined: dict[str, dict[str, Entry]] = {s: {} for s in SECTIONS}
    for src in sources:
        for entry in validate_file(src, problems, invalid):
            section, name = str(entry.loc[0]), str(entry.loc[1])
            first = defined[section].get(name)
            if first is not None:
                problems.append(
                    src.problem(
                        entry.loc,
                        f"{KIND[section]} '{name}' is already defined in {first.where}",
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
        self, defined: dict[str, dict[str, Entry]], invalid: dict[str, set[str]], check: bool
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


def _budget_problems(entry: Entry, refs: _Refs) -> Iterator[Problem]:
    """A budget's ``downgrade_to`` names models the team may use."""
    team: Team = entry.value
    if team.budget is None:
        return
    allowed = [fnmatch.translate(g) for g in team.models]
    for i, name in enumerate(team.budget.downgrade_to):
        loc = (*entry.loc, "budget", "downgrade_to", i)
        if not refs.known("models", refs.models, name):
            yield entry.src.problem(loc, _unknown("model", name, refs.models))
        elif not any(re.fullmatch(g, name) for g in allowed):
            yield entry.src.problem(loc, f"the team may not use model '{name}' (see its models)")


def _team_routes(
    team_name: str, entry: Entry, refs: _Refs, problems: list[Problem]
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
        problems.extend(schema_problems(src, (*rloc, "override"), exc))
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

    def add(self, team_name: str, entry: Entry, problems: list[Problem]) -> None:
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


def _price_warnings(policy_set: PolicySet, models: Mapping[str, Entry]) -> list[Problem]:
    """One warning per model with a deployment that has no price (no ``price:``, and none
    in the genai-prices table: gateway/money/pricing.py): its requests are counted in tokens
    only; ``check --strict`` fails on it."""
    found = list(_unpriced_models(policy_set, models))
    return sorted(found, key=lambda p: (p.file, p.line))


def _unpriced_models(policy_set: PolicySet, models: Mapping[str, Entry]) -> Iterator[Problem]:
    for name, entry in models.items():
        deployed = policy_set.deployments.get(name, ())
        unpriced = [d.name for d in deployed if policy_set.price_of(name, d.name) is None]
        if not unpriced:
            continue
        where = "" if len(deployed) == 1 else f" on deployment {', '.join(unpriced)}"
        yield entry.src.problem(
            entry.loc,
            f"no price{where}: neither price: nor the genai-prices table (by provider and"
            " upstream model) gives one, so its requests are counted in tokens only; give"
            " the model price: (USD per million tokens)",
        )


def _missing_key_warnings(
    policy_set: PolicySet, providers: Mapping[str, Entry], env: Mapping[str, str]
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
