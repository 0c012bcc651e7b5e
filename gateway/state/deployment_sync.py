"""Deployment states shared by replicas through Redis (docs/recovery.md, Deployments;
docs/operations.md, "Scaling out"), off the request path.

Every replica keeps the states in its own :class:`~gateway.state.deployments.DeploymentBoard`
and reads them there: a request never waits for Redis because of deployments. A change
made on one replica (a cooldown, an ejection, a probe's lease, a recovery) is written to
Redis in the background and published; every other replica receives it and stores it in
its board (a lease arrives one delivery after the probe started: two replicas picking
the same ejected deployment within that time both probe it).

Keys and channel (prefix ``llm-gateway:``)::

    llm-gateway:dep:{model}   hash: deployment name -> JSON state; TTL 1 day, renewed
    llm-gateway:dep           channel: {"r": replica, "m": model, "n": name, "s": state}

Changes are sent in order by one task, pipelined (HSET, EXPIRE, PUBLISH per change);
the last write wins. A replica that starts, or reconnects after an outage, first loads
every hash, then listens. Staleness: a change reaches the other replicas' boards one
pub/sub delivery after the request that caused it finished its attempt (a few
milliseconds on a local network; ``tests/integration/test_deployments_shared.py``
holds it under one second). While Redis is unreachable each replica keeps its own
view (and logs ``state_backend_degraded`` through the state backend); changes made
meanwhile are not replayed, the next one of each deployment is.

What is read back (a hash's fields at load, a message on the channel) is checked like
any input (:func:`gateway.state.redis_values.deployment_state`): a malformed state, a
message that is not one the gateway sends, a key that is not a hash is logged once
(``state_value_ignored``, the key named, never the value) and ignored, so garbage in
Redis never reaches a board, a request or ``/admin/deployments``, and never stops the
load or the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict

import orjson
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from gateway.errors import BadStateValue
from gateway.resilience.deployments import DeploymentState
from gateway.state.deployments import DeploymentBoard
from gateway.state.redis_values import Ignored, deployment_state

__all__ = ["DeploymentSync"]

log = structlog.get_logger("gateway.state")

PREFIX = "llm-gateway:dep"
CHANNEL = PREFIX
TTL_S = 86400
RETRY_S = 1.0


def _shown(value: bytes | str) -> str:
    """A key or field name as logged."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _text(value: bytes | str) -> str:
    """A key or field name; :class:`BadStateValue` when it is not UTF-8 (no model has that name)."""
    try:
        return value.decode() if isinstance(value, bytes) else value
    except UnicodeDecodeError:
        raise BadStateValue("a name that is not UTF-8") from None


class DeploymentSync:
    """Shares one :class:`DeploymentBoard` with the other replicas through Redis."""

    def __init__(
        self,
        url: str,
        board: DeploymentBoard,
        *,
        timeout: float = 1.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.board = board
        self._wall = wall  # epoch seconds: what times read back are checked against
        self._ignored = Ignored()
        self.replica = secrets.token_hex(8)
        self.redis = Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=None
        )
        self._listener = Redis.from_url(url, socket_connect_timeout=timeout, retry=None)
        self._queue: asyncio.Queue[tuple[str, str, DeploymentState]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = asyncio.Event()  # the first load and subscription are done
        self._closing = False

    async def start(self) -> None:
        self.board.publish = self._enqueue
        self._tasks = [
            asyncio.create_task(self._listen(), name="deployment-sync-listen"),
            asyncio.create_task(self._send(), name="deployment-sync-send"),
        ]

    def _enqueue(self, model: str, name: str, state: DeploymentState) -> None:
        self._queue.put_nowait((model, name, state))

    async def _send(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for model, name, state in batch:
                        fields = asdict(state)
                        key = f"{PREFIX}:{model}"
                        pipe.hset(key, name, orjson.dumps(fields))
                        pipe.expire(key, TTL_S)
                        message = {"r": self.replica, "m": model, "n": name, "s": fields}
                        pipe.publish(CHANNEL, orjson.dumps(message))
                    replies = await pipe.execute(raise_on_error=False)
            except Exception as exc:  # an outage: the local view stands
                log.debug("deployment_sync_failed", error=type(exc).__name__)
                continue
            for (model, _name, _state), written in zip(batch, replies[::3], strict=True):
                if isinstance(written, ResponseError):  # a key that is not a hash
                    self._ignored(f"{PREFIX}:{model}", "cannot be written: not a hash")

    async def _load(self) -> None:
        async for key in self._listener.scan_iter(match=f"{PREFIX}:*", count=100):
            rkey = _shown(key)
            try:
                model = _text(key).removeprefix(PREFIX + ":")
                fields = await self._listener.hgetall(key)
            except (BadStateValue, ResponseError) as e:  # ResponseError: not a hash
                self._ignored(rkey, str(e) if isinstance(e, BadStateValue) else "not a hash")
                continue
            now = self._wall()
            for field, raw in fields.items():
                try:
                    name = _text(field)
                    state = deployment_state(raw, now)
                except BadStateValue as e:
                    self._ignored(rkey, str(e), _shown(field))
                    continue
                self.board.put(model, name, state, local=False)

    async def _listen(self) -> None:
        while not self._closing:
            try:
                async with self._listener.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    await self._load()
                    self.ready.set()
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._receive(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage (debug: the state backend says it), or a bug
                level = log.debug if isinstance(exc, RedisError | OSError) else log.warning
                level("deployment_sync_listen_failed", error=type(exc).__name__)
                await asyncio.sleep(RETRY_S)

    def _receive(self, data: bytes) -> None:
        try:
            message = orjson.loads(data)
            if type(message) is not dict:
                raise BadStateValue("not a JSON object")
            if message.get("r") == self.replica:
                return
            model, name, fields = message.get("m"), message.get("n"), message.get("s")
            if type(model) is not str or type(name) is not str or type(fields) is not dict:
                raise BadStateValue("no model, deployment name and state")
            state = deployment_state(fields, self._wall())
        except orjson.JSONDecodeError:
            self._ignored(CHANNEL, "a message that is not JSON")
            return
        except BadStateValue as e:
            self._ignored(CHANNEL, f"a message: {e}")
            return
        self.board.put(model, name, state, local=False)

    async def close(self) -> None:
        """Stop at once: what is not sent yet is not needed (Redis keeps the last states).

        redis-py's pub/sub read can swallow a cancellation; the loop also stops on
        ``_closing``, and the wait for the tasks is bounded."""
        self._closing = True
        self.board.publish = None
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1.0)
        with contextlib.suppress(Exception):
            await self.redis.aclose()
            await self._listener.aclose()
