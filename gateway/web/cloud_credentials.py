"""The cloud credentials of the policy set being served (docs/clouds.md, Credentials).

One :class:`~gateway.upstream.credentials.Credential` per cloud provider that signs or
takes tokens (no static key): looked for in the background when the gateway starts (its
port opens at once) or when a reload adds the provider, kept fresh in the background,
closed when a reload drops the provider. Until its first token has come, a provider's
deployments are out on this replica (no request waits for it, none is sent without it);
a first token that has not come within the time limit, or credentials that fail or
expire, keep them out (reason ``auth``) until the credentials work again. The events
``credentials_failed`` / ``credentials_recovered`` name the provider, never a secret.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from gateway.errors import Category
from gateway.policy.schema import Provider
from gateway.providers.kinds import KINDS
from gateway.resilience.deployments import OUT, DeploymentState
from gateway.routing.policyset import PolicySet
from gateway.state.deployments import DeploymentBoard
from gateway.upstream.refresh import FETCH_TIMEOUT

log = structlog.get_logger("gateway")

#: How long a provider's deployments are out when its credentials fail: until they work
#: again (a recovery puts them back at once), or this long at most.
OUT_FOR_S = 3600.0


class CloudCredentials:
    """The credentials of the cloud providers of the current policy set (``timeout``: how
    long a first token may take before its provider is out with the event)."""

    def __init__(
        self,
        board: DeploymentBoard,
        policies: Callable[[], PolicySet],
        clock: Callable[[], float] = time.time,
        timeout: float = FETCH_TIMEOUT,
    ) -> None:
        self._board = board
        self._policies = policies
        self._clock = clock
        self._timeout = timeout
        self._held: dict[str, tuple[Provider, Any]] = {}  # name -> (its config, Credential)
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting: set[str] = set()  # providers of the start still on their first fetch

    @property
    def started(self) -> bool:
        """Every credential looked for at start has its first token, or its time is up
        (what ``/readyz`` waits for; a reload never makes it False)."""
        return not self._starting

    def get(self, provider: str) -> Any:
        """The credential of ``provider`` (None: it has a static key, or no cloud kind)."""
        held = self._held.get(provider)
        return held[1] if held is not None else None

    def problems(self) -> dict[str, str]:
        """The providers whose credentials cannot be used now, and why."""
        out: dict[str, str] = {}
        for name, (_, cred) in self._held.items():
            if cred.problem is not None:
                out[name] = cred.problem
        return out

    def start(self, policies: PolicySet) -> None:
        """Look for the credentials of ``policies``, in the background (each in a thread of
        its own, all at once): only readiness (:attr:`started`) waits for them."""
        fresh = self._update(policies)
        self._starting.update(cred.provider for cred in fresh)
        self._begin(fresh)

    def reload(self, policies: PolicySet) -> None:
        """A new policy set: start the credentials it adds (in the background), close the
        ones it drops, keep those of unchanged providers."""
        self._begin(self._update(policies))

    def _begin(self, fresh: Iterable[Any]) -> None:
        """Start ``fresh`` credentials; their deployments are out here until they have a
        token (quietly: the event comes when the first token is late or fails)."""
        for cred in fresh:
            self._take_out(cred.provider, failed=False)
            self._spawn(self._start(cred))

    async def close(self) -> None:
        held, self._held = self._held, {}
        await asyncio.gather(*(cred.close() for _, cred in held.values()))
        for task in list(self._tasks):
            task.cancel()

    def _update(self, policies: PolicySet) -> list[Any]:
        wanted = {
            name: p
            for name, p in policies.providers.items()
            if p.api in KINDS and p.api_key_env is None
        }
        for name in list(self._held):
            if wanted.get(name) != self._held[name][0]:
                _, gone = self._held.pop(name)
                self._starting.discard(name)
                self._spawn(gone.close())
        fresh: list[Any] = []
        if not wanted:
            return fresh
        from gateway.upstream.credential_kinds import credential_of  # imports no cloud library

        for name, p in wanted.items():
            if name not in self._held:
                cred = credential_of(name, p, self._changed, timeout=self._timeout)
                if cred is not None:
                    self._held[name] = (p, cred)
                    fresh.append(cred)
        return fresh

    async def _start(self, cred: Any) -> None:
        """A credential started: once its first token has come its deployments are back (a
        failure, or a first token later than the limit, is reported by the credential
        itself, and its recovery puts them back)."""
        try:
            await cred.start()
        finally:
            self._starting.discard(cred.provider)
        if cred.problem is None:
            self._restore(cred.provider)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _changed(self, provider: str, problem: str | None) -> None:
        """A credential became unusable (``problem``) or usable again (None): its
        deployments go out or come back, and the event says so."""
        if problem is None:
            log.info("credentials_recovered", provider=provider)
            self._restore(provider)
            return
        log.error("credentials_failed", provider=provider, reason=problem)
        self._take_out(provider, failed=True)

    def _take_out(self, provider: str, *, failed: bool) -> None:
        """Take the deployments of ``provider`` out (reason auth) until it is restored;
        ``failed``: its credentials failed (else they are not there yet)."""
        until = self._clock() + OUT_FOR_S
        for model, name in self._deployments(provider):
            (state,) = self._board.states(model, (name,))
            last = Category.auth.value if failed else state.last_error
            out = DeploymentState(until=until, state=OUT, why=Category.auth.value, last_error=last)
            # this replica's credentials: the others, with their own, are not told
            self._board.put(model, name, out, local=False)

    def _restore(self, provider: str) -> None:
        """Put back the deployments of ``provider`` that are out for auth."""
        now = self._clock()
        for model, name in self._deployments(provider):
            (state,) = self._board.states(model, (name,))
            if state.why == Category.auth.value and not state.serving(now):
                back = DeploymentState(last_error=state.last_error)
                self._board.put(model, name, back, local=False)

    def _deployments(self, provider: str) -> list[tuple[str, str]]:
        """(model, deployment) of every deployment ``provider``'s credential authorizes."""
        return [
            (model, d.name)
            for model, deployments in self._policies().deployments.items()
            for d in deployments
            if d.provider == provider and d.key_env is None
        ]
