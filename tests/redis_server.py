"""A real redis-server for tests: started per test on a free port, skipped where missing;
with a password (``requirepass``) and TLS when asked."""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

REDIS_SERVER = shutil.which("redis-server")
NO_REDIS = "redis-server not found on PATH (apt-get install redis-server; .ci/run installs it)"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pings(port: int, tls: ssl.SSLContext | None = None) -> bool:
    """The server answers (PONG, or NOAUTH when it wants a password)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as raw:
            if tls is None:
                raw.sendall(b"PING\r\n")
                return raw.recv(16).startswith((b"+PONG", b"-NOAUTH"))
            with tls.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


@dataclass(frozen=True)
class Tls:
    """The files of a redis-server's TLS port: its certificate and key, and the CA that
    signed it (what a client trusts)."""

    cert: Path
    key: Path
    ca: Path


class RedisServer:
    """A throwaway redis-server on a fixed port that tests may stop, pause and restart;
    ``password``: it wants one (``requirepass``); ``tls``: its port speaks TLS only."""

    def __init__(
        self, binary: str, workdir: Path, password: str = "", tls: Tls | None = None
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = _free_port()
        self.password = password
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The gateway's ``GATEWAY_STATE_URL`` for this server."""
        auth = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"

    def start(self) -> None:
        """Start (or restart, on the same port) and wait until it answers PING."""
        assert self.proc is None, "already running"
        args = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.workdir)]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        context = None
        if self.tls is None:
            args += ["--port", str(self.port)]
        else:
            t = self.tls
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(t.cert),
                     "--tls-key-file", str(t.key), "--tls-ca-cert-file", str(t.ca),
                     "--tls-auth-clients", "no"]  # fmt: skip
            context = ssl.create_default_context(cafile=str(t.ca))
        self.proc = subprocess.Popen(
            [self.binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not _pings(self.port, context):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        """Kill the server (its data is gone: it runs without persistence)."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the port accepts connections but nothing answers (a hung Redis)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server for this test; skipped when the binary is missing."""
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    server = RedisServer(REDIS_SERVER, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A client of the test's redis-server, to plant and read what the gateway sees."""
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()
