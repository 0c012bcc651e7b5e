"""A gateway run as its own process (``python -m gateway serve``), for multi-replica tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import openai

from tests.harness import CLIENT_KEY, PROVIDER_KEY, PROVIDER_KEY_ENV
from tests.waiting import eventually


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """``policy_dir`` None: ``serve --demo`` (the bundled policies, the sim provider);
    ``log``: a file that gets the process's output (its JSON log), else discarded."""

    def __init__(self, policy_dir: Path | None, *, log: Path | None = None, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.policy_dir = policy_dir
        self.log = log
        self.env = {**os.environ, PROVIDER_KEY_ENV: PROVIDER_KEY, "GATEWAY_LOG_LEVEL": "warning",
                    **{f"GATEWAY_{k.upper()}": v for k, v in env.items()}}  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self._clients: list[openai.AsyncOpenAI] = []

    async def start(self) -> GatewayProcess:
        policies = ["--demo"] if self.policy_dir is None else ["--policies", str(self.policy_dir)]
        out = subprocess.DEVNULL if self.log is None else self.log.open("ab")
        try:
            self.proc = subprocess.Popen(  # noqa: ASYNC220 (started once per test)
                [sys.executable, "-m", "gateway", "serve", *policies, "--port", str(self.port)],
                env=self.env, stdout=out, stderr=out,
            )  # fmt: skip
        finally:
            if out != subprocess.DEVNULL:
                out.close()
        proc = self.proc
        async with aiohttp.ClientSession() as s:

            async def ready() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"gateway exited with {proc.returncode}")
                try:
                    async with s.get(self.url + "/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(ready, within=30, step=0.02, what="the gateway's /readyz")
        return self

    def openai(self) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        self._clients.append(client)
        return client

    async def stop(self) -> None:
        for c in self._clients:
            await c.close()
        if self.proc is not None and self.proc.poll() is None:
            # Ctrl-C: with nothing in flight the gateway exits at once (SIGTERM would keep
            # its accept window for load balancers, 5 s with the default grace).
            self.proc.send_signal(signal.SIGINT)
            await asyncio.to_thread(self.proc.wait, 30)
