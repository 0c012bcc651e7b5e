"""Recovery state: in process, or shared across replicas through Redis (docs/operations.md,
"Scaling out").

``open_state(settings.state_url)`` gives the backend: ``""`` keeps state in
this process (:class:`MemoryState`); ``redis://``, ``rediss://`` or
``unix://`` shares it through Redis (:class:`~gateway.state.redis.RedisState`,
imported only when used).
"""

from __future__ import annotations

from typing import Any

from gateway.state.base import StateBackend
from gateway.state.deployments import DeploymentBoard
from gateway.state.memory import MemoryState

__all__ = ["MemoryState", "StateBackend", "open_state", "share_deployments"]

_REDIS_SCHEMES = ("redis", "rediss", "unix")


def open_state(url: str, **options: Any) -> StateBackend:
    """The backend for ``GATEWAY_STATE_URL``; ``options`` go to ``RedisState``."""
    if not url.strip():
        return MemoryState()
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in _REDIS_SCHEMES:
        from gateway.state.redis import RedisState

        return RedisState(url, **options)
    # never echo the URL: it may carry a password
    raise ValueError(
        f"GATEWAY_STATE_URL: unsupported scheme {scheme!r}; "
        "use an empty value (in-process state) or redis://, rediss://, unix://"
    )


def share_deployments(url: str, board: DeploymentBoard) -> Any:
    """A :class:`~gateway.state.deployment_sync.DeploymentSync` sharing ``board`` with the
    other replicas when ``url`` is a Redis URL (not started); None for in-process state."""
    if not url.strip():
        return None
    from gateway.state.deployment_sync import DeploymentSync

    return DeploymentSync(url, board)
