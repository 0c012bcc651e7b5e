"""No key, Authorization header or prompt text in any log line or metric.

The gateway runs as a real process (``python -m gateway serve``, JSON logs at
debug level, stdout and stderr captured whole) in front of the fake provider,
and serves mixed traffic: answers, retries, fallbacks, compaction, streams cut
mid-way, in-stream errors, unknown keys, bad bodies, an oversized body, an
oversized Authorization header and admin calls. Every byte it wrote, and the
``/metrics`` text, is then scanned for the client key, the provider key, the
admin key, an unknown key and a unique prompt marker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import CutAfter, Error, ErrorEventAfter, FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, PROVIDER_KEY_ENV, policy_files, write_policies
from tests.waiting import eventually

ADMIN_KEY = "admin-" + uuid.uuid4().hex
UNKNOWN_KEY = "unknown-" + uuid.uuid4().hex
MARKER = "PROMPT-MARKER-" + uuid.uuid4().hex
POLICY = {
    "fallback": {"chain": ["gpt-backup"], "after_consecutive_server_errors": 2},
    "stream": {"keepalive": "100ms"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(url: str, proc: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as s:

        async def healthy() -> bool:
            if proc.returncode is not None:
                raise AssertionError(f"gateway exited with {proc.returncode}")
            try:
                async with s.get(url + "/healthz") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(healthy, within=30, step=0.02, what="the gateway's /healthz")


async def traffic(url: str, fake: FakeProvider) -> None:
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    msgs = [{"role": "user", "content": f"{MARKER} please answer"}]
    chat = {"model": "gpt-test", "messages": msgs}
    async with aiohttp.ClientSession() as s:

        async def post(path: str, body: object, headers: dict[str, str] | None = None) -> int:
            async with s.post(url + path, json=body, headers=headers or auth) as r:
                await r.read()
                return r.status

        assert await post("/v1/chat/completions", chat) == 200
        assert await post("/v1/chat/completions", {**chat, "stream": True}) == 200
        # retry after a 429 whose message quotes nothing secret
        fake.push(Error.openai_rate_limit(retry_after_ms=20), model="fake-model")
        assert await post("/v1/chat/completions", chat) == 200
        # prompt too long -> compaction
        long_msgs = [
            {"role": "user", "content": f"{MARKER} " + "x" * 400},
            {"role": "assistant", "content": f"{MARKER} reply"},
        ] * 6 + msgs
        fake.push(Error.context_length(100, 2000), model="fake-model")
        await post("/v1/chat/completions", {"model": "gpt-test", "messages": long_msgs})
        # streams broken mid-way and in-stream errors
        fake.push(CutAfter(2), model="fake-model")
        assert await post("/v1/chat/completions", {**chat, "stream": True}) == 200
        fake.push(ErrorEventAfter(2), model="claude-test")
        anth = {"model": "claude-test", "max_tokens": 50, "messages": msgs, "stream": True}
        assert await post("/v1/messages", anth, {"x-api-key": CLIENT_KEY}) == 200
        # the Responses API
        resp = {"model": "gpt-test", "input": f"{MARKER} hi", "stream": True}
        assert await post("/v1/responses", resp) == 200
        # two 500s (last: the route stays on its fallback for a while): the fallback model answers
        fake.push(Error.openai_server(500), model="fake-model")
        fake.push(Error.openai_server(500), model="fake-model")
        assert await post("/v1/chat/completions", chat) == 200
        # refusals: unknown key (both styles), bad JSON, unknown model, too large
        bad = {"authorization": f"Bearer {UNKNOWN_KEY}"}
        assert await post("/v1/chat/completions", chat, bad) == 401
        assert await post("/v1/messages", anth, {"x-api-key": UNKNOWN_KEY}) == 401
        async with s.post(url + "/v1/chat/completions", data=f"{{{MARKER}", headers=auth) as r:
            assert r.status == 400
        assert await post("/v1/chat/completions", {**chat, "model": MARKER}) == 404
        big = {"model": "gpt-test", "messages": [{"role": "user", "content": MARKER * 5000}]}
        assert await post("/v1/chat/completions", big) == 413
        # admin with the right and a wrong key
        async with s.get(
            url + "/admin/policies", headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as r:
            assert r.status == 200
        async with s.post(url + "/admin/reload", headers={"authorization": "Bearer x"}) as r:
            assert r.status == 401
        # a client that leaves mid-stream
        fake.push(ErrorEventAfter(50), model="fake-model")
        async with s.post(
            url + "/v1/chat/completions", json={**chat, "stream": True}, headers=auth
        ) as r:
            await r.content.readany()
    # an Authorization header over the 8190-byte field limit: refused by the server (400)
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
        + CLIENT_KEY.encode()
        + b"A" * 9000
        + b"\r\ncontent-length: 2\r\n\r\n{}"
    )
    await writer.drain()
    assert (await reader.read(100))[8:13] == b" 400 "
    writer.close()


async def test_no_secret_or_prompt_in_logs_or_metrics(tmp_path: Path, fake: FakeProvider) -> None:
    """Keys, Authorization values and prompt text never reach stdout, stderr or /metrics."""
    root = write_policies(tmp_path / "p", policy_files(fake.url, POLICY))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        PROVIDER_KEY_ENV: PROVIDER_KEY,
        "GATEWAY_LOG_LEVEL": "debug",
        "GATEWAY_LOG_FORMAT": "json",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        "GATEWAY_SHUTDOWN_GRACE_S": "0.3",
        "GATEWAY_MAX_BODY_BYTES": str(64 * 1024),
        "PYTHONASYNCIODEBUG": "0",
    }
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as fo, err.open("wb") as fe:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", "--policies", str(root), "--port", str(port),
            env=env, stdout=fo, stderr=fe,
        )  # fmt: skip
        try:
            await wait_healthy(url, proc)
            await traffic(url, fake)
            async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
                metrics = await r.text()
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    logs = out.read_bytes() + err.read_bytes()
    text = logs.decode("utf-8", "replace")
    # the run did what it claims: the events are there
    for event in ("request_completed", "api_retry", "fallback_used", "stream_interrupted",
                  "prompt_too_long_recovery"):  # fmt: skip
        assert event in text, f"no {event} in the logs"
    assert "llm_gateway_requests_total" in metrics
    secrets = {
        "client key": CLIENT_KEY,
        "provider key": PROVIDER_KEY,
        "admin key": ADMIN_KEY,
        "unknown key": UNKNOWN_KEY,
        "prompt marker": MARKER,
        "Authorization value": "Bearer ",
    }
    for what, secret in secrets.items():
        for name, blob in (("logs", text), ("metrics", metrics)):
            assert secret not in blob, f"{what} found in {name}: ...{_around(blob, secret)}..."
    assert "Traceback" not in text, text[text.find("Traceback") - 500 :][:3000]


def _around(blob: str, needle: str) -> str:
    i = blob.find(needle)
    return blob[max(0, i - 300) : i + 100]


async def test_upstream_error_quoting_the_prompt_is_not_logged(
    make_gateway, fake: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    """A provider error whose message quotes the prompt does not put the prompt in api_retry."""
    gw = await make_gateway()
    fake.push(Error(500, {"error": {"message": f"bad input: {MARKER}", "type": "server_error"}}))
    async with aiohttp.ClientSession() as s:
        await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": [{"role": "user", "content": MARKER}]},
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
        )
    captured = capsys.readouterr()
    assert "api_retry" in captured.out
    assert MARKER not in captured.out + captured.err
