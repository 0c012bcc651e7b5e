"""The cloud credentials of the policy set being served (docs/clouds.md, Credentials).

One :class:`~gateway.clouds.credentials.Credential` per cloud provider that signs or
takes tokens (no static key): found when the gateway starts (before it is ready) or when
a reload adds the provider, kept fresh in the background, closed when a reload drops the
provider. A provider whose credentials fail does not stop the gateway: its deployments
are taken out (reason ``auth``) until the credentials work again, and the events
``credentials_failed`` / ``credentials_recovered`` name the provider, never a secret.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from gateway.clouds.kinds import KINDS
from gateway.errors import Category
from gateway.policy.policyset import PolicySet
from gateway.policy.schema import Provider
from gateway.resilience.deployments import OUT, DeploymentState
from gateway.state.deployments import DeploymentBoard

log = structlog.get_logger("gateway")

#: How long a provider's deployments are out when its credentials fail: until they work
#: again (a recovery puts them back at once), or this long at most.
OUT_FOR_S = 3600.0


class CloudCredentials:
    """The credentials of the cloud providers of the current policy set."""

    def __init__(
        self,
        board: DeploymentBoard,
        policies: Callable[[], PolicySet],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._board = board
        self._policies = policies
        self._clock = clock
        self._held: dict[str, tuple[Provider, Any]] = {}  # name -> (its config, Credential)
        self._tasks: set[asyncio.Task[None]] = set()

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

    async def start(self, policies: PolicySet) -> None:
        """Find the credentials of ``policies`` (each lookup in a thread; all at once)."""
        fresh = self._update(policies)
        if fresh:
            await asyncio.gather(*(cred.start() for cred in fresh))

    def reload(self, policies: PolicySet) -> None:
        """A new policy set: start the credentials it adds (in the background), close the
        ones it drops, keep those of unchanged providers."""
        for cred in self._update(policies):
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
                self._spawn(gone.close())
        fresh: list[Any] = []
        if not wanted:
            return fresh
        from gateway.clouds.credentials import credential_of  # imports no cloud library

        for name, p in wanted.items():
            if name not in self._held:
                cred = credential_of(name, p, self._changed)
                if cred is not None:
                    self._held[name] = (p, cred)
                    fresh.append(cred)
        return fresh

    async def _start(self, cred: Any) -> None:
        """A credential a reload added: requests in the meantime found none and took its
        deployments out; once found, they are back (a failure is reported by the
        credential itself)."""
        await cred.start()
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
        out = DeploymentState(
            until=self._clock() + OUT_FOR_S,
            state=OUT,
            why=Category.auth.value,
            last_error=Category.auth.value,
        )
        for model, name in self._deployments(provider):
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
