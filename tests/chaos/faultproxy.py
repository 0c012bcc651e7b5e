"""A fault-injecting TCP proxy for chaos tests and the soak benchmark.

``FaultProxy`` listens on ``127.0.0.1`` and forwards every connection to a target
(the fake provider). For each request it sees (a read from the gateway that
starts with an HTTP method; the gateway reuses keep-alive connections) it draws one
:class:`Fault` from a seeded ``random.Random``, so a run with the same seed injects
the same sequence of faults (which *request* meets which fault still depends on
scheduling under concurrency; that is part of the chaos). The faults act on the
bytes of the provider's answer (upstream -> gateway):

==========  ==============================================================
``none``     forward untouched
``latency``  delay every forwarded piece by up to ``max_latency_s``
``reset``    forward ``n`` bytes, then abort both sides with a TCP RST
``truncate`` forward ``n`` bytes, then close both sides cleanly (FIN)
``slice``    forward the answer one byte per write (with drains)
``stall``    forward ``n`` bytes, then nothing for ``stall_s``, then go on
``garbage``  answer random bytes instead of the provider (not even HTTP), then close
``refuse``   reset the connection as soon as the request arrives
==========  ==============================================================

``n`` is a random offset into the answer (up to ``max_offset``), so a fault lands in
the status line, the headers, the JSON body or the middle of an SSE stream.
``counts`` tells how many of each fault were injected (only faults that actually
hit bytes count, e.g. a ``reset`` at an offset past the end of a short answer does
not).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections import Counter
from dataclasses import dataclass

FAULTS = ("latency", "reset", "truncate", "slice", "stall", "garbage", "refuse")
_READ = 65536


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # "none" or one of FAULTS
    offset: int = 0  # bytes of the answer forwarded before the fault (reset/truncate/stall)
    latency_s: float = 0.0
    stall_s: float = 0.0
    garbage: bytes = b""


def _rst(writer: asyncio.StreamWriter) -> None:
    """Abort with a TCP RST (SO_LINGER 0), as a crashed peer or a middlebox would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forward ``127.0.0.1:port`` to ``target_host:target_port`` with seeded faults."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        seed: int = 0,
        fault_rate: float = 0.3,
        faults: tuple[str, ...] = FAULTS,
        max_offset: int = 1500,
        max_latency_s: float = 0.03,
        stall_s: tuple[float, float] = (0.05, 0.45),
    ) -> None:
        self.target = (target_host, target_port)
        self.rng = random.Random(seed)
        self.fault_rate = fault_rate
        self.faults = faults
        self.max_offset = max_offset
        self.max_latency_s = max_latency_s
        self.stall_s = stall_s
        self.counts: Counter[str] = Counter()  # faults that hit bytes
        self.connections = 0
        self.enabled = True
        self._stopped = asyncio.Event()  # stalls end early when the proxy stops
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def injected(self) -> int:
        return sum(self.counts.values())

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._stopped.set()
        for w in list(self._writers):
            w.transport.abort()
        # Not cancelled: on Python 3.11 cancelling a start_server handler task makes
        # asyncio log "Exception in callback"; aborted sockets end them promptly.
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def draw(self) -> Fault:
        """The fault of the next connection (seeded)."""
        r = self.rng
        if not self.enabled or r.random() >= self.fault_rate:
            return Fault("none")
        kind = r.choice(self.faults)
        return Fault(
            kind,
            offset=r.randrange(0, self.max_offset),
            latency_s=r.uniform(0, self.max_latency_s),
            stall_s=r.uniform(*self.stall_s),
            garbage=r.randbytes(r.randrange(1, 200)),
        )

    # ---- per connection -----------------------------------------------------------
    async def _accept(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self._writers.add(cwriter)
        self.connections += 1
        uwriter: asyncio.StreamWriter | None = None
        up: asyncio.Task[None] | None = None
        try:
            ureader, uwriter = await asyncio.open_connection(*self.target)
            self._writers.add(uwriter)
            state = _Conn()
            up = asyncio.create_task(self._requests(creader, cwriter, uwriter, state))
            await self._answers(ureader, cwriter, uwriter, state)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if up is not None:
                up.cancel()
                with contextlib.suppress(BaseException):
                    await up
            for w in (cwriter, uwriter):
                if w is not None:
                    self._writers.discard(w)
                    if not w.transport.is_closing():
                        w.transport.abort()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _requests(
        self,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        uwriter: asyncio.StreamWriter,
        state: _Conn,
    ) -> None:
        """Client -> upstream; a new request (method at the start of a read) draws a fault."""
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                data = await creader.read(_READ)
                if not data:
                    if uwriter.can_write_eof():
                        uwriter.write_eof()
                    return
                if data.startswith(_METHODS):
                    state.fault, state.sent, state.hit = self.draw(), 0, False
                    kind = state.fault.kind
                    if kind == "refuse":
                        self.counts["refuse"] += 1
                        _rst(cwriter)
                        _rst(uwriter)
                        return
                    if kind == "garbage":
                        self.counts["garbage"] += 1
                        cwriter.write(state.fault.garbage)
                        await cwriter.drain()
                        cwriter.close()
                        uwriter.transport.abort()
                        return
                uwriter.write(data)
                await uwriter.drain()

    async def _answers(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        other: asyncio.StreamWriter,
        state: _Conn,
    ) -> None:
        """Upstream -> client until EOF, applying the current request's fault."""
        while True:
            data = await reader.read(_READ)
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            f = state.fault
            k = f.kind
            if k in ("reset", "truncate") and state.sent + len(data) > f.offset:
                writer.write(data[: f.offset - state.sent])
                with contextlib.suppress(OSError, ConnectionError):
                    await writer.drain()
                self.counts[k] += 1
                if k == "reset":
                    _rst(writer)
                    _rst(other)
                else:
                    writer.close()
                    other.close()
                return
            if k == "stall" and not state.hit and state.sent + len(data) > f.offset:
                cut = f.offset - state.sent
                writer.write(data[:cut])
                await writer.drain()
                self.counts["stall"] += 1
                state.hit = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), f.stall_s)
                data = data[cut:]
                state.sent += cut
            if k == "slice":
                if not state.hit:
                    self.counts["slice"] += 1
                    state.hit = True
                for i in range(len(data)):
                    writer.write(data[i : i + 1])
                    await writer.drain()
            else:
                if k == "latency":
                    if not state.hit:
                        self.counts["latency"] += 1
                        state.hit = True
                    await asyncio.sleep(f.latency_s)  # the fault itself: a slow network
                writer.write(data)
                await writer.drain()
            state.sent += len(data)


_METHODS = (b"POST ", b"GET ", b"HEAD ", b"PUT ", b"DELETE ")


@dataclass(slots=True)
class _Conn:
    """The fault of the request in flight on one connection, and how far its answer got."""

    fault: Fault = Fault("none")
    sent: int = 0
    hit: bool = False
