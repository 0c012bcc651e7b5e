# long: the whole policy file format, one frozen model per section, in the order a file reads
"""The policy file format (docs/policies.md) as frozen pydantic models.

Every model forbids unknown keys; every field has the documented default, so
a route that names no policy gets the recovery designs' numbers. Durations
accept ``250ms``, ``8s``, ``5m``, ``1h`` or a number of seconds and are held
as float seconds.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gateway.errors import Category
from gateway.policy.egress import EGRESS_FIELDS, check_proxy_url

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """``"250ms"`` -> 0.25, ``"5m"`` -> 300.0, ``8`` -> 8.0; negative or odd forms raise."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like 250ms, 8s, 5m")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    else:
        raise ValueError(
            f"invalid duration {value!r}: use a number of seconds or 250ms, 8s, 5m, 1h"
        )
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"invalid duration {value!r}: must be >= 0")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)?\s*$"},
            ]
        }
    ),
]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]

_KEY = re.compile(r"^(sha256:[0-9a-fA-F]{64}|env:[A-Za-z_][A-Za-z0-9_]*)$")
KEY_PATTERN = _KEY.pattern


def check_team_key(value: str) -> str:
    """A team key is ``sha256:<64 hex>`` (stored lower-case) or ``env:NAME``; never a plain key.

    The message never repeats the value: it may be a secret pasted by mistake.
    """
    if not _KEY.match(value):
        raise ValueError(
            "a key must be 'sha256:<64 hex digits>' (see `llm-gateway hash-key`) or 'env:NAME';"
            " plain keys are not accepted"
        )
    return value.lower() if value.startswith("sha256:") else value


TeamKey = Annotated[
    str,
    AfterValidator(check_team_key),
    WithJsonSchema({"type": "string", "pattern": KEY_PATTERN}),
]
RetryCategory = Literal[
    "rate_limit", "quota_exhausted", "server_overload", "server_error", "timeout", "connection",
    "conflict", "prompt_too_long", "content_filter", "auth", "invalid_request",
]  # fmt: skip
Strategy = Literal["snip_tool_results", "drop_middle", "summarize"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


# ---- providers and models ----------------------------------------------------


DeploymentApi = Literal["chat", "responses", "messages", "converse", "gemini"]
"""The API one deployment is called with, where its provider kind speaks several."""

#: The api-version an ``azure`` provider sends when its policy gives none.
AZURE_API_VERSION = "2024-10-21"
_NEEDS_BASE_URL = frozenset({"openai", "anthropic", "azure"})
#: Provider fields that belong to one or two provider kinds.
_CLOUD_FIELDS = {
    "region": ("bedrock", "vertex"),
    "aws_profile": ("bedrock",),
    "project": ("vertex",),
    "api_version": ("azure",),
}


class Provider(Frozen):
    """Where a provider's requests go, and how the gateway reaches it
    (:mod:`gateway.upstream.egress`).

    ``ca_file``, ``client_cert`` and ``client_key`` are PEM files; the policy loader
    resolves a relative path against the folder of the policy file that names it and
    checks that the file can be used. Messages never repeat ``proxy`` (it may hold a
    password), and neither does ``repr()``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    api: Literal["openai", "anthropic", "sim", "bedrock", "vertex", "azure", "gemini"]
    base_url: str = ""
    region: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^[a-z0-9-]+$",
        description=(
            "bedrock: the AWS region (us-east-1); vertex: the Google Cloud location"
            " (europe-west1, or global)"
        ),
    )
    aws_profile: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "bedrock: the AWS shared-config profile whose credentials sign requests"
            " (default: the AWS default credential chain)"
        ),
    )
    project: str | None = Field(
        default=None, min_length=1, description="vertex: the Google Cloud project id"
    )
    api_version: str | None = Field(
        default=None,
        min_length=1,
        description=f"azure: the api-version query parameter (default {AZURE_API_VERSION})",
    )
    api_key_env: EnvName | tuple[EnvName, ...] | None = Field(
        default=None,
        description=(
            "env var holding the key; a list: one deployment per key, named"
            " provider#1, provider#2, ..."
        ),
    )
    headers: dict[str, str] = Field(default_factory=dict, description="extra headers sent upstream")
    speaks: Literal["openai", "anthropic"] | None = Field(
        default=None,
        description=(
            "api sim only: the built-in simulated provider answers in this format only (default:"
            " every format), so that serve --demo shows requests translated between formats"
        ),
    )
    proxy: str | None = Field(
        default=None,
        repr=False,
        description=(
            "http:// proxy for this provider, e.g. http://user:pass@proxy.corp:3128 (https://"
            " providers are reached through it with CONNECT). Default: the HTTPS_PROXY /"
            " HTTP_PROXY / NO_PROXY environment"
        ),
        json_schema_extra={"pattern": "^[Hh][Tt][Tt][Pp]://"},
    )
    ca_file: str | None = Field(
        default=None,
        min_length=1,
        description="PEM CA bundle that verifies this provider, instead of the system store",
    )
    client_cert: str | None = Field(
        default=None,
        min_length=1,
        description="PEM client certificate (chain) for mutual TLS; needs client_key",
    )
    client_key: str | None = Field(
        default=None,
        min_length=1,
        description="unencrypted PEM private key of client_cert; needs client_cert",
    )
    tls_verify: bool = Field(
        default=True,
        description="false turns certificate verification off for this provider (warned at start)",
    )
    stream_usage: bool = Field(
        default=True,
        description=(
            "ask this provider for a chat stream's usage chunk (stream_options.include_usage)"
            " even when the client did not, so that the stream's tokens are counted; false for"
            " a server that rejects stream_options (Azure OpenAI api-versions before"
            " 2024-09-01): its streams then count tokens only when the client asks"
        ),
    )

    @field_validator("proxy")
    @classmethod
    def _proxy_is_http(cls, value: str | None) -> str | None:
        return None if value is None else check_proxy_url(value)

    @model_validator(mode="after")
    def _needs_base_url(self) -> Self:
        if self.api in _NEEDS_BASE_URL and not self.base_url:
            raise ValueError(f"base_url is required for api {self.api}")
        for name, kinds in _CLOUD_FIELDS.items():
            if name in self.model_fields_set and self.api not in kinds:
                raise ValueError(f"{name} is for api {' and '.join(kinds)}")
        if self.api in ("bedrock", "vertex") and self.region is None:
            raise ValueError(f"region is required for api {self.api}")
        if self.api == "vertex":
            if self.project is None:
                raise ValueError("project is required for api vertex")
            if self.api_key_env is not None:
                raise ValueError(
                    "api vertex takes Google credentials (Application Default Credentials),"
                    " not api_key_env"
                )
        if self.api == "gemini" and self.api_key_env is None:
            raise ValueError("api gemini needs api_key_env (the Gemini API key's variable)")
        return self

    @model_validator(mode="after")
    def _egress_fits(self) -> Self:
        if (self.client_cert is None) != (self.client_key is None):
            given, missing = (
                ("client_cert", "client_key")
                if self.client_key is None
                else ("client_key", "client_cert")
            )
            raise ValueError(
                f"{given} needs {missing}: set both (the same file twice when one PEM holds both)"
            )
        if self.speaks is not None and self.api != "sim":
            raise ValueError("speaks is for api sim (the format of other providers is their api)")
        if self.api == "sim":
            set_ = [f for f in EGRESS_FIELDS if f in self.model_fields_set]
            if set_:
                verb = "does" if len(set_) == 1 else "do"
                raise ValueError(
                    f"api sim is served in-process: {', '.join(set_)} {verb} not apply to it"
                )
        return self


class Deployment(Frozen):
    """One upstream of a model (docs/policies.md, Deployments): a provider (each of its keys
    is a deployment), the model's name there (default: the model's ``upstream_model``,
    else its public name), its share of traffic and its name in events and metrics."""

    provider: str
    upstream_model: str | None = None
    weight: float = Field(default=1.0, gt=0)
    name: str | None = Field(default=None, min_length=1, pattern=r"^[^\s#]+$")
    upstream_api: DeploymentApi | None = Field(
        default=None,
        description=(
            "the API this deployment is called with where its provider kind has several:"
            " vertex (messages for Claude, gemini for Gemini's own generateContent, chat for"
            " the OpenAI-compatible endpoint; by default messages for a claude-* model, chat"
            " for a publisher/model id, else gemini), azure (chat or responses)"
        ),
    )
    price: PolicyPrice | None = Field(
        default=None, description="USD per million tokens on this deployment (over the model's)"
    )


class PolicyPrice(Frozen):
    """What a model costs, in USD per million tokens (``cache_read`` and ``cache_write``
    default to ``input``): it replaces the ``genai-prices`` table's price."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


UpstreamApi = Literal["chat", "responses"]
"""The OpenAI APIs a model of an ``openai`` provider speaks (docs/translation.md)."""


class Model(Frozen):
    """A public model: one ``provider``, or several ``deployments`` and how to balance them."""

    provider: str | None = None
    upstream_model: str | None = None
    deployments: tuple[Deployment, ...] = ()
    balance: Literal["weighted", "ordered", "least_busy"] = "weighted"
    affinity: Literal["session", "none"] = Field(
        default="session",
        description=(
            "with balance weighted: session keeps each session's turns on one deployment,"
            " where its prompt cache is warm (docs/caching.md); none draws every request"
        ),
    )
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    prefill: bool = False
    upstream_api: UpstreamApi | tuple[UpstreamApi, ...] = "chat"
    reasoning: bool | None = None
    price: PolicyPrice | None = Field(
        default=None, description="USD per million tokens (default: the genai-prices table)"
    )

    @model_validator(mode="after")
    def _provider_or_deployments(self) -> Self:
        if (self.provider is None) == (not self.deployments):
            raise ValueError(
                "give provider (one upstream) or deployments (several), not both"
                if self.provider is not None
                else "provider is required (or deployments)"
            )
        return self

    @property
    def rule(self) -> str:
        """How a deployment is chosen: the ``balance``, or ``session`` for ``weighted``
        with ``affinity: session`` (weighted, each session by its own ranking)."""
        return (
            "session" if self.balance == "weighted" and self.affinity == "session" else self.balance
        )

    @property
    def providers(self) -> tuple[str, ...]:
        """The providers serving this model, the first one first."""
        if self.provider is not None:
            return (self.provider,)
        return tuple(dict.fromkeys(d.provider for d in self.deployments))


# ---- the recovery policy -----------------------------------------------------


def _check_cap(base: float, cap: float) -> None:
    if cap < base:
        raise ValueError(f"cap ({cap:g}s) must not be below base ({base:g}s)")


class RateLimitBackoff(Frozen):
    retry_after_cap: Duration = 300.0
    retry_after_jitter: Fraction = 0.10
    base: Duration = 8.0
    cap: Duration = 60.0
    jitter: Duration = 5.0

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> Self:
        _check_cap(self.base, self.cap)
        return self


class TransientBackoff(Frozen):
    base: Duration = 1.0
    cap: Duration = 32.0
    jitter: Fraction = 0.25

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> Self:
        _check_cap(self.base, self.cap)
        return self


class RetryAllowance(Frozen):
    ratio: float = Field(default=0.2, ge=0.0)
    min_per_second: float = Field(default=5.0, ge=0.0)


_DEFAULT_RETRY_ON: tuple[RetryCategory, ...] = (
    "rate_limit", "server_overload", "server_error", "timeout", "connection",
)  # fmt: skip


class RetryPolicy(Frozen):
    # Written and dumped as ``budget`` (the policy key), read in code as ``allowance``.
    model_config = ConfigDict(frozen=True, extra="forbid", serialize_by_alias=True)

    max_retries: int = Field(default=8, ge=0)
    on: tuple[RetryCategory, ...] = _DEFAULT_RETRY_ON
    rate_limit: RateLimitBackoff = RateLimitBackoff()
    transient: TransientBackoff = TransientBackoff()
    # The word *budget* is kept for a team's money in code.
    allowance: RetryAllowance = Field(default=RetryAllowance(), alias="budget")


class TurnRetry(Frozen):
    on: tuple[RetryCategory, ...] = ("timeout", "connection", "server_error")
    wait: Duration = 10.0
    max: int = Field(default=1, ge=0)


class DeploymentRules(Frozen):
    """How a model's deployments are taken out and brought back (docs/recovery.md,
    Deployments)."""

    quota_cooldown: Duration = 3600.0  # quota_exhausted or auth on one deployment
    max_ejected_percent: float = Field(default=50.0, ge=0.0, le=100.0)


class Fallback(Frozen):
    chain: tuple[str, ...] = ()
    after_consecutive_server_errors: int = Field(default=2, ge=1)
    cooldown: Duration = 60.0
    on_prompt_too_long: tuple[str, ...] = ()


class Compaction(Frozen):
    enabled: bool = True
    strategies: tuple[Strategy, ...] = ("snip_tool_results", "drop_middle")
    keep_recent: int = Field(default=6, ge=1)
    tool_result_max_chars: int = Field(default=4000, ge=100)
    summarize_model: str | None = None
    # the summarize strategy's call, both tries, never past the request's deadline
    summarize_timeout: Duration = 30.0
    proactive: bool = False


class OutputRecovery(Frozen):
    max_continuations: int = Field(default=3, ge=0)
    respect_client_max_tokens: bool = True


class StreamPolicy(Frozen):
    keepalive: Duration = 15.0
    on_midstream_failure: Literal["error", "continue"] = "error"
    max_resumes: int = Field(default=2, ge=0)  # resumes of one broken stream, at most


class Timeouts(Frozen):
    connect: Duration = 10.0
    first_byte: Duration = 120.0
    stream_idle: Duration = 60.0
    total: Duration = 600.0


class ClassifyRule(Frozen):
    """A rule that runs before the built-in classification; all given conditions must hold."""

    status: int | None = Field(default=None, ge=100, le=599)
    body_contains: str | None = None
    code: str | None = Field(default=None, description="provider error.code or error.type")
    category: RetryCategory


class PromptCachePolicy(Frozen):
    """``breakpoints: auto`` gives a request translated towards Anthropic Messages or
    Bedrock Converse that carries no cache marker the markers a careful client would set
    (after the tools, after the system text, on the last message), when its prompt reaches
    the model's cacheable minimum; ``off`` adds none (docs/caching.md)."""

    breakpoints: Literal["auto", "off"] = "auto"


class Policy(Frozen):
    retry: RetryPolicy = RetryPolicy()
    turn_retry: TurnRetry = TurnRetry()
    fallback: Fallback = Fallback()
    deployments: DeploymentRules = DeploymentRules()
    compaction: Compaction = Compaction()
    output_recovery: OutputRecovery = OutputRecovery()
    stream: StreamPolicy = StreamPolicy()
    timeouts: Timeouts = Timeouts()
    classify: tuple[ClassifyRule, ...] = ()
    prompt_cache: PromptCachePolicy = PromptCachePolicy()

    def retries_on(self, category: Category) -> bool:
        return category.value in self.retry.on


# ---- teams -------------------------------------------------------------------


class TeamLimits(Frozen):
    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    max_concurrent: int | None = Field(
        default=None,
        gt=0,
        description="at most this many of the team's requests in flight at once, per "
        "gateway process (a replica, or a worker of serve --workers); beyond it a 429",
    )


class Budget(Frozen):
    """What a team may spend per period (UTC; weeks start on Monday), and what happens once
    it is spent: ``refuse`` answers 429; ``downgrade`` serves the ``downgrade_to`` models
    only (a request for another model is answered by the first of them that serves its
    endpoint) until the period ends."""

    usd: float = Field(gt=0)
    per: Literal["day", "week", "month"] = "month"
    warn_at: float | None = Field(default=None, gt=0, le=1)
    when_spent: Literal["refuse", "downgrade"] = "refuse"
    downgrade_to: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _downgrade_needs_models(self) -> Self:
        if self.when_spent == "downgrade" and not self.downgrade_to:
            raise ValueError("when_spent: downgrade needs downgrade_to (the models served)")
        if self.when_spent == "refuse" and self.downgrade_to:
            raise ValueError("downgrade_to is for when_spent: downgrade")
        return self


class RouteMatch(Frozen):
    model: str = "*"
    path: str | None = None


class Route(Frozen):
    name: str | None = None
    match: RouteMatch = RouteMatch()
    policy: str = "default"
    override: dict[str, Any] = Field(
        default_factory=dict, description="deep-merged over the policy"
    )


class Team(Frozen):
    keys: tuple[TeamKey, ...] = ()
    models: tuple[str, ...] = ("*",)
    limits: TeamLimits = TeamLimits()
    routes: tuple[Route, ...] = (Route(),)
    budget: Budget | None = None


class PolicyFile(Frozen):
    """One YAML file; a policy directory is the merge of all its files."""

    providers: dict[str, Provider] = Field(default_factory=dict)
    models: dict[str, Model] = Field(default_factory=dict)
    policies: dict[str, Policy] = Field(default_factory=dict)
    teams: dict[str, Team] = Field(default_factory=dict)


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one policy file, for editors and CI."""
    schema = PolicyFile.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "llm-gateway policy file",
        "description": (
            "One YAML file of an llm-gateway policy directory (every *.yaml under it is"
            " merged). Durations are seconds or strings like 250ms, 8s, 5m."
        ),
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }
