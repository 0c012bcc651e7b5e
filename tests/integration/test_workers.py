"""``llm-gateway serve --workers 2``: real processes on one real port (gateway/web/workers.py).

Each test runs ``python -m gateway serve`` with ``GATEWAY_WORKERS=2`` in front of the fake
provider served by the test process and reads its JSON log lines (the supervisor's and
both workers'). Which worker served what is read from the counts each worker writes once
a second (``counts_<pid>.json`` in the ``metrics_dir`` the supervisor logs at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.observe.counts import Counts
from gateway.testing import Delay, FakeProvider
from tests.harness import PROVIDER_KEY, PROVIDER_KEY_ENV, policy_files, write_policies
from tests.integration.test_operations import (
    AUTH,
    MESSAGES,
    ROOT,
    Served,
    chat,
    edit_team,
    sse_text,
)
from tests.waiting import eventually

ADMIN_KEY = "admin-secret-key"


@pytest.fixture
async def workers(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start ``python -m gateway serve --workers N --port 0``; ``env`` adds GATEWAY_* settings."""
    started: list[Served] = []

    async def start(policy_dir: Path, n: int = 2, **env: str) -> Served:
        full = {
            **os.environ,
            PROVIDER_KEY_ENV: PROVIDER_KEY,
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_SHUTDOWN_GRACE_S": "3",
            "GATEWAY_RELOAD_WATCH_S": "0",
            **{f"GATEWAY_{k.upper()}": v for k, v in env.items()},
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", "0", "--workers", str(n), cwd=ROOT, env=full,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        s = Served(proc)
        started.append(s)
        ev = await s.wait_event("gateway_started", within=30)
        assert ev["workers"] == n
        s.url = f"http://127.0.0.1:{ev['port']}"
        return s

    yield start
    for s in started:
        if s.proc.returncode is None:
            s.proc.send_signal(signal.SIGINT)  # the supervisor passes it on to its workers
            try:
                await asyncio.wait_for(s.proc.wait(), 10)
            except TimeoutError:
                s.proc.kill()
                await s.proc.wait()
        s._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await s._reader


def pids(gw: Served) -> dict[int, int]:
    """Worker number -> pid of the workers started so far (the last start of each)."""
    return {e["worker"]: e["pid"] for e in gw.named("worker_started")}


def requests_of(gw: Served, pid: int) -> float:
    """``llm_gateway_requests_total`` (all series) the worker with ``pid`` last wrote."""
    where = gw.named("gateway_started")[0]["metrics_dir"]
    path = Path(where) / f"counts_{pid}.json"
    if not path.exists():
        return 0.0
    counts = Counts.load(path.read_bytes())
    return sum(c.value for s in counts.series.values() for c in s.by_status.values())


async def scrape(url: str, name: str) -> float:
    """The sum of the samples of ``name`` in ``/metrics``."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


async def burst(url: str, n: int = 16, model: str = "gpt-test") -> list[int]:
    """``n`` requests at once, each on a new connection (so either worker may take it)."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:
        return list(await asyncio.gather(*(chat(s, url, model) for _ in range(n))))


async def until_both_served(gw: Served) -> int:
    """Bursts until each worker has answered some, and has written what it answered; the
    requests sent."""
    sent = 0
    for _ in range(20):
        assert set(await burst(gw.url)) == {200}
        sent += 16

        def written(n: int = sent) -> bool:  # within the flush interval, 1 s
            return sum(requests_of(gw, pid) for pid in pids(gw).values()) >= n

        await eventually(written, within=3, what="the workers' counts written")
        if all(requests_of(gw, pid) > 0 for pid in pids(gw).values()):
            return sent
    raise AssertionError(f"one worker took every connection: {pids(gw)}")


async def test_two_workers_one_port_one_metrics(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """Two workers answer on one port, each counts what it answered, and /metrics (on
    whichever worker answers it) adds them up once the flush interval (1 s) has passed;
    the gauges combine too."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root)
    both = pids(gw)
    assert sorted(both) == [0, 1] and len(set(both.values())) == 2
    assert gw.proc.pid not in both.values()  # the supervisor answers nothing itself
    sent = await until_both_served(gw)
    by_pid = [requests_of(gw, pid) for pid in both.values()]
    assert sum(by_pid) == sent and min(by_pid) > 0
    for _ in range(4):  # any worker's /metrics: the same sum
        assert await scrape(gw.url, "llm_gateway_requests_total") == sent
    assert await scrape(gw.url, "llm_gateway_inflight_requests") == 0  # livesum of both
    # one in flight on either worker shows in every worker's /metrics
    fake.push(Delay(0.3))
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers=AUTH,
        )
        await resp.content.readuntil(b"\n\n")
        for _ in range(4):
            assert await scrape(gw.url, "llm_gateway_inflight_requests") == 1
        await resp.read()

    async def counted() -> bool:  # counted just after the answer's last byte went out
        return await scrape(gw.url, "llm_gateway_requests_total") == sent + 1

    await eventually(counted, what="the stream counted")


async def test_reload_reaches_every_worker(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGHUP to the supervisor, a file change (each worker's watcher) and POST
    /admin/reload (the worker that answers, then the other by SIGHUP) reload both workers."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root, admin_key=ADMIN_KEY)
    assert set(await burst(gw.url, model="forbidden-model")) == {403}
    edit_team(root, models=["gpt-*", "claude-*", "forbidden-model"])
    gw.proc.send_signal(signal.SIGHUP)
    await gw.wait_event("policy_reloaded", count=2)
    assert [e["trigger"] for e in gw.named("policy_reloaded")] == ["sighup", "sighup"]
    for _ in range(3):  # new connections, either worker: the new set
        assert set(await burst(gw.url, model="forbidden-model")) == {200}

    edit_team(root, models=["gpt-*"])
    async with (
        aiohttp.ClientSession() as s,
        s.post(gw.url + "/admin/reload", headers={"authorization": f"Bearer {ADMIN_KEY}"}) as r,
    ):
        assert r.status == 200
    await gw.wait_event("policy_reloaded", count=4)
    assert sorted(e["trigger"] for e in gw.named("policy_reloaded")[2:]) == ["admin", "sighup"]
    for _ in range(3):
        assert set(await burst(gw.url, model="forbidden-model")) == {403}
    assert await scrape(gw.url, "llm_gateway_policy_reloads_total") == 4  # 2 per reload


async def test_file_change_reloads_every_worker(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root, reload_watch_s="0.1")
    assert set(await burst(gw.url, model="forbidden-model")) == {403}
    edit_team(root, models=["gpt-*", "claude-*", "forbidden-model"])
    await gw.wait_event("policy_reloaded", count=2)
    assert {e["trigger"] for e in gw.named("policy_reloaded")} == {"file_change"}
    for _ in range(3):
        assert set(await burst(gw.url, model="forbidden-model")) == {200}


async def test_drain_reaches_every_worker(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGTERM to the supervisor: both workers drain with the documented timeline (/readyz
    503 at once, new requests served for the accept window, then the port refuses), the
    stream in flight completes, the gateway exits 0."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root, shutdown_grace_s="4.5")  # accept window 1.5 s
    fake.push(Delay(0.3))  # 8 chunks: about 2.4 s
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers=AUTH,
        )
        assert resp.status == 200
        first = await resp.content.readuntil(b"\n\n")
        gw.proc.send_signal(signal.SIGTERM)
        await gw.wait_event("gateway_draining", count=2, within=2)
        draining = gw.named("gateway_draining")
        assert {e["worker"] for e in draining} == {0, 1}
        assert all(e["signal"] == "SIGTERM" and e["accept_s"] == 1.5 for e in draining)
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as fresh:
            for _ in range(6):  # new connections, whichever worker takes them
                async with fresh.get(gw.url + "/readyz") as r:
                    assert r.status == 503
            assert set(await burst(gw.url, 8)) == {200}  # still accepting
        await gw.wait_event("gateway_listener_closed", count=2, within=2)
        async with aiohttp.ClientSession() as late:
            with pytest.raises(aiohttp.ClientConnectionError):
                await chat(late, gw.url)
        rest = await resp.read()
        text, finishes = sse_text(first + rest)
        assert text and finishes[-1] == "stop" and rest.rstrip().endswith(b"data: [DONE]")
    assert await gw.wait_exit(within=10) == 0
    assert len(gw.named("worker_stopped")) == 2
    assert [e["code"] for e in gw.named("worker_exited")] == [0, 0]
    assert 1.5 < gw.named("gateway_stopped")[0]["drain_s"] < 3.5
    assert not gw.named("gateway_drain_timeout")


async def test_ctrl_c_when_idle_exits_at_once(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root)
    assert set(await burst(gw.url, 4)) == {200}
    t0 = time.monotonic()
    gw.proc.send_signal(signal.SIGINT)
    assert await gw.wait_exit(within=5) == 0
    assert time.monotonic() - t0 < 1.5
    assert [e["accept_s"] for e in gw.named("gateway_draining")] == [0, 0]


async def test_a_killed_worker_is_started_again(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGKILL one worker: logged (worker_exited), started again within about 0.5 s; the
    port never stops answering, and the dead worker's counts stay in /metrics."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root)
    sent = await until_both_served(gw)
    victim = pids(gw)[0]
    os.kill(victim, signal.SIGKILL)
    assert set(await burst(gw.url, 8)) == {200}  # the other worker takes everything
    exited = await gw.wait_event("worker_exited")
    assert exited["pid"] == victim and exited["signal"] == "SIGKILL"
    assert exited["worker"] == 0 and exited["restart_in_s"] == 0.5
    await gw.wait_event("worker_started", count=3, within=10)
    assert pids(gw)[0] != victim

    async def counted(n: int) -> bool:  # the survivor's last 8 written within 1 s
        return await scrape(gw.url, "llm_gateway_requests_total") == n

    await eventually(lambda: counted(sent + 8), within=3, what="the dead worker's counts")
    sent += 8 + await until_both_served(gw)  # the new worker answers too
    await eventually(lambda: counted(sent), within=3, what="every worker's counts")


async def test_metrics_port_adds_up_every_worker(
    workers: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """GATEWAY_METRICS_PORT: bound once by the supervisor, served by every worker, the sum."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await workers(root, metrics_port="0")
    murl = f"http://127.0.0.1:{gw.named('gateway_started')[0]['metrics_port']}"
    sent = await until_both_served(gw)
    for _ in range(4):
        assert await scrape(murl, "llm_gateway_requests_total") == sent
    async with aiohttp.ClientSession() as s, s.get(gw.url + "/metrics") as r:
        assert r.status == 404  # not on the main port


def test_workers_setting_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.cli import build_parser
    from gateway.settings import GatewaySettings

    assert GatewaySettings().worker_count() == 1
    monkeypatch.setenv("GATEWAY_WORKERS", "auto")
    assert GatewaySettings().worker_count() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("GATEWAY_WORKERS", "3")
    assert GatewaySettings().worker_count() == 3
    monkeypatch.setenv("GATEWAY_WORKERS", "0")
    with pytest.raises(ValueError):
        GatewaySettings()
    assert build_parser().parse_args(["serve", "--workers", "auto"]).workers == "auto"
    assert build_parser().parse_args(["serve", "--workers", "2"]).workers == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--workers", "none"])
