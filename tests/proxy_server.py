"""A real tinyproxy for tests: started per test on a free loopback port, skipped where missing.

tinyproxy (Debian package ``tinyproxy``) is a small HTTP forward proxy: it forwards
``GET http://host/...`` requests and tunnels ``CONNECT host:port`` for https. The
config written here listens on 127.0.0.1 only, allows 127.0.0.1, has no
``ConnectPort`` line (so CONNECT reaches any port, e.g. a test server's) and runs in
the foreground (``-d``). Run as root without ``User`` / ``Group`` it only warns and
keeps the current user, so the config sets neither (its log file stays writable).

Its log (``LogLevel Info``) names every request, which is how a test proves that a
request went through the proxy: :meth:`Tinyproxy.requests` gives the request lines,
e.g. ``POST http://127.0.0.1:4321/v1/chat/completions HTTP/1.1`` or
``CONNECT 127.0.0.1:4321 HTTP/1.1``. With ``auth=(user, password)`` the proxy
requires Basic authentication (``Proxy-Authorization``) and :attr:`Tinyproxy.url`
carries the credentials.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TINYPROXY = shutil.which("tinyproxy") or (
    "/usr/bin/tinyproxy" if os.access("/usr/bin/tinyproxy", os.X_OK) else None
)
NO_TINYPROXY = "tinyproxy not found (apt-get install tinyproxy; .ci/run installs it)"
PROXY_USER = "gw-proxy-user"
PROXY_PASSWORD = "s3cret-proxy-pw"

_REQUEST = re.compile(r"Request \(file descriptor \d+\): (.+)$")
_READY = "Accepting connections"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tinyproxy:
    """A throwaway tinyproxy on ``127.0.0.1:port`` whose log tests can read."""

    def __init__(self, binary: str, workdir: Path, auth: tuple[str, str] | None = None) -> None:
        self.binary = binary
        self.workdir = workdir
        self.auth = auth
        self.port = _free_port()
        self.log_path = workdir / "tinyproxy.log"
        self.config_path = workdir / "tinyproxy.conf"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """``http://[user:password@]127.0.0.1:PORT``."""
        userinfo = f"{self.auth[0]}:{self.auth[1]}@" if self.auth else ""
        return f"http://{userinfo}{self.address}"

    def config(self) -> str:
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 30",
            f'LogFile "{self.log_path}"',
            "LogLevel Info",
            "MaxClients 50",
            "Allow 127.0.0.1",
            "DisableViaHeader Yes",
        ]
        if self.auth:
            lines.append(f"BasicAuth {self.auth[0]} {self.auth[1]}")
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        """Start and wait until tinyproxy accepts connections."""
        assert self.proc is None, "already running"
        self.config_path.write_text(self.config())
        self.proc = subprocess.Popen(
            [self.binary, "-d", "-c", str(self.config_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while _READY not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                pytest.fail(f"tinyproxy did not start on port {self.port}:\n{log}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def log(self) -> str:
        """The whole log so far ("" before tinyproxy wrote it)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def requests(self) -> list[str]:
        """The request lines tinyproxy received, in order (``METHOD target HTTP/1.1``)."""
        return [m.group(1).strip() for m in map(_REQUEST.search, self.log().splitlines()) if m]


def _run(tmp_path: Path, auth: tuple[str, str] | None) -> Iterator[Tinyproxy]:
    if TINYPROXY is None:
        pytest.skip(NO_TINYPROXY)
    workdir = tmp_path / ("tinyproxy-auth" if auth else "tinyproxy")
    workdir.mkdir()
    proxy = Tinyproxy(TINYPROXY, workdir, auth)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    """A fresh open tinyproxy for this test; skipped when the binary is missing."""
    yield from _run(tmp_path, None)


@pytest.fixture
def tinyproxy_auth(tmp_path: Path) -> Iterator[Tinyproxy]:
    """A tinyproxy requiring Basic auth (:data:`PROXY_USER` / :data:`PROXY_PASSWORD`)."""
    yield from _run(tmp_path, (PROXY_USER, PROXY_PASSWORD))
