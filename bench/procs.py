"""Child processes of the benchmark: start pinned, wait until they answer, read their
CPU time and memory from /proc, and always kill them at the end (atexit, signals,
and PR_SET_PDEATHSIG so that even a SIGKILLed runner leaves nothing behind)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
_children: list[subprocess.Popen[Any]] = []
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))


def pin_prefix(cpu: int | None) -> list[str]:
    if cpu is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(cpu)]


def spawn(
    argv: Sequence[str],
    *,
    cpu: int | None,
    env: dict[str, str] | None = None,
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = None,
) -> subprocess.Popen[Any]:
    """Start a child (pinned to ``cpu`` with taskset, which execs: the pid is the program's)."""
    p = subprocess.Popen(
        [*pin_prefix(cpu), *argv],
        env=env,
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )
    _children.append(p)
    return p


def stop(p: subprocess.Popen[Any], grace: float = 5.0) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait(5)
    if p in _children:
        _children.remove(p)


def stop_all() -> None:
    for p in list(_children):
        stop(p, grace=3.0)


def _on_signal(signum: int, _frame: Any) -> None:
    stop_all()
    raise SystemExit(128 + signum)


def install_cleanup() -> None:
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    # SIGINT stays KeyboardInterrupt: the runner's finally: + atexit clean up.


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(port: int, path: str, timeout: float = 2.0) -> int:
    """A tiny blocking GET; the status code, or 0 when nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
            data = s.recv(64)
    except OSError:
        return 0
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def wait_http(p: subprocess.Popen[Any], port: int, path: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited with status {p.returncode} before answering")
        if http_get(port, path, timeout=1.0) == 200:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer GET {path} on port {port} within {timeout:.0f} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS since start) in MiB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@dataclass
class CpuWindow:
    """CPU seconds a process used between ``start()`` and ``stop()``, with the wall time."""

    pid: int
    cpu: float = 0.0
    wall: float = 0.0

    def start(self) -> CpuWindow:
        self._c0, self._t0 = cpu_seconds(self.pid), time.monotonic()
        return self

    def stop(self) -> CpuWindow:
        self.cpu = cpu_seconds(self.pid) - self._c0
        self.wall = time.monotonic() - self._t0
        return self

    @property
    def utilisation(self) -> float:
        return self.cpu / self.wall if self.wall else 0.0
