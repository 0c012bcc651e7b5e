"""Operations: policy hot reload (file watch, SIGHUP, /admin/reload) and graceful drain.

In-process tests use the harness; SIGHUP and drain run ``python -m gateway serve`` as
a real subprocess in front of the fake provider served by the test process, and read
its JSON log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from structlog.testing import capture_logs

from gateway.policy.merge import deep_merge
from gateway.testing import Delay, Error, FakeProvider
from tests.harness import (
    CLIENT_KEY,
    PROVIDER_KEY,
    PROVIDER_KEY_ENV,
    Harness,
    policy_files,
    write_policies,
)
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Say hello"}]
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


class Served:
    """``python -m gateway serve`` in a subprocess, with its JSON log lines collected."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.other: list[str] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        self.url = ""

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.other.append(line.decode(errors="replace"))
                continue
            self.events.append(event)
            self._changed.set()
        self._changed.set()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == name]

    async def wait_event(self, name: str, count: int = 1, within: float = 10.0) -> dict[str, Any]:
        async def until() -> dict[str, Any]:
            while len(found := self.named(name)) < count:
                if self._reader.done():
                    raise AssertionError(f"gateway exited before {name!r}: {self.events}")
                self._changed.clear()
                await self._changed.wait()
            return found[count - 1]

        return await asyncio.wait_for(until(), within)

    async def wait_exit(self, within: float) -> int:
        rc = await asyncio.wait_for(self.proc.wait(), within)
        await self._reader
        return rc


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start ``python -m gateway serve --policies DIR --port 0 [ARGS]``; ``env`` adds (or
    replaces) GATEWAY_* settings."""
    started: list[Served] = []

    async def start(policy_dir: Path, *args: str, **env: str) -> Served:
        full = {
            **os.environ,
            PROVIDER_KEY_ENV: PROVIDER_KEY,
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_SHUTDOWN_GRACE_S": "3",
            "GATEWAY_RELOAD_WATCH_S": "0.2",
            **{f"GATEWAY_{k.upper()}": v for k, v in env.items()},
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", "0", *args, cwd=ROOT, env=full,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        s = Served(proc)
        started.append(s)
        ev = await s.wait_event("gateway_started", within=30)
        s.url = f"http://127.0.0.1:{ev['port']}"
        return s

    yield start
    for s in started:
        if s.proc.returncode is None:
            s.proc.kill()
            await s.proc.wait()
        s._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await s._reader


def sse_text(raw: bytes) -> tuple[str, list[str | None]]:
    """The joined content and the finish reasons of an OpenAI chat SSE body."""
    text, finishes = [], []
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = orjson.loads(line[6:])
        assert "error" not in chunk, chunk
        for choice in chunk.get("choices", []):
            text.append(choice["delta"].get("content") or "")
            finishes.append(choice.get("finish_reason"))
    return "".join(text), finishes


async def chat(session: aiohttp.ClientSession, url: str, model: str = "gpt-test") -> int:
    async with session.post(
        url + "/v1/chat/completions", json={"model": model, "messages": MESSAGES}, headers=AUTH
    ) as r:
        await r.read()
        return r.status


# ---- graceful drain ------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_drain_finishes_streams_and_exits_0(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM/SIGINT mid-stream: /readyz 503 at once, new requests served during the accept
    window, then the listener closes; the stream completes intact; exit 0 within the grace."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await serve(root, shutdown_grace_s="4.5")  # accept window 1.5 s, then in-flight 4.5 s
    fake.push(Delay(0.3))  # 8 chunks: about 2.4 s
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.url + "/readyz") as r:
            assert r.status == 200
        resp = await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers=AUTH,
        )
        assert resp.status == 200
        first = await resp.content.readuntil(b"\n\n")  # the stream has started
        gw.proc.send_signal(sig)
        draining = await gw.wait_event("gateway_draining", within=2)
        assert draining["signal"] == sig.name and draining["accept_s"] == 1.5
        async with aiohttp.ClientSession() as fresh:  # a new connection, as a load balancer's
            async with fresh.get(gw.url + "/readyz") as r:
                assert r.status == 503
            assert await chat(fresh, gw.url) == 200  # still accepting
        await gw.wait_event("gateway_listener_closed", within=2)
        async with aiohttp.ClientSession() as late:
            with pytest.raises(aiohttp.ClientConnectionError):
                await chat(late, gw.url)
        rest = await resp.read()
        text, finishes = sse_text(first + rest)
        assert text == fake.reply.get("gpt-test") or text.startswith("Hello! This is the fake")
        assert finishes[-1] == "stop" and rest.rstrip().endswith(b"data: [DONE]")
    rc = await gw.wait_exit(within=10)
    assert rc == 0
    # stopped once the stream was done (~2.1 s after the signal), not after accept + grace
    assert 1.5 < gw.named("gateway_stopped")[0]["drain_s"] < 3.5
    assert not gw.named("gateway_drain_timeout")
    done = [e for e in gw.named("request_completed") if e.get("status") == 200]
    assert len(done) == 2, gw.events


async def test_ctrl_c_when_idle_exits_at_once(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGINT (Ctrl-C) with nothing in flight, an idle keep-alive connection open: exit 0
    within a second, no accept window. SIGTERM on an idle gateway that no one asked
    /readyz since keeps its accept window (a load balancer may not know yet): requests
    are served until it ends."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await serve(root)  # grace 3 s: a SIGTERM would keep accepting for 1 s
    async with aiohttp.ClientSession() as s:
        assert await chat(s, gw.url) == 200  # its connection stays open, idle
        t0 = time.monotonic()
        gw.proc.send_signal(signal.SIGINT)
        rc = await gw.wait_exit(within=5)
    assert rc == 0
    assert time.monotonic() - t0 < 1.0
    assert gw.named("gateway_draining")[0]["accept_s"] == 0
    assert gw.named("gateway_stopped")[0]["drain_s"] < 0.5

    term = await serve(root, shutdown_grace_s="1.5")  # accept window 0.5 s
    async with aiohttp.ClientSession() as s:
        assert await chat(s, term.url) == 200
        t0 = time.monotonic()
        term.proc.send_signal(signal.SIGTERM)
        assert (await term.wait_event("gateway_draining", within=2))["accept_s"] == 0.5
        async with aiohttp.ClientSession() as fresh:  # a new connection, as a load balancer's
            assert await chat(fresh, term.url) == 200  # still accepting
        rc = await term.wait_exit(within=5)
    assert rc == 0
    assert time.monotonic() - t0 >= 0.5
    assert 0.5 <= term.named("gateway_stopped")[0]["drain_s"] < 1.0


async def test_sigterm_when_idle_exits_once_readiness_said_draining(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGTERM with nothing in flight: new requests are served until /readyz has answered
    503 (the readiness grace), then the gateway exits 0 at once, well within its 5 s
    accept window."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await serve(root, shutdown_grace_s="30")  # accept window 5 s
    async with aiohttp.ClientSession() as s:
        assert await chat(s, gw.url) == 200  # its connection stays open, idle
        t0 = time.monotonic()
        gw.proc.send_signal(signal.SIGTERM)
        assert (await gw.wait_event("gateway_draining", within=2))["accept_s"] == 5
        async with aiohttp.ClientSession() as fresh:  # a new connection, as a load balancer's
            assert await chat(fresh, gw.url) == 200  # still accepting
            async with fresh.get(gw.url + "/readyz") as r:
                assert r.status == 503
        rc = await gw.wait_exit(within=6)
    assert rc == 0
    assert time.monotonic() - t0 < 2.0
    assert gw.named("gateway_stopped")[0]["drain_s"] < 1.0


async def test_drain_ends_what_outlives_the_grace(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """A stream still running after accept window + grace ends with an error event and a proper
    end of the chunked body (no silent cut); the process exits 0 on time."""
    slow = {"timeouts": {"stream_idle": "20s", "total": "60s"}}
    root = write_policies(tmp_path / "policies", policy_files(fake.url, slow))
    gw = await serve(root, shutdown_grace_s="1.5")  # accept 0.5 s, in-flight up to 1.5 s
    fake.push(Delay(1.0))  # about 8 s
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers=AUTH,
        )
        await resp.content.readuntil(b"\n\n")
        gw.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        got = b""
        async for piece in resp.content.iter_any():  # ended at the drain timeout ...
            got += piece
        resp.close()
    assert b'"code":"gateway_shutdown"' in got  # ... with an error event: never silently
    rc = await gw.wait_exit(within=10)
    assert rc == 0
    assert time.monotonic() - t0 < 5.0  # not the 8 s of the stream
    assert gw.named("gateway_drain_timeout")[0]["cancelled_requests"] == 1
    assert 2.0 <= gw.named("gateway_stopped")[0]["drain_s"] < 2.5  # 0.5 + 1.5 (+ 0.05)


# ---- hot reload ------------------------------------------------------------------------


def edit_team(root: Path, **changes: Any) -> Path:
    """Rewrite team-a's file with ``changes`` applied to the team (``None`` removes a key)."""
    path = root / "teams" / "team-a.yaml"
    data = yaml.safe_load(path.read_text())
    team = data["teams"]["team-a"]
    for key, value in changes.items():
        if value is None:
            team.pop(key, None)
        else:
            team[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def edit_policy(root: Path, **changes: Any) -> Path:
    """Rewrite the platform file with ``changes`` deep-merged into the ``fast`` policy."""
    path = root / "platform.yaml"
    data = yaml.safe_load(path.read_text())
    data["policies"]["fast"] = deep_merge(data["policies"]["fast"], changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def watcher_polls(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """How many times the file watcher has looked at each policy dir so far (it calls
    ``gateway.web.reload.fingerprint`` once per poll and decides in the same step), so a test
    waits for the polls it needs instead of guessing how long they take."""
    from gateway.web import reload

    polls: Counter[Path] = Counter()
    real = reload.fingerprint

    def counting(root: Path) -> Any:
        polls[Path(root)] += 1
        return real(root)

    monkeypatch.setattr(reload, "fingerprint", counting)
    return polls


ADMIN_KEY = "admin-secret-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


async def admin_reload(h: Harness) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.post(h.url + "/admin/reload", headers=ADMIN) as r:
        return r.status, await r.json()


async def admin_policies(h: Harness) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(h.url + "/admin/policies", headers=ADMIN) as r:
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data


async def status_of(h: Harness, model: str) -> int:
    async with aiohttp.ClientSession() as s:
        return await chat(s, h.url, model)


async def test_file_change_reloads_debounced(make_gateway: Callable[..., Any]) -> None:
    """Editing a team file gives the team a model without a restart (file watcher)."""
    h: Harness = await make_gateway(reload_watch_s=0.1)
    assert await status_of(h, "forbidden-model") == 403
    with capture_logs() as logs:
        edit_team(h.policy_dir, models=["gpt-*", "claude-*", "forbidden-model"])
        await eventually(lambda: h.metric("llm_gateway_policy_reloads_total", outcome="ok") == 1)
        assert await status_of(h, "forbidden-model") == 200
    reloaded = [e for e in logs if e["event"] == "policy_reloaded"]
    assert len(reloaded) == 1 and reloaded[0]["trigger"] == "file_change"
    assert reloaded[0]["files"] == 2
    assert h.metric("llm_gateway_policy_reloads_total", outcome="ok") == 1
    assert h.metric("llm_gateway_policy_reloads_total", outcome="rejected") == 0


async def test_admin_endpoints_need_the_key(make_gateway: Callable[..., Any]) -> None:
    """/admin/* is 404 without GATEWAY_ADMIN_KEY; 401 without the right bearer key."""
    off: Harness = await make_gateway()
    on: Harness = await make_gateway(admin_key=ADMIN_KEY)
    wrong = [{}, {"authorization": "Bearer nope"}, {"authorization": ADMIN_KEY},
             {"authorization": f"Basic {ADMIN_KEY}"}, {"x-api-key": ADMIN_KEY},
             {"authorization": f"Bearer {ADMIN_KEY}x"}, {"authorization": "Bearer "},
             {"authorization": f"Bearer {CLIENT_KEY}"}]  # fmt: skip
    async with aiohttp.ClientSession() as s:
        for method, path in [("POST", "/admin/reload"), ("GET", "/admin/policies"),
                             ("GET", "/admin/deployments")]:  # fmt: skip
            async with s.request(method, off.url + path, headers=ADMIN) as r:
                assert r.status == 404, path
            for headers in wrong:
                async with s.request(method, on.url + path, headers=headers) as r:
                    assert r.status == 401, (path, headers)
                    assert (await r.json())["error"]["message"]
                    assert r.headers["www-authenticate"].startswith("Bearer")
            async with s.request(method, on.url + path, headers=ADMIN) as r:
                assert r.status == 200, path
            async with s.request(
                method, on.url + path, headers={"authorization": f"bearer  {ADMIN_KEY} "}
            ) as r:
                assert r.status == 200, path  # scheme case-insensitive, spaces trimmed
    assert on.metric("llm_gateway_policy_reloads_total", outcome="ok") == 2


async def test_admin_policies_shows_files_and_hashes(make_gateway: Callable[..., Any]) -> None:
    """GET /admin/policies: the active files with their sha256, counts, version, no error."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY)
    snap = await admin_policies(h)
    root = h.policy_dir
    assert snap["files"] == {
        "platform.yaml": sha256_of(root / "platform.yaml"),
        "teams/team-a.yaml": sha256_of(root / "teams" / "team-a.yaml"),
    }
    assert snap["policy_dir"] == str(root)
    assert snap["version"] == h.gateway.policies.version
    assert snap["counts"]["teams"] == 1 and snap["counts"]["files"] == 2
    assert snap["last_error"] is None and snap["draining"] is False
    assert CLIENT_KEY not in str(snap) and PROVIDER_KEY not in str(snap)


async def test_admin_reload_changes_max_retries(
    make_gateway: Callable[..., Any], fake: FakeProvider
) -> None:
    """POST /admin/reload applies a new max_retries to the next request."""
    h: Harness = await make_gateway({"turn_retry": {"max": 0}}, admin_key=ADMIN_KEY)
    client = h.async_openai()
    fake.push(Error.openai_server(500))
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES
    )
    assert raw.headers["x-gateway-attempts"] == "2"  # retried
    edit_policy(h.policy_dir, retry={"max_retries": 0})
    with capture_logs() as logs:
        status, body = await admin_reload(h)
    assert status == 200 and body["reloaded"] is True and body["last_error"] is None
    assert [e["trigger"] for e in logs if e["event"] == "policy_reloaded"] == ["admin"]
    fake.push(Error.openai_server(500))
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            h.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES},
            headers=AUTH,
        ) as r,
    ):
        assert r.status == 502 and r.headers["x-gateway-attempts"] == "1"  # no retry now


async def test_broken_file_keeps_old_set_and_reports(make_gateway: Callable[..., Any]) -> None:
    """A bad file is rejected whole: old behaviour stays, policy_rejected names file and line,
    the rejection is counted and shown by /admin/policies; fixing the file reloads OK."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY, reload_watch_s=0.1)
    before = await admin_policies(h)
    team_file = edit_team(h.policy_dir, models=["forbidden-model"], colour="blue")
    with capture_logs() as logs:
        status, body = await admin_reload(h)
    assert status == 422 and body["reloaded"] is False
    shown = f"{h.policy_dir.as_posix()}/teams/team-a.yaml"
    line = team_file.read_text().splitlines().index("    colour: blue") + 1
    assert body["last_error"] == f"{shown}:{line}: teams.team-a.colour: unknown key"
    rejected = [e for e in logs if e["event"] == "policy_rejected"]
    assert rejected == [{"event": "policy_rejected", "log_level": "error", "file": shown,
                         "line": line, "message": "teams.team-a.colour: unknown key",
                         "trigger": "admin"}]  # fmt: skip
    assert h.metric("llm_gateway_policy_reloads_total", outcome="rejected") == 1
    # the old set keeps serving
    assert await status_of(h, "gpt-test") == 200
    assert await status_of(h, "forbidden-model") == 403
    snap = await admin_policies(h)
    assert snap["files"] == before["files"] and snap["version"] == before["version"]
    assert snap["last_error"] == body["last_error"]
    assert sha256_of(team_file) != before["files"]["teams/team-a.yaml"]
    # the watcher sees the same broken content: it reports it again, still keeps the old set
    with capture_logs() as logs:
        await eventually(
            lambda: h.metric("llm_gateway_policy_reloads_total", outcome="rejected") == 2
        )
    assert [e["trigger"] for e in logs if e["event"] == "policy_rejected"] == ["file_change"]
    # fixing the file reloads it (the watcher), and clears the error
    with capture_logs() as logs:
        edit_team(h.policy_dir, colour=None)
        await eventually(lambda: h.metric("llm_gateway_policy_reloads_total", outcome="ok") == 1)
    assert [e["trigger"] for e in logs if e["event"] == "policy_reloaded"] == ["file_change"]
    assert await status_of(h, "forbidden-model") == 200
    assert await status_of(h, "gpt-test") == 403
    snap = await admin_policies(h)
    assert snap["last_error"] is None
    assert snap["files"]["teams/team-a.yaml"] == sha256_of(team_file)


async def stream_chat(url: str, model: str = "gpt-test") -> tuple[int, str, list[str | None]]:
    """One streamed chat completion read to its end: status, joined text, finish reasons."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            url + "/v1/chat/completions",
            json={"model": model, "messages": MESSAGES, "stream": True},
            headers=AUTH,
        ) as r,
    ):
        raw = await r.read()
        if r.status != 200:
            return r.status, raw.decode(), []
        text, finishes = sse_text(raw)
        assert raw.rstrip().endswith(b"data: [DONE]")
        return r.status, text, finishes


async def test_inflight_stream_keeps_its_policy(
    make_gateway: Callable[..., Any], fake: FakeProvider
) -> None:
    """A slow stream started before a reload finishes on the set it started with, even when
    the new set forbids its model and would time it out; new requests get the new set."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY)
    fake.push(Delay(0.1))  # 8 chunks, 0.1 s apart
    slow = asyncio.create_task(stream_chat(h.url))
    await eventually(lambda: len(fake.requests) == 1)
    edit_team(h.policy_dir, models=["claude-*"])
    edit_policy(h.policy_dir, timeouts={"stream_idle": "20ms", "first_byte": "20ms"})
    status, body = await admin_reload(h)
    assert status == 200 and body["reloaded"] is True
    assert await status_of(h, "gpt-test") == 403  # the new set already answers new requests
    assert not slow.done()
    status, text, finishes = await slow
    assert status == 200 and text.startswith("Hello! This is the fake provider")
    assert finishes[-1] == "stop"


async def test_reloads_never_break_requests_in_flight(
    make_gateway: Callable[..., Any], fake: FakeProvider
) -> None:
    """Streams and plain requests running through many reloads (good and bad) all succeed."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY)
    for _ in range(6):
        fake.push(Delay(0.05))
    streams = [asyncio.create_task(stream_chat(h.url)) for _ in range(6)]

    async def reload_storm() -> list[int]:
        statuses = []
        for i in range(20):
            if i % 5 == 4:
                edit_team(h.policy_dir, colour="blue")  # a bad set now and then
            else:
                edit_team(h.policy_dir, colour=None, limits={"requests_per_minute": 1000 + i})
            statuses.append((await admin_reload(h))[0])
            await asyncio.sleep(0.02)  # the scenario: reloads spread over the streams' life
        return statuses

    async def plain() -> list[int]:
        async with aiohttp.ClientSession() as s:
            return [await chat(s, h.url) for _ in range(10)]

    statuses, plains, results = await asyncio.gather(
        reload_storm(), plain(), asyncio.gather(*streams)
    )
    assert statuses.count(422) == 4 and statuses.count(200) == 16
    assert plains == [200] * 10
    for status, text, finishes in results:
        assert status == 200 and text.startswith("Hello! This is the fake provider")
        assert finishes[-1] == "stop"
    assert h.metric("llm_gateway_policy_reloads_total", outcome="ok") == 16
    assert h.metric("llm_gateway_policy_reloads_total", outcome="rejected") == 4


async def test_write_storm_reloads_once(
    make_gateway: Callable[..., Any], watcher_polls: Counter[Path]
) -> None:
    """Many writes in a row are loaded once, after they settle, with the last content."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY, reload_watch_s=0.25)
    path = h.policy_dir / "teams" / "team-a.yaml"
    data = yaml.safe_load(path.read_text())
    with capture_logs() as logs:
        for i in range(40):  # 0.8 s of writes, every 20 ms, some of them broken halfway
            data["teams"]["team-a"]["limits"] = {"requests_per_minute": 100 + i}
            text = yaml.safe_dump(data, sort_keys=False)
            path.write_text(text[: len(text) // 2] if i % 3 == 0 else text)
            await asyncio.sleep(0.02)  # the scenario: an editor writing every 20 ms
        data["teams"]["team-a"]["limits"] = {"requests_per_minute": 999}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        assert not [e for e in logs if e["event"].startswith("policy_")]  # nothing mid-storm
        await eventually(lambda: h.metric("llm_gateway_policy_reloads_total", outcome="ok") == 1)
        polled = watcher_polls[h.gateway.policy_dir]
        # two more polls: nothing else happens
        await eventually(lambda: watcher_polls[h.gateway.policy_dir] >= polled + 2)
    events = [e for e in logs if e["event"].startswith("policy_")]
    assert [e["event"] for e in events] == ["policy_reloaded"]
    assert h.gateway.policies.teams["team-a"].limits.requests_per_minute == 999
    assert (await admin_policies(h))["files"]["teams/team-a.yaml"] == sha256_of(path)


async def test_watcher_skips_what_is_already_loaded(
    make_gateway: Callable[..., Any], watcher_polls: Counter[Path]
) -> None:
    """A change loaded by /admin/reload (or SIGHUP) is not loaded a second time by the watcher;
    GATEWAY_RELOAD_WATCH_S=0 turns the watcher off."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY, reload_watch_s=0.25)
    off: Harness = await make_gateway(admin_key=ADMIN_KEY, reload_watch_s=0)
    with capture_logs() as logs:
        for g in (h, off):
            edit_team(g.policy_dir, models=["gpt-*", "claude-*", "forbidden-model"])
        polled = watcher_polls[h.gateway.policy_dir]
        assert (await admin_reload(h))[0] == 200
        # two polls of h's watcher see the change settle (already active: skipped), a third
        # changes nothing either
        await eventually(lambda: watcher_polls[h.gateway.policy_dir] >= polled + 3)
    assert [e["trigger"] for e in logs if e["event"] == "policy_reloaded"] == ["admin"]
    assert watcher_polls[off.gateway.policy_dir] == 0
    assert await status_of(off, "forbidden-model") == 403  # no watcher: not loaded
    assert off.metric("llm_gateway_policy_reloads_total", outcome="ok") == 0


async def test_sighup_reloads_and_rejects(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGHUP reloads a `serve` process; a broken set is logged as JSON policy_rejected with
    file, line and message, counted in /metrics, and the old set keeps serving."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await serve(root, reload_watch_s="0")  # SIGHUP only
    async with aiohttp.ClientSession() as s:
        assert await chat(s, gw.url, "forbidden-model") == 403
        edit_team(root, models=["gpt-*", "claude-*", "forbidden-model"])
        gw.proc.send_signal(signal.SIGHUP)
        ok = await gw.wait_event("policy_reloaded")
        assert ok["trigger"] == "sighup" and ok["files"] == 2
        assert await chat(s, gw.url, "forbidden-model") == 200
        team_file = edit_team(root, models=["gpt-*"], colour="blue")
        gw.proc.send_signal(signal.SIGHUP)
        bad = await gw.wait_event("policy_rejected")
        line = team_file.read_text().splitlines().index("    colour: blue") + 1
        assert bad["file"] == team_file.as_posix() and bad["line"] == line
        assert bad["message"] == "teams.team-a.colour: unknown key"
        assert bad["trigger"] == "sighup" and bad["level"] == "error"
        assert await chat(s, gw.url, "forbidden-model") == 200  # old set still serving
        async with s.get(gw.url + "/metrics") as r:
            text = await r.text()
        assert 'llm_gateway_policy_reloads_total{outcome="ok"} 1.0' in text
        assert 'llm_gateway_policy_reloads_total{outcome="rejected"} 1.0' in text
        edit_team(root, colour=None)
        gw.proc.send_signal(signal.SIGHUP)
        await gw.wait_event("policy_reloaded", count=2)
        assert await chat(s, gw.url, "forbidden-model") == 403  # models: ["gpt-*"] now
        assert await chat(s, gw.url, "gpt-test") == 200
    gw.proc.send_signal(signal.SIGTERM)
    assert await gw.wait_exit(within=10) == 0


async def test_admin_odd_authorization_bytes_are_401(make_gateway: Callable[..., Any]) -> None:
    """A non-UTF-8 Authorization header is a plain 401, not a server error."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY)
    host, port = h.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /admin/policies HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Authorization: Bearer \xff\xfe" + ADMIN_KEY.encode() + b"\r\n\r\n")  # fmt: skip
    await writer.drain()
    head = await reader.readline()
    writer.close()
    assert head.startswith(b"HTTP/1.1 401"), head


async def test_reload_can_add_the_sim_provider(make_gateway: Callable[..., Any]) -> None:
    """A reload that adds the built-in sim provider works: it starts on first use."""
    h: Harness = await make_gateway(admin_key=ADMIN_KEY)
    (h.policy_dir / "sim.yaml").write_text(
        yaml.safe_dump(
            {"providers": {"s": {"api": "sim"}}, "models": {"gpt-sim": {"provider": "s"}}}
        )
    )
    status, body = await admin_reload(h)
    assert status == 200 and "sim.yaml" in body["files"]
    assert await status_of(h, "gpt-sim") == 200
    assert await status_of(h, "gpt-test") == 200
