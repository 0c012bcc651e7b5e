"""The compiled, immutable view of a policy directory that the request path uses.

A :class:`PolicySet` is built once per (re)load by :mod:`gateway.routing.load` and
then only read: key -> team, (team, model, path) -> route, team -> allowed models.
Reloading builds a new set and swaps it in whole, so a request sees one
consistent set from start to end.

Client keys: team files give their SHA-256 digests (``sha256:<hex>``; ``env:NAME`` keys
are hashed at load). A set holds neither keys nor those digests: only keyed BLAKE2s
digests under a random key made once per process (:data:`_PROCESS_KEY`), of each
team key's SHA-256 digest, and of the keys already found (a bounded cache, so that a
known key costs one keyed hash instead of two hashes). Without the process key nothing
held can be matched to a key or to a digest in a team file, nor computed in advance.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gateway import formats
from gateway.formats import CHAT, Format
from gateway.money import pricing
from gateway.policy.schema import Model, Policy, Provider, Team
from gateway.providers import kinds as clouds

#: Bound on the per-set memo of (team, model, path) -> route. Model names come
#: from requests, so the memo must not grow without limit.
ROUTE_MEMO_SIZE = 4096
_KNOWN_KEYS_MAX = 4096  # client keys remembered (keyed digests) after they matched a team

#: The per-process random key of the digests a set holds; never written anywhere.
_PROCESS_KEY = secrets.token_bytes(32)
# Keyed BLAKE2s states, copied per digest (cheaper than keying a new one): one for the
# SHA-256 digests of team keys, one for the keys themselves (the cache).
_OF_SHA256 = hashlib.blake2s(key=_PROCESS_KEY, digest_size=16, person=b"sha256")
_OF_KEY = hashlib.blake2s(key=_PROCESS_KEY, digest_size=16, person=b"key")
#: What a set's ``teams`` list for a ``sha256:`` key instead of the digest.
HELD_KEY = "sha256:<held as a keyed digest>"


def hash_key(key: str) -> str:
    """The ``sha256:<hex>`` form of a client key, as written in team files."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def _keyed(state: hashlib.blake2s, data: bytes) -> bytes:
    h = state.copy()
    h.update(data)
    return h.digest()


def _glob(patterns: Iterable[str]) -> re.Pattern[str]:
    """One compiled regex matching any of the case-sensitive fnmatch globs."""
    parts = [fnmatch.translate(p) for p in patterns]
    return re.compile("|".join(f"(?:{p})" for p in parts) if parts else r"(?!)")


@dataclass(frozen=True, slots=True)
class ResolvedRoute:
    """A team's route with its policy resolved (override deep-merged, validated at load)."""

    id: str  # route name if given, else f"{team}/{index}"; a metric / log label
    team: str
    policy: Policy
    policy_name: str = "default"
    match_model: str = "*"
    match_path: str | None = None


@dataclass(frozen=True, slots=True)
class Deployed:
    """One deployment of a model, resolved (docs/policies.md, Deployments): the provider,
    the variable holding its key (never the key), the model's name upstream, its weight
    and its public name."""

    name: str
    provider: str
    key_env: str | None
    upstream_model: str
    weight: float = 1.0
    fmts: tuple[Format, ...] = (CHAT,)  # the formats it speaks, see formats_of


def formats_of(
    api: str, upstream_api: str | tuple[str, ...] = "chat", speaks: str | None = None
) -> tuple[Format, ...]:
    """The formats a deployment speaks (docs/translation.md), the one a translated request
    is sent in first: those of its provider's kind (:func:`gateway.formats.of_provider`),
    of which ``upstream_api`` chooses by name where the kind has several: an ``openai``
    provider's model speaks chat completions (the default, as GLM, DeepSeek and vLLM do),
    the Responses API, or both (``[chat, responses]``, as OpenAI does); ``anthropic``
    speaks Messages; the built-in ``sim`` provider speaks every format, or those of its
    ``speaks``."""
    if api == "sim" and speaks is None:
        return formats.of_provider(api)
    kind = formats.of_provider(speaks or api)
    if len(kind) < 2:
        return kind
    names = (upstream_api,) if isinstance(upstream_api, str) else upstream_api
    chosen = tuple(dict.fromkeys(f for n in names for f in kind if f.name == n))
    return chosen or kind[:1]


def chooses_api(provider: Provider) -> bool:
    """A model's ``upstream_api`` applies to the provider: its kind speaks more than one of
    OpenAI's formats (``openai``, ``azure``)."""
    if provider.api in clouds.KINDS:
        return provider.api == "azure"
    return provider.api != "sim" and len(formats.of_provider(provider.api)) > 1


def key_envs(provider: Provider) -> tuple[str | None, ...]:
    """The key variables of ``provider``, one per deployment (``(None,)``: no key)."""
    env = provider.api_key_env
    if env is None:
        return (None,)
    return (env,) if isinstance(env, str) else env


def resolve_deployments(
    name: str, model: Model, providers: Mapping[str, Provider]
) -> tuple[Deployed, ...]:
    """The deployments of model ``name``: one per key of each provider serving it, named
    ``name`` (a deployment's), else the provider's; ``#N`` (1-based) tells keys apart."""
    specs = (
        [(model.provider, model.upstream_model, 1.0, None, None)]
        if model.provider is not None
        else [
            (d.provider, d.upstream_model, d.weight, d.name, d.upstream_api)
            for d in model.deployments
        ]
    )
    out: list[Deployed] = []
    model_api = (model.upstream_api,) if isinstance(model.upstream_api, str) else model.upstream_api
    for provider, upstream, weight, given, api in specs:
        p = providers.get(provider)
        envs = key_envs(p) if p is not None else (None,)
        upstream_name = upstream or model.upstream_model or name
        if p is None:
            fmts: tuple[Format, ...] = (CHAT,)
        elif p.api in clouds.KINDS:
            fmts = clouds.formats_of(p.api, upstream_name, api, model_api)
        else:
            fmts = formats_of(p.api, api or model.upstream_api, p.speaks)
        base = given or provider
        for n, env in enumerate(envs, 1):
            label = base if len(envs) == 1 else f"{base}#{n}"
            out.append(Deployed(label, provider, env, upstream_name, weight, fmts))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _CompiledRoute:
    route: ResolvedRoute
    model: re.Pattern[str]
    path: str | None


class PolicySet:
    """Providers, models, policies and teams of one loaded policy directory."""

    __slots__ = (
        "_key_to_team",
        "_known",
        "_memo",
        "_model_globs",
        "_routes",
        "deployments",
        "files",
        "models",
        "policies",
        "price_lists",
        "prices",
        "providers",
        "teams",
        "uses_sim",
        "version",
    )

    providers: Mapping[str, Provider]
    models: Mapping[str, Model]
    policies: Mapping[str, Policy]
    teams: Mapping[str, Team]
    deployments: Mapping[str, tuple[Deployed, ...]]
    files: Mapping[str, str]
    prices: Mapping[tuple[str, str], pricing.Price | None]
    price_lists: Mapping[str, tuple[pricing.Price | None, ...]]
    version: str
    uses_sim: bool

    def __init__(
        self,
        *,
        providers: Mapping[str, Provider],
        models: Mapping[str, Model],
        policies: Mapping[str, Policy],
        teams: Mapping[str, Team],
        routes: Mapping[str, Iterable[ResolvedRoute]],
        key_hashes: Mapping[str, str],
        files: Mapping[str, str] | None = None,
    ) -> None:
        """Build from already-validated parts; ``key_hashes`` maps sha256 hex -> team.

        Neither is kept as given: the digests are held keyed (see the module), and each
        team's ``keys`` lists :data:`HELD_KEY` for a ``sha256:`` entry (``env:`` names are
        not secret and stay)."""
        self.providers = MappingProxyType(dict(providers))
        #: Whether a provider is the built-in sim (started on first use, also after a reload).
        self.uses_sim = any(p.api == "sim" for p in self.providers.values())
        self.models = MappingProxyType(dict(models))
        #: Per model, its deployments (one for a model with one provider and one key).
        self.deployments = MappingProxyType(
            {n: resolve_deployments(n, m, self.providers) for n, m in self.models.items()}
        )
        #: Per (model, deployment name), its price (None: not priced), see gateway/money/pricing.py.
        self.prices = MappingProxyType(
            pricing.prices_of(dict(self.models), dict(self.deployments), dict(self.providers))
        )
        #: Per model, the price of each of its deployments, by index (the request path's).
        self.price_lists = MappingProxyType(
            {
                n: tuple(self.prices.get((n, d.name)) for d in ds)
                for n, ds in self.deployments.items()
            }
        )
        self.policies = MappingProxyType(dict(policies))
        self.teams = MappingProxyType(
            {name: _without_digests(team) for name, team in sorted(teams.items())}
        )
        self.files = MappingProxyType(dict(files or {}))
        digest = hashlib.sha256()
        for rel, sha in sorted(self.files.items()):
            digest.update(f"{rel}\0{sha}\n".encode())
        self.version = digest.hexdigest()[:12]
        # keyed digest of a team key's SHA-256 digest -> team
        self._key_to_team = {
            _keyed(_OF_SHA256, bytes.fromhex(hexdigest)): team
            for hexdigest, team in key_hashes.items()
        }
        self._known: dict[bytes, str] = {}  # keyed digest of a key found -> its team
        self._model_globs = {name: _glob(team.models) for name, team in self.teams.items()}
        self._routes: dict[str, tuple[_CompiledRoute, ...]] = {
            team: tuple(
                _CompiledRoute(r, _glob([r.match_model]), r.match_path)
                for r in routes.get(team, ())
            )
            for team in self.teams
        }
        self._memo: dict[tuple[str, str, str], ResolvedRoute | None] = {}

    @classmethod
    def empty(cls) -> PolicySet:
        """A set with nothing in it but the built-in ``default`` policy (for tests)."""
        return cls(
            providers={},
            models={},
            policies={"default": Policy()},
            teams={},
            routes={},
            key_hashes={},
        )

    # ---- the request path ----------------------------------------------------

    def team_for_key(self, key: str) -> str | None:
        """The team a client key belongs to, or ``None`` (keys are held as keyed digests
        only: one keyed hash for a key found before, else its SHA-256 and a keyed hash)."""
        if not key:
            return None
        data = key.encode("utf-8")
        h = _OF_KEY.copy()  # _keyed(), inline: this is once per request
        h.update(data)
        known = h.digest()
        team = self._known.get(known)
        if team is None:
            h = _OF_SHA256.copy()
            h.update(hashlib.sha256(data).digest())
            team = self._key_to_team.get(h.digest())
            if team is not None:  # only keys that are ours: a flood of bad keys stays uncached
                if len(self._known) >= _KNOWN_KEYS_MAX:
                    self._known.clear()
                self._known[known] = team
        return team

    def route(self, team: str, model: str, path: str) -> ResolvedRoute | None:
        """The team's first route whose model glob (and path, when given) matches."""
        memo_key = (team, model, path)
        try:
            return self._memo[memo_key]
        except KeyError:
            pass
        found: ResolvedRoute | None = None
        for compiled in self._routes.get(team, ()):
            if compiled.path is not None and compiled.path != path:
                continue
            if compiled.model.match(model):
                found = compiled.route
                break
        if len(self._memo) >= ROUTE_MEMO_SIZE:
            del self._memo[next(iter(self._memo))]  # oldest first
        self._memo[memo_key] = found
        return found

    def price_of(self, model: str, deployment: str) -> pricing.Price | None:
        """The price of ``model`` on ``deployment`` (a :class:`Deployed` name), or None."""
        return self.prices.get((model, deployment))

    def model_allowed(self, team: str, model: str) -> bool:
        """Whether one of the team's ``models`` globs matches ``model``."""
        glob = self._model_globs.get(team)
        return glob is not None and glob.match(model) is not None

    def team_models(self, team: str) -> list[str]:
        """The public model names (keys of ``models:``) the team may call, sorted."""
        return sorted(m for m in self.models if self.model_allowed(team, m))

    def routes(self, team: str) -> tuple[ResolvedRoute, ...]:
        """The team's routes in match order."""
        return tuple(c.route for c in self._routes.get(team, ()))

    @property
    def default_team(self) -> str | None:
        """The first team in sorted order (demo mode serves every key as this team)."""
        return next(iter(self.teams), None)

    # ---- introspection -------------------------------------------------------

    def missing_provider_env(self, env: Mapping[str, str]) -> list[str]:
        """``api_key_env`` names of used providers that are unset or empty in ``env``."""
        return sorted(
            {
                d.key_env
                for ds in self.deployments.values()
                for d in ds
                if d.key_env and not env.get(d.key_env)
            }
        )

    def counts(self) -> dict[str, int]:
        """How many of each thing the set holds (for `check` and reload logs)."""
        return {
            "files": len(self.files),
            "providers": len(self.providers),
            "models": len(self.models),
            "policies": len(self.policies),
            "teams": len(self.teams),
            "routes": sum(len(r) for r in self._routes.values()),
        }

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary without secrets (no keys), e.g. for ``GET /admin/policies``."""
        return {
            "version": self.version,
            "files": dict(self.files),
            "providers": {
                n: {"api": p.api, "base_url": p.base_url, "api_key_env": p.api_key_env}
                for n, p in self.providers.items()
            },
            "models": {n: m.model_dump(mode="json") for n, m in self.models.items()},
            "policies": {n: p.model_dump(mode="json") for n, p in self.policies.items()},
            "teams": {
                n: {
                    "models": list(t.models),
                    "keys": len(t.keys),
                    "limits": t.limits.model_dump(mode="json"),
                    "routes": [
                        {
                            "id": r.id,
                            "match": {"model": r.match_model, "path": r.match_path},
                            "policy": r.policy_name,
                        }
                        for r in self.routes(n)
                    ],
                }
                for n, t in self.teams.items()
            },
        }

    def __repr__(self) -> str:
        c = self.counts()
        return f"<PolicySet {self.version} " + " ".join(f"{k}={v}" for k, v in c.items()) + ">"


def _without_digests(team: Team) -> Team:
    """``team`` with :data:`HELD_KEY` in place of each ``sha256:`` key (a copy: the model
    is frozen, and not validated again)."""
    if not any(k.startswith("sha256:") for k in team.keys):
        return team
    held = tuple(HELD_KEY if k.startswith("sha256:") else k for k in team.keys)
    return team.model_copy(update={"keys": held})
