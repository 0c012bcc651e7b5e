"""A fault-injecting TCP proxy for chaos tests and the soak benchmark.

``FaultProxy`` listens on ``127.0.0.1`` and forwards every connection to a target
(the fake provider). For each accepted connection it draws one :class:`Fault` from
a seeded ``random.Random``, so a run with the same seed injects the same sequence
of faults (which *request* meets which fault still depends on how the gateway's
pool spreads requests over connections; that is part of the chaos). The faults
act on the bytes of the provider's answer (upstream -> gateway):

==========  ==============================================================
``none``     forward untouched
``latency``  delay every forwarded piece by up to ``max_latency_s``
``reset``    forward ``n`` bytes, then abort both sides with a TCP RST
``truncate`` forward ``n`` bytes, then close both sides cleanly (FIN)
``slice``    forward the answer one byte per write (with drains)
``stall``    forward ``n`` bytes, then nothing for ``stall_s``, then go on
``garbage``  answer random bytes instead of the provider (not even HTTP), then close
``refuse``   close the accepted connection before reading anything
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
        self._stopping = False
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
        self._stopping = True
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
        fault = self.draw()
        uwriter: asyncio.StreamWriter | None = None
        try:
            if fault.kind == "refuse":
                self.counts["refuse"] += 1
                _rst(cwriter)
                return
            if fault.kind == "garbage":
                await creader.read(_READ)  # the request (or its first piece)
                self.counts["garbage"] += 1
                cwriter.write(fault.garbage)
                await cwriter.drain()
                cwriter.close()
                return
            ureader, uwriter = await asyncio.open_connection(*self.target)
            self._writers.add(uwriter)
            up = asyncio.create_task(self._pipe(creader, uwriter, Fault("none")))
            try:
                await self._pipe(ureader, cwriter, fault, uwriter)
            finally:
                up.cancel()
                with contextlib.suppress(BaseException):
                    await up
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (cwriter, uwriter):
                if w is not None:
                    self._writers.discard(w)
                    if not w.transport.is_closing():
                        w.transport.abort()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        fault: Fault,
        other: asyncio.StreamWriter | None = None,
    ) -> None:
        """Copy reader -> writer until EOF, applying ``fault`` to the bytes."""
        sent = 0
        hit = False
        while True:
            data = await reader.read(_READ)
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            k = fault.kind
            if k in ("reset", "truncate") and sent + len(data) > fault.offset:
                writer.write(data[: fault.offset - sent])
                with contextlib.suppress(OSError, ConnectionError):
                    await writer.drain()
                self.counts[k] += 1
                if k == "reset":
                    _rst(writer)
                    if other is not None:
                        _rst(other)
                else:
                    writer.close()
                    if other is not None:
                        other.close()
                return
            if k == "stall" and not hit and sent + len(data) > fault.offset:
                cut = fault.offset - sent
                writer.write(data[:cut])
                await writer.drain()
                self.counts["stall"] += 1
                hit = True
                end = asyncio.get_running_loop().time() + fault.stall_s
                while not self._stopping and asyncio.get_running_loop().time() < end:
                    await asyncio.sleep(0.02)
                data = data[cut:]
                sent += cut
            if k == "slice":
                if not hit:
                    self.counts["slice"] += 1
                    hit = True
                for i in range(len(data)):
                    writer.write(data[i : i + 1])
                    await writer.drain()
            else:
                if k == "latency":
                    if not hit:
                        self.counts["latency"] += 1
                        hit = True
                    await asyncio.sleep(fault.latency_s)
                writer.write(data)
                await writer.drain()
            sent += len(data)
