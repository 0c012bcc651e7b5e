"""``llm-gateway serve --workers N``: N worker processes serving one port.

The parent (the supervisor) binds the listening sockets itself, before any worker
exists, and forks the workers; each serves its copy of the same sockets
(``loop.create_server(sock=...)``), so the kernel queues every connection once, in the
one accept queue, and whichever worker is free takes it. We chose this over
``SO_REUSEPORT`` (a socket per worker): the port is open before the first worker is
ready (connections wait in the queue, none is refused at start or while a worker
restarts), ``--port 0`` works, a worker that stops accepting leaves its queued
connections to the others instead of resetting them, and a busy worker takes fewer
connections instead of its hash share of them.

The supervisor serves no request and runs no event loop: it waits for signals
(``sigtimedwait``) and

- SIGTERM / SIGINT: passes the signal on to every worker, each drains with the
  documented timeline (``/readyz`` 503 at once, the accept window, the in-flight
  grace), and exits 0 once all of them have; a worker still alive at
  accept window + grace + 10 s is killed;
- SIGHUP: passes it on (each worker reloads its policies); ``POST /admin/reload``
  reloads the worker that answers it, which asks the supervisor (SIGUSR1) to SIGHUP
  the others;
- a worker that dies (SIGCHLD) is logged (``worker_exited``) and started again, after
  0.5 s, doubling up to 30 s while workers keep dying within 10 s of their start. A
  worker that fails before the first start of every worker is complete stops the whole
  gateway (exit 1): a bad start does not loop.

Workers are in a process group of their own (a terminal's Ctrl-C reaches the
supervisor only, which passes it on once) and get SIGTERM if the supervisor dies
(``PR_SET_PDEATHSIG``). Metrics: prometheus_client's multiprocess mode, in a fresh
directory the supervisor makes (``PROMETHEUS_MULTIPROC_DIR``) and removes at exit;
any worker's ``/metrics`` adds up every worker's files, counts of a worker that died
included (its live gauges are dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from typing import Any

import structlog

from gateway.errors import PolicyError
from gateway.money.budgets import team_budgets
from gateway.observe import budget_events, logs
from gateway.routing.load import load_policy_dir
from gateway.settings import GatewaySettings

log = structlog.get_logger("gateway")

_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
# From a worker: SIGUSR1 = it reloaded on /admin/reload; SIGUSR2 = look at the ready pipe
# (signals of one kind sent at once merge into one: who is ready goes through the pipe).
_SIGNALS |= {signal.SIGUSR1, signal.SIGUSR2}
_PR_SET_PDEATHSIG = 1
RESTART_MIN_S, RESTART_MAX_S, STABLE_S = 0.5, 30.0, 10.0


def _never(signum: int, frame: Any) -> None:  # pragma: no cover - the signals are blocked
    pass


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host:port``, one per address it names (as asyncio binds)."""
    socks: list[socket.socket] = []
    seen = set()
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    try:
        for family, kind, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:  # the same free port on every address
                addr = (addr[0], socks[0].getsockname()[1], *addr[2:])
            s.bind(addr)
            s.listen(1024)
            s.set_inheritable(False)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


class Supervisor:
    def __init__(self, settings: GatewaySettings, n: int) -> None:
        self.settings = settings
        self.n = n
        self.socks: list[socket.socket] = []
        self.metrics_socks: list[socket.socket] | None = None
        self.slots: dict[int, int] = {}  # pid -> worker index
        self.born: dict[int, float] = {}  # pid -> when it was started
        self.due: dict[int, float] = {}  # worker index -> when to start it again
        self.failures = [0] * n  # quick deaths in a row, per worker index
        self.ready: set[int] = set()  # worker indexes that have served once
        self.started = False  # every worker has served once
        self.stopping: float | None = None  # when a stop signal came
        self.exit_code = 0
        self.killed = False  # workers overdue at the end of a drain were killed
        self.ready_r, self.ready_w = os.pipe()  # a worker writes its pid when it serves
        os.set_blocking(self.ready_r, False)

    # ---- life cycle ------------------------------------------------------------------
    def run(self) -> int:
        # after PROMETHEUS_MULTIPROC_DIR is set (see supervise); loaded here, before the
        # workers fork, so that each worker starts with the gateway imported
        from gateway.web import app  # noqa: F401
        from gateway.web.policy_env import egress_of, policy_dir_of

        s = self.settings
        try:
            policies = load_policy_dir(policy_dir_of(s))
            egress_of(policies)
        except PolicyError as e:
            for p in e.problems:
                log.error("policy_rejected", file=p.file, line=p.line, message=p.message)
            print(str(e), file=sys.stderr, flush=True)
            return 1
        if self.n > 1 and not s.state_url.strip() and (teams := team_budgets(policies.teams)):
            budget_events.not_shared(sorted(teams), self.n)  # each worker counts its own
        try:
            self.socks = bind(s.host, s.port)
            if s.metrics_port is not None:
                self.metrics_socks = bind(s.metrics_host or s.host, s.metrics_port)
        except OSError as e:
            log.error("gateway_start_failed", host=s.host, port=s.port, error=str(e))
            return 1
        # Blocked for good: sigtimedwait takes them (a late SIGTERM cannot kill the exit).
        # A handler of our own first: a signal ignored (SIG_IGN, as a shell's ``&`` leaves
        # SIGINT) would be dropped, never waited for.
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        for sig in _SIGNALS:
            signal.signal(sig, _never)
        try:
            for i in range(self.n):
                self._spawn(i)
            return self._loop()
        finally:
            self._close_sockets()

    def _loop(self) -> int:
        while self.slots or (self.stopping is None and self.due):
            now = time.monotonic()
            for i, at in list(self.due.items()):
                if at <= now and self.stopping is None:
                    del self.due[i]
                    self._spawn(i)
            timeout = min([1.0, *(max(0.0, at - now) for at in self.due.values())])
            info = signal.sigtimedwait(_SIGNALS, timeout)
            self._check_deadline()
            self._read_ready()
            if info is None:
                continue
            sig = signal.Signals(info.si_signo)
            if sig == signal.SIGCHLD:
                self._reap()
            elif sig == signal.SIGUSR2:
                self._read_ready()
            elif sig == signal.SIGHUP:
                self._send(signal.SIGHUP)
            elif sig == signal.SIGUSR1:  # a worker reloaded on /admin/reload: the others too
                self._send(signal.SIGHUP, but=info.si_pid)
            elif self.stopping is None:
                self._stop(sig)
            else:
                log.warning("gateway_signal_ignored", signal=sig.name, reason="already draining")
        if self.stopping is not None:
            log.info("gateway_stopped", drain_s=round(time.monotonic() - self.stopping, 3))
        elif not self.started:
            log.error("gateway_start_failed", reason="a worker exited before all had started")
            self.exit_code = 1
        return self.exit_code

    def _stop(self, sig: signal.Signals) -> None:
        self.stopping = time.monotonic()
        self.due.clear()
        self._close_sockets()  # the workers' copies close when their accept window ends
        self._send(sig)

    def _check_deadline(self) -> None:
        if self.stopping is None or self.killed:
            return
        from gateway.web.drain import drain_timeline

        accept_s, grace_s = drain_timeline(self.settings.shutdown_grace_s)
        if time.monotonic() - self.stopping > accept_s + grace_s + 10.0:
            self.killed = True
            for pid in self.slots:
                log.error("worker_killed", worker=self.slots[pid], pid=pid, reason="drain overdue")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.exit_code = 1

    def _send(self, sig: signal.Signals, but: int | None = None) -> None:
        for pid in self.slots:
            if pid != but:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def _read_ready(self) -> None:
        """The pids the workers that started serving wrote to the ready pipe."""
        try:
            data = os.read(self.ready_r, 4096)
        except BlockingIOError:
            return
        for (pid,) in struct.iter_unpack("i", data):
            self._worker_ready(pid)

    def _worker_ready(self, pid: int) -> None:
        i = self.slots.get(pid)
        if i is None:
            return
        self.ready.add(i)
        if not self.started and len(self.ready) == self.n:
            self.started = True
            s = self.settings
            log.info(
                "gateway_started",
                host=s.host,
                port=self.socks[0].getsockname()[1],  # the real port when 0 asked for any
                metrics_port=self.metrics_socks[0].getsockname()[1] if self.metrics_socks else None,
                workers=self.n,
                pid=os.getpid(),
                metrics_dir=os.environ["PROMETHEUS_MULTIPROC_DIR"],
                demo=s.demo,
            )

    def _reap(self) -> None:
        from gateway.observe.metrics import process_gone

        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            i = self.slots.pop(pid, None)
            if i is None:
                continue
            process_gone(pid)  # its live gauges go; its counts stay
            lived = time.monotonic() - self.born.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            fields: dict[str, Any] = {"worker": i, "pid": pid, "lived_s": round(lived, 3)}
            fields.update({"signal": signal.Signals(-code).name} if code < 0 else {"code": code})
            if self.stopping is not None:
                if code:
                    self.exit_code = 1
                log.info("worker_exited", **fields, restart_in_s=None)
                continue
            if not self.started:  # failed before the gateway ever was up: give up
                log.error("worker_exited", **fields, restart_in_s=None)
                self.stopping, self.exit_code = time.monotonic(), 1
                self._close_sockets()
                self._send(signal.SIGINT)  # the others have nothing in flight: at once
                continue
            self.failures[i] = self.failures[i] + 1 if lived < STABLE_S else 0
            delay = min(RESTART_MAX_S, RESTART_MIN_S * 2 ** max(0, self.failures[i] - 1))
            log.error("worker_exited", **fields, restart_in_s=delay)
            self.due[i] = time.monotonic() + delay

    def _close_sockets(self) -> None:
        for s in [*self.socks, *(self.metrics_socks or [])]:
            s.close()

    # ---- one worker --------------------------------------------------------------------
    def _spawn(self, i: int) -> None:
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            self.slots[pid] = i
            self.born[pid] = time.monotonic()
            return
        code = 1
        try:
            os.setpgid(0, 0)  # a terminal's Ctrl-C goes to the supervisor, which passes it on
            with contextlib.suppress(Exception):
                ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the supervisor died before prctl
                os._exit(0)
            for sig in _SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            code = _worker(self.settings, i, self.socks, self.metrics_socks, parent, self.ready_w)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                logs._flush_at_exit()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _worker(
    settings: GatewaySettings,
    i: int,
    socks: list[socket.socket],
    metrics_socks: list[socket.socket] | None,
    parent: int,
    ready_w: int,
) -> int:
    """Run worker ``i`` (in the forked child): the gateway on the parent's sockets."""
    from gateway.web import app
    from gateway.web.drain import run
    from gateway.web.gateway import Worker

    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    def ready() -> None:  # the event loop has its signal handlers now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        os.write(ready_w, struct.pack("i", os.getpid()))  # 4 bytes: written whole
        os.kill(parent, signal.SIGUSR2)

    def admin_reloaded() -> None:
        os.kill(parent, signal.SIGUSR1)

    try:
        gw = app.create_app(settings)
    except PolicyError as e:  # the files changed since the supervisor checked them
        for p in e.problems:
            log.error("policy_rejected", file=p.file, line=p.line, message=p.message)
        return 1
    gw.worker = Worker(i, socks, metrics_socks, ready, admin_reloaded)

    async def main() -> int:
        # Once a second every worker sets its state gauge and writes its per-request
        # counts (gateway/observe/metrics.py), so the sum of their files is current.
        async def state_gauge() -> None:
            while True:
                gw.metrics.state_degraded.set(1 if getattr(gw.state, "degraded", False) else 0)
                gw.metrics.flush()
                await asyncio.sleep(1.0)

        task = asyncio.create_task(state_gauge())
        try:
            return await run(gw, settings)
        finally:
            task.cancel()
            gw.metrics.flush()  # what the drain answered last

    return asyncio.run(main())


def supervise(settings: GatewaySettings) -> int:
    """Run ``settings.worker_count()`` workers on one port until SIGTERM/SIGINT; 0 when all
    drained, 1 when the gateway could not start. Call before ``gateway.web.app`` is imported
    (prometheus_client reads ``PROMETHEUS_MULTIPROC_DIR`` when it is imported)."""
    logs.configure(settings.log_level, settings.log_format)
    if "prometheus_client" in sys.modules and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        raise RuntimeError("supervise() must run before prometheus_client is imported")
    metrics_dir = tempfile.mkdtemp(prefix="llm-gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        return Supervisor(settings, settings.worker_count()).run()
    finally:  # (workers never get here: they leave with os._exit)
        shutil.rmtree(metrics_dir, ignore_errors=True)
