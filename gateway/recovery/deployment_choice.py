"""Which deployment of a model an upstream call goes to, and what its outcome does to it:
the pure rules of :mod:`gateway.resilience.deployments` over the states the board keeps.

:func:`gateway.recovery.engine.recover` calls the request's attempts through it, and
:func:`gateway.recovery.compacting.summarize` the summary call: both skip a deployment that is
out, and both take one out when it fails (docs/recovery.md, Deployments).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from gateway.observe.request_log import RequestLog
from gateway.resilience import affinity
from gateway.resilience import deployments as dep
from gateway.resilience.backoff import headroom_reset
from gateway.routing.policyset import Deployed

if TYPE_CHECKING:
    from gateway.recovery.seams import Attempter, Env, Outcome, Request

ONLY = dep.Pick(0)  # the one deployment of a model that has no other


class Deployments:
    """The deployments of one model, and their states."""

    __slots__ = ("balance", "env", "model", "names", "req", "rules", "weights")

    @classmethod
    def of(cls, model: str, attempter: Attempter, env: Env, req: Request) -> Deployments | None:
        """None for a model with one deployment: nothing to choose or keep (no cost)."""
        found, balance = attempter.deployments(model)
        return None if len(found) < 2 else cls(model, found, balance, env, req)

    def __init__(
        self, model: str, found: Sequence[Deployed], balance: str, env: Env, req: Request
    ) -> None:
        policy = req.policy
        self.balance = balance
        self.model = model
        self.env = env
        self.req = req
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

    def choose(self, tried: AbstractSet[int]) -> dep.Pick | dep.Wait:
        """The deployment the next call goes to (``tried``: those this request used)."""
        board = self.env.board
        session = self.session() if self.balance == "session" else None
        return dep.choose(
            board.states(self.model, self.names),
            self.weights,
            self.balance,
            tried,
            self.env.wall(),
            self.env.rng,
            board.inflight(self.model, self.names),
            session,
            self.names,
        )

    def session(self) -> int:
        """The request's session: the one its client named, else its conversation's
        (computed once, when a choice first needs it, and kept on the request: a retry,
        a fallback or a follow-up goes by the same one). Hashed with the team."""
        req = self.req
        if req.session is None:
            named = affinity.named(req.headers, req.body)
            if named is None:
                named = affinity.conversation(req.body, req.fmt.entries_key)
            req.session = affinity.digest(req.team, named)
        return req.session

    async def call(
        self, pick: dep.Pick, call: Awaitable[Outcome], team: str, log: RequestLog
    ) -> tuple[Outcome, float | None]:
        """``call`` made on the deployment ``pick``, its outcome noted on it; with the
        seconds until a sibling can take a retry of its failure (None: none can)."""
        board, name = self.env.board, self.names[pick.index]
        if self.req.session is not None:  # the access log names it by its digest
            log.session = affinity.label(self.req.session)
        if pick.probe:  # this call probes it: the others go to its siblings meanwhile
            states = board.states(self.model, self.names)
            board.put(self.model, name, dep.probing(states[pick.index], self.env.wall(),
                                                    self.rules.probe_lease))  # fmt: skip
        board.begin(self.model, name)
        try:
            out = await call
        finally:
            board.end(self.model, name)
        return out, self._record(pick, out, team, log)

    def _record(self, pick: dep.Pick, out: Outcome, team: str, log: RequestLog) -> float | None:
        now, f, i = self.env.wall(), out.failure, pick.index
        states = self.env.board.states(self.model, self.names)
        short = headroom_reset(out.headers, now) if f is None and out.headers else None
        new, t = dep.record(states, i, f, self.rules, now, probe=pick.probe, short_for=short)
        name = self.names[i]
        self.env.events.deployment_attempt(self.model, name, f)
        if new != states[i]:
            self.env.board.put(self.model, name, new)
            states[i] = new
        if t is not None:
            self.env.events.deployment_changed(team, self.model, name, t, log)
        return None if f is None else dep.sibling_in(states, i, f, now)
