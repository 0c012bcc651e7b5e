"""The declared seams of the recovery loops: what they carry and what they act through.

The loops (:mod:`gateway.recovery.engine`, ``compacting``, ``continuing``,
``deployment_choice``) take a :class:`Request`, drive an :class:`Attempter` and report
through the :class:`RecoveryEvents` of an :class:`Env`; an attempt yields an
:class:`Outcome`, the loop a :class:`Result`. The live path plugs in the HTTP attempter
(:mod:`gateway.live.attempter`) and the log-and-metrics emitter
(:class:`gateway.observe.events.Events`); ``llm-gateway simulate`` plugs in a scripted
attempter, a virtual clock and its timeline recorder through the same parameters. This
module imports none of the loops, so each of them can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from gateway.errors import GatewayError
from gateway.formats import Format
from gateway.formats.body_parts import LONG, Parts
from gateway.formats.body_parts import encode as encode_parts
from gateway.money.bill import Bill
from gateway.money.pricing import Price
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.resilience.decide import Progress, Retry
from gateway.resilience.deployments import Transition
from gateway.resilience.failure import Failure, Rng
from gateway.routing.policyset import Deployed
from gateway.state.base import StateBackend
from gateway.state.deployments import DeploymentBoard


@dataclass(slots=True)
class Outcome:
    """What one attempt produced: a success (body or open stream) or a classified failure."""

    failure: Failure | None = None
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    stream: Any = None  # the attempter's open stream on a streaming success
    data: Any = None  # the decoded JSON body, when the attempter decoded it

    def json(self) -> dict[str, Any] | None:
        """The answer as a JSON object: ``data`` when the attempter decoded it, else the
        body decoded; None when it is not a JSON object."""
        return self.data if self.data is not None else json_object(self.body)


def json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` decoded when it is a JSON object, else None (not JSON, or not an object)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


@dataclass(slots=True)
class Request:
    """The parts of a client request that recovery reads or changes."""

    fmt: Format  # the client's format: how the body holds the conversation and its answer
    body: dict[str, Any]
    model: str  # the public model asked for
    route_id: str
    team: str
    policy: Policy
    deadline: float  # monotonic
    context_window: int | None = None  # of the model asked for; sizes compaction
    size: int = 0  # bytes of the client's body: a large one is encoded as it is sent
    # what the request was billed: each billed part is added (gateway/recovery/billing.py);
    # a follow-up request (a continuation, a compacted body) adds to the same bill
    bill: Bill = field(default_factory=Bill)
    # the client's headers: the session it names, read only when a choice of deployment
    # needs it (gateway/recovery/deployment_choice.py)
    headers: Mapping[str, str] = field(default_factory=dict)
    # the session's 32-bit digest (gateway/resilience/affinity.py): of the one the client
    # named, else of the conversation's start; made when a choice first needs it
    session: int | None = None

    def encode(self, body: dict[str, Any], upstream_model: str) -> bytes | Parts:
        """What goes upstream: always the body the gateway decided on, encoded again.

        Never the client's bytes: a body with a key twice (``"model"`` allowed, then
        ``"model"`` not allowed) decodes differently in different parsers; re-encoding
        (about 2 µs for a typical request) makes the provider see exactly one of each key.
        A request that may hold a long string (:data:`~gateway.formats.body_parts.LONG` bytes or
        more) is encoded as its long strings are sent (:mod:`gateway.formats.body_parts`): never
        whole beside the decoded body it came from. A body that cannot be encoded (nested
        past orjson's 254 levels: the edge keeps a client's body and its tool-call
        arguments within ``max_json_depth``, so only a translation could) is the client's
        400 in its own format, never a 500.
        """
        if body.get("model") != upstream_model:
            body = {**body, "model": upstream_model}
        try:
            return encode_parts(body, self.body) if self.size >= LONG else orjson.dumps(body)
        except orjson.JSONEncodeError as e:  # the edge's checks keep a client's body encodable
            raise GatewayError(
                400,
                f"the request cannot be sent on in the provider's format ({e})",
                code="request_not_encodable",
            ) from None


class Attempter(Protocol):
    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        """One attempt on ``model``, through its deployment ``progress.deployment``."""
        ...

    def deployments(self, model: str) -> tuple[Sequence[Deployed], str]:
        """The deployments of ``model`` and the rule that chooses among them: its
        ``balance``, or ``session`` (docs/policies.md, Deployments)."""
        ...

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None: ...

    def price(self, model: str, deployment: int) -> Price | None:
        """What ``model`` costs on its deployment ``deployment`` (None: not priced)."""
        ...

    # The ``summarize`` compaction step's own call
    # (see :func:`gateway.recovery.compacting.summarize`).
    def model_info(self, model: str, deployment: int) -> tuple[Format, int | None]:
        """The format ``ask`` speaks to ``model`` on its deployment ``deployment``, and the
        model's context window when known."""
        ...

    async def ask(
        self, model: str, fmt: Format, body: dict[str, Any], within: float, deployment: int
    ) -> Outcome:
        """One JSON request the gateway makes itself, to the deployment ``deployment`` of
        ``model``: never streamed (whatever the client asked), bounded by ``within``
        seconds, not one of the request's attempts."""
        ...


class RecoveryEvents(Protocol):
    """What the recovery loops report, as it happens: each call is one decision carried
    out or one state that changed (what each means: :class:`gateway.observe.events.Events`,
    the live implementation, which logs, counts and traces it). ``llm-gateway simulate``
    passes its timeline recorder instead; the loops call whichever the :class:`Env`
    holds, and nothing else."""

    def api_retry(
        self,
        r: RequestLog,
        model: str,
        attempt: int,
        max_retries: int,
        wait: float,
        f: Failure,
        *,
        reason: str | None = None,
    ) -> None: ...

    def turn_retry(self, r: RequestLog, model: str, wait: float, f: Failure) -> None: ...

    def retry_budget_exhausted(self, r: RequestLog, model: str, f: Failure) -> None: ...

    def gave_up(self, r: RequestLog, model: str, reason: str, f: Failure) -> None: ...

    def fallback(self, r: RequestLog, from_model: str, to_model: str, reason: str) -> None: ...

    def fallback_model_activated(
        self,
        team: str,
        model: str,
        fallback_model: str,
        reason: str,
        r: RequestLog | None = None,
    ) -> None: ...

    def fallback_model_recovered(self, team: str, model: str) -> None: ...

    def deployment_attempt(self, model: str, deployment: str, f: Failure | None) -> None: ...

    def deployment_changed(
        self, team: str, model: str, deployment: str, t: Transition, r: RequestLog | None = None
    ) -> None: ...

    def prompt_too_long_recovery(
        self, r: RequestLog, model: str, strategy: str, outcome: str, **sizes: Any
    ) -> None: ...

    def output_continuation(self, r: RequestLog, model: str, n: int) -> None: ...

    def not_continued(self, r: RequestLog, model: str, reason: str, n: int) -> None: ...

    def stream_interrupted(
        self, r: RequestLog, model: str, f: Failure, action: str, *, reason: str = ""
    ) -> None: ...

    def stream_event_dropped(self, r: RequestLog, model: str, count: int = 1) -> None: ...


@dataclass(slots=True)
class Env:
    """What the loops share across requests: the state, where they report, the clocks
    and the randomness (all injected: simulate's clock is virtual, its random seeded)."""

    state: StateBackend
    events: RecoveryEvents
    monotonic: Callable[[], float]
    wall: Callable[[], float]
    rng: Rng
    board: DeploymentBoard = field(default_factory=DeploymentBoard)


@dataclass(slots=True)
class Result:
    outcome: Outcome
    progress: Progress
    reason: str = ""  # GiveUp reason when the outcome is a failure
    body: dict[str, Any] = field(default_factory=dict)  # the request body last sent
