"""Where deployment states live (docs/recovery.md, Deployments): a local view every request
reads without waiting, and the transitions it writes.

The engine reads the states of a model's deployments before each attempt and writes
the one an outcome changed (:mod:`gateway.resilience.deployments` decides both). Reads
are plain dictionary lookups. States are keyed by model and deployment *name* (never a
key). An in-flight count per deployment (this process's) serves ``balance:
least_busy``.

:class:`DeploymentBoard` is this process's view; a change made here is also handed to
``publish`` when one is set, and a change seen elsewhere is stored with ``local=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from gateway.resilience.deployments import DeploymentState
from gateway.routing.policyset import Deployed

__all__ = ["DeploymentBoard"]

_INITIAL = DeploymentState()
Publish = Callable[[str, str, DeploymentState], None]


class DeploymentBoard:
    """The deployment states this process knows, and its requests in flight."""

    def __init__(self, publish: Publish | None = None) -> None:
        self._states: dict[tuple[str, str], DeploymentState] = {}
        self._inflight: dict[tuple[str, str], int] = {}
        self.publish = publish

    def states(self, model: str, names: Sequence[str]) -> list[DeploymentState]:
        get = self._states.get
        return [get((model, n), _INITIAL) for n in names]

    def put(self, model: str, name: str, state: DeploymentState, *, local: bool = True) -> None:
        """Store one state (``local``: changed here, so handed to ``publish``)."""
        if state == _INITIAL:
            self._states.pop((model, name), None)
        else:
            self._states[(model, name)] = state
        if local and self.publish is not None:
            self.publish(model, name, state)

    def inflight(self, model: str, names: Sequence[str]) -> list[int]:
        get = self._inflight.get
        return [get((model, n), 0) for n in names]

    def begin(self, model: str, name: str) -> None:
        key = (model, name)
        self._inflight[key] = self._inflight.get(key, 0) + 1

    def end(self, model: str, name: str) -> None:
        key = (model, name)
        left = self._inflight.get(key, 0) - 1
        if left > 0:
            self._inflight[key] = left
        else:
            self._inflight.pop(key, None)

    def describe(self, model: str, names: Sequence[str], now: float) -> list[dict[str, Any]]:
        """Per deployment, what ``GET /admin/deployments`` shows (no key: names only)."""
        out = []
        for name, s, busy in zip(
            names, self.states(model, names), self.inflight(model, names), strict=True
        ):
            row: dict[str, Any] = {
                "deployment": name,
                "up": s.serving(now),
                "state": s.state if not s.serving(now) else "up",
                "in_flight": busy,
            }
            if not s.serving(now):
                row["until"] = s.until
                row["why"] = s.why
            if s.streak:
                row["streak"] = s.streak
            if s.last_error:
                row["last_error"] = s.last_error
            if s.short(now):
                row["short_of_headroom_until"] = s.short_until
            out.append(row)
        return out

    def up(
        self, deployments: Mapping[str, Sequence[Deployed]], now: float
    ) -> list[tuple[str, str, bool]]:
        """(model, deployment, in service) for every deployment of the models with several:
        what the gauge ``deployment_up`` shows when scraped."""
        get = self._states.get
        return [
            (model, d.name, get((model, d.name), _INITIAL).serving(now))
            for model, deps in deployments.items()
            if len(deps) > 1
            for d in deps
        ]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every non-default state, ``model|name`` -> fields (tests, debugging)."""
        return {f"{m}|{n}": asdict(s) for (m, n), s in self._states.items()}
