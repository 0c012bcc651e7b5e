"""The only loop that acts on recovery decisions.

``recover`` asks :func:`gateway.resilience.decide.decide` what to do after each
failed attempt and carries the answer out through an :class:`Attempter` (which
sends and sleeps). The proxy's attempter talks HTTP and writes keepalives;
``llm-gateway simulate`` plugs in a scripted one on a virtual clock, so both
run exactly this code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from gateway.compacting import compact_step, summarize
from gateway.errors import Category
from gateway.observe.events import Events, RequestLog
from gateway.policy.policyset import Deployed
from gateway.policy.schema import Policy
from gateway.resilience import deployments as dep
from gateway.resilience import fallback
from gateway.resilience.backoff import headroom_reset
from gateway.resilience.decide import (
    GiveUp,
    Progress,
    Reroute,
    Retry,
    apply,
    decide,
)
from gateway.resilience.failure import Failure, Rng
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


@dataclass(slots=True)
class Request:
    """The parts of a client request that recovery reads or changes."""

    api: str  # "openai" | "anthropic" | "responses" (message shapes for compaction)
    body: dict[str, Any]
    model: str  # the public model asked for
    route_id: str
    team: str
    policy: Policy
    deadline: float  # monotonic
    context_window: int | None = None  # of the model asked for; sizes compaction

    def encode(self, body: dict[str, Any], upstream_model: str) -> bytes:
        """What goes upstream: always the body the gateway decided on, encoded again.

        Never the client's bytes: a body with a key twice (``"model"`` allowed, then
        ``"model"`` not allowed) decodes differently in different parsers; re-encoding
        (about 2 µs for a typical request) makes the provider see exactly one of each key.
        """
        if body.get("model") != upstream_model:
            body = {**body, "model": upstream_model}
        return orjson.dumps(body)


class Attempter(Protocol):
    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        """One attempt on ``model``, through its deployment ``progress.deployment``."""
        ...

    def deployments(self, model: str) -> tuple[Sequence[Deployed], str]:
        """The deployments of ``model`` and its ``balance`` rule (docs/policies.md,
        Deployments)."""
        ...

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None: ...

    # The ``summarize`` compaction step's own call (see :func:`gateway.compacting.summarize`).
    def model_info(self, model: str) -> tuple[str, int | None]:
        """The wire format ``ask`` speaks to ``model`` (``openai`` or ``anthropic``), and
        the model's context window when known."""
        ...

    async def ask(self, model: str, wire: str, body: dict[str, Any], within: float) -> Outcome:
        """One JSON request the gateway makes itself: never streamed (whatever the client
        asked), bounded by ``within`` seconds, not one of the request's attempts."""
        ...


@dataclass(slots=True)
class Env:
    state: StateBackend
    events: Events
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


def _outcome_label(f: Failure | None) -> str:
    if f is None:
        return "ok"
    return "server_error" if f.category.counts_toward_fallback else "other"


async def recover(req: Request, log: RequestLog, env: Env, attempter: Attempter) -> Result:
    """Attempt, decide, act, until an answer or a named reason to give up."""
    policy, fb = req.policy, req.policy.fallback
    key = f"{req.route_id}|{req.model}"
    probe = False
    start = back_to = 0
    if fb.chain:
        choice = await env.state.choose(key, fb, env.wall())
        start, probe, back_to = choice.index, choice.probe, choice.back_to
        if start:
            log.used("fallback")
    p = Progress(deadline=req.deadline, chain=(req.model, *fb.chain), chain_index=start)
    body = req.body
    on_chain = True  # False after moving to an on_prompt_too_long model
    while True:
        deps = _Deployments.of(p.model, attempter, env, policy)
        pick = _ONLY if deps is None else deps.pick(p)
        if isinstance(pick, dep.Wait):  # every deployment is out: wait, move on or stop
            gone = await _every_deployment_out(p, pick, req, log, env, attempter, on_chain)
            if gone is not None:
                return gone
            continue
        p.attempts += 1
        log.attempts += 1
        if deps is None:
            p.deployment = 0
            out = await attempter.send(p.model, body, p)
            sibling = None
        else:
            deps.begin(p)
            try:
                out = await attempter.send(p.model, body, p)
            finally:
                deps.end(p)
            sibling = deps.record(p, pick, out, req, log)
        f = out.failure
        activated: int | None = None
        if fb.chain and on_chain and sibling != 0.0:  # a sibling answers: not the model's
            label = _outcome_label(f)
            t = await env.state.record(key, fb, p.chain_index, label, env.wall(), probe=probe)
            activated = _announce(t, req, env.events, log)
            if probe and label == "server_error":
                activated = back_to  # the primary is still down: back to the fallback now
            probe = False
        if f is None:
            log.answered_by = p.model
            return Result(out, p, body=body)
        while True:  # decide until an action that needs another attempt
            d = decide(p, f, policy, env.monotonic(), env.rng, activated=activated, sibling=sibling)
            sibling = None  # one sibling retry per failure
            activated = None
            budget = policy.retry.budget
            if (
                isinstance(d, Retry)
                and not d.turn
                and not await env.state.spend_retry(req.route_id, budget, env.wall())
            ):
                env.events.retry_budget_exhausted(log, p.model, f)
                d = GiveUp("retry_budget_exhausted")
            apply(p, d)
            if isinstance(d, GiveUp):
                log.answered_by = p.model
                env.events.gave_up(log, p.model, d.reason, f)
                return Result(out, p, reason=d.reason, body=body)
            if isinstance(d, Retry):
                log.used("retry")
                if d.turn:
                    env.events.turn_retry(log, p.model, d.wait, f)
                else:
                    env.events.api_retry(
                        log, p.model, d.retry_number, policy.retry.max_retries, d.wait, f
                    )
                await attempter.sleep(d.wait, d, f)
                break
            if isinstance(d, Reroute):
                log.used("fallback")
                env.events.fallback(log, p.chain[0] if on_chain else req.model, d.model, d.reason)
                if d.original_body:
                    body, on_chain = req.body, False
                break
            if d.strategy == "summarize":
                compacted = await summarize(req, body, f, p, log, env, attempter)
            else:
                compacted = compact_step(req, body, d.strategy, f, p, log, env.events)
            if compacted is not body:
                body = compacted
                break


_ONLY = dep.Pick(0)


class _Deployments:
    """The deployments of the model an attempt is about to go to, and their states."""

    __slots__ = ("balance", "env", "model", "names", "rules", "weights")

    @classmethod
    def of(cls, model: str, attempter: Attempter, env: Env, policy: Policy) -> _Deployments | None:
        """None for a model with one deployment: nothing to choose or keep (no cost)."""
        found, balance = attempter.deployments(model)
        return None if len(found) < 2 else cls(model, found, balance, env, policy)

    def __init__(
        self, model: str, found: Sequence[Deployed], balance: str, env: Env, policy: Policy
    ) -> None:
        self.balance = balance
        self.model = model
        self.env = env
        self.names = [d.name for d in found]
        self.weights = [d.weight for d in found]
        self.rules = dep.Rules(
            retry_after_cap=policy.retry.rate_limit.retry_after_cap,
            quota_cooldown=policy.deployments.quota_cooldown,
            eject_after=policy.fallback.after_consecutive_server_errors,
            eject_for=policy.fallback.cooldown,
            max_ejected_percent=policy.deployments.max_ejected_percent,
            # a probe reports within two first-byte timeouts (its headers, its first event)
            probe_lease=min(policy.fallback.cooldown, 2 * policy.timeouts.first_byte),
        )

    def pick(self, p: Progress) -> dep.Pick | dep.Wait:
        board, now = self.env.board, self.env.wall()
        states = board.states(self.model, self.names)
        pick = dep.choose(
            states,
            self.weights,
            self.balance,
            p.deployments_tried,
            now,
            self.env.rng,
            board.inflight(self.model, self.names),
        )
        if isinstance(pick, dep.Pick):
            p.deployment = pick.index
            if pick.probe:  # this request probes it: the others go to its siblings meanwhile
                leased = dep.probing(states[pick.index], now, self.rules.probe_lease)
                board.put(self.model, self.names[pick.index], leased)
        return pick

    def begin(self, p: Progress) -> None:
        self.env.board.begin(self.model, self.names[p.deployment])

    def end(self, p: Progress) -> None:
        self.env.board.end(self.model, self.names[p.deployment])

    def record(
        self, p: Progress, pick: dep.Pick, out: Outcome, req: Request, log: RequestLog
    ) -> float | None:
        """Note the outcome on the deployment; seconds until a sibling can take a retry."""
        p.deployments_tried.add(p.deployment)
        now, f = self.env.wall(), out.failure
        states = self.env.board.states(self.model, self.names)
        short = headroom_reset(out.headers, now) if f is None and out.headers else None
        new, t = dep.record(
            states, p.deployment, f, self.rules, now, probe=pick.probe, short_for=short
        )
        name = self.names[p.deployment]
        self.env.events.deployment_attempt(self.model, name, f)
        if new != states[p.deployment]:
            self.env.board.put(self.model, name, new)
            states[p.deployment] = new
        if t is not None:
            self.env.events.deployment_changed(req.team, self.model, name, t, log)
        return None if f is None else dep.sibling_in(states, p.deployment, f, now)


async def _every_deployment_out(
    p: Progress,
    wait: dep.Wait,
    req: Request,
    log: RequestLog,
    env: Env,
    attempter: Attempter,
    on_chain: bool,
) -> Result | None:
    """Every deployment of ``p.model`` is out: wait for the earliest when the deadline
    allows (None: pick again), else the next model of the chain, else a 429.

    The wait is an ``api_retry`` event (category ``rate_limit``, ``error`` naming the
    wait), counted in ``retry_wait_seconds_total`` but not in ``retries_total``: it waits
    for a deployment, it retries no failed attempt (one that failed was counted already)."""
    out = f"every deployment of {p.model} is out of service for {wait.seconds:.1f} s"
    f = Failure(Category.rate_limit, 429, out, retry_after=wait.seconds)
    if env.monotonic() + wait.seconds <= p.deadline:
        retry = Retry(wait.seconds, p.retries_on_model)
        max_retries = req.policy.retry.max_retries
        env.events.api_retry(
            log, p.model, retry.retry_number, max_retries, wait.seconds, f, reason=out
        )
        await attempter.sleep(wait.seconds, retry, f)
        return None
    nxt = p.next_in_chain() if on_chain else None
    if nxt is not None:
        d = Reroute(p.chain[nxt], "no_deployment", chain_index=nxt)
        log.used("fallback")
        env.events.fallback(log, p.model, d.model, d.reason)
        apply(p, d)
        return None
    log.answered_by = p.model
    env.events.gave_up(log, p.model, "no_deployment", f)
    return Result(Outcome(f, status=429), p, reason="no_deployment", body=req.body)


def _announce(
    t: fallback.Transition | None, req: Request, events: Events, log: RequestLog
) -> int | None:
    if isinstance(t, fallback.Activated):
        to_model = fallback.model_at(req.model, req.policy.fallback, t.to_index)
        events.fallback_model_activated(req.team, req.model, to_model, t.reason, log)
        return t.to_index
    if isinstance(t, fallback.Recovered):
        events.fallback_model_recovered(req.team, req.model)
    if isinstance(t, fallback.Follow):
        return t.index
    return None
