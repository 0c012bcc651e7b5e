"""What the gateway reads back from Redis is input like any other: a malformed value is
logged once (naming the key, never the value) and ignored; it never fails a request,
``/admin/deployments`` or the background syncs.

Real redis-server, real gateway processes sharing it (two, then one started after the
garbage), and the state classes on their own where the logs are read.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from gateway.resilience.deployments import DeploymentState
from gateway.routing.policyset import hash_key
from gateway.state.deployment_sync import CHANNEL, PREFIX, DeploymentSync
from gateway.state.deployments import DeploymentBoard
from gateway.testing import Error, FakeProvider
from tests.harness import CLIENT_KEY, FAST_POLICY, write_policies
from tests.process import GatewayProcess
from tests.redis_server import RedisServer
from tests.waiting import eventually

pytestmark = pytest.mark.redis

ADMIN_KEY = "redis-garbage-admin"
KEYS = {"DEP_KEY_A": "key-a", "DEP_KEY_B": "key-b"}
SECRET = "sk-live-0123456789abcdef-secret"
MESSAGES = [{"role": "user", "content": "Say hello"}]
FAR = time.time() + 10 * 365 * 86400  # ten years ahead

#: model suffix -> {deployment name: the raw hash value written for it}. Each model has
#: two deployments (``keys#1``, ``keys#2``: the provider's two keys).
GARBAGE: dict[str, dict[str | bytes, bytes]] = {
    "wrong-json-types": {"keys#1": orjson.dumps({"until": "soon", "state": "cooldown"})},
    "not-json": {"keys#1": b"\x00{garbage"},
    "nan": {"keys#1": json.dumps({"until": float("nan"), "state": "out"}).encode()},
    "huge-until": {
        n: orjson.dumps({"until": 1e300, "state": "out", "why": "auth"})
        for n in ("keys#1", "keys#2")
    },
    "far-until": {n: orjson.dumps({"until": FAR, "state": "out"}) for n in ("keys#1", "keys#2")},
    "negative": {"keys#1": orjson.dumps({"until": -5.0, "streak": -1000, "short_until": -1})},
    "big-int": {"keys#1": json.dumps({"streak": 2**70, "until": 10**30}).encode()},
    "fields-of-wrong-kinds": {
        "keys#1": orjson.dumps({"state": {"x": 1}, "why": ["a"], "last_error": SECRET})
    },
    "huge-string": {"keys#1": orjson.dumps({"last_error": "x" * 1_000_000})},
    "not-an-object": {"keys#1": b"[1, 2]", "keys#2": b'"cooldown"'},
    "bad-utf8-name": {b"\xff\xfe": orjson.dumps({"until": 1.0})},
}
WRONG_REDIS_TYPE = "wrong-redis-type"  # the model's key is a list, not a hash
CLEAN = "gpt-clean"  # no garbage of its own: shows the sharing still works
MODELS = [f"gpt-g-{name}" for name in [*GARBAGE, WRONG_REDIS_TYPE]] + [CLEAN]
#: published on the channel, as if by another replica
BAD_MESSAGES: list[bytes] = [
    b"not json",
    b"[1]",
    orjson.dumps({"r": "other", "m": MODELS[0], "n": "keys#1", "s": {"until": "soon"}}),
    orjson.dumps({"r": "other", "m": MODELS[0], "n": "keys#2", "s": {"until": 1e300}}),
    *(
        orjson.dumps({"r": "other", "m": MODELS[1], "n": n, "s": {"state": "out", "until": FAR}})
        for n in ("keys#1", "keys#2")
    ),
    orjson.dumps({"r": ["x"], "m": {}, "n": 1, "s": {}}),
]


def policy(fake_url: str) -> dict[str, Any]:
    model = {"provider": "keys", "balance": "ordered"}
    return {
        "platform.yaml": {
            "providers": {"keys": {"api": "openai", "base_url": fake_url + "/v1",
                                   "api_key_env": ["DEP_KEY_A", "DEP_KEY_B"]}},
            "models": {m: model for m in MODELS},
            "policies": {"fast": FAST_POLICY},
        },
        "teams/a.yaml": {
            "teams": {"team-a": {"keys": [hash_key(CLIENT_KEY)], "models": ["gpt-*"],
                                 "routes": [{"match": {"model": "*"}, "policy": "fast"}]}}
        },
    }  # fmt: skip


async def plant(redis: Redis) -> None:
    """Every kind of garbage, in the keys the gateway reads at start."""
    for name, fields in GARBAGE.items():
        await redis.hset(f"{PREFIX}:gpt-g-{name}", mapping=fields)  # type: ignore[arg-type]
    await redis.rpush(f"{PREFIX}:gpt-g-{WRONG_REDIS_TYPE}", "x")  # type: ignore[misc]


async def answers(gw: GatewayProcess) -> dict[str, Any]:
    """Status of a chat completion per model, and of /admin/deployments (its size, and
    whether it shows a value planted in a garbage field)."""
    out = {}
    client = gw.openai()
    for model in MODELS:
        try:
            await client.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
            out[model] = 200
        except Exception as exc:
            out[model] = getattr(exc, "status_code", 0)
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/deployments", headers={"authorization": f"Bearer {ADMIN_KEY}"}) as r,
    ):
        body = await r.read()
    out["/admin/deployments"] = r.status
    out["admin body over 64 KiB, secret shown"] = (len(body) > 65536, SECRET.encode() in body)
    return out


async def cooling(gw: GatewayProcess, model: str) -> bool:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/deployments", headers=headers) as r,
    ):
        if r.status != 200:
            return False
        rows = (await r.json())["models"][model]["deployments"]
    return any(d["deployment"] == "keys#1" and d["state"] == "cooldown" for d in rows)


async def test_garbage_deployment_states_never_break_a_model(
    fake: FakeProvider,
    tmp_path: Path,
    redis_server: RedisServer,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Garbage published to two running replicas, then stored in every deployment key and
    loaded by a third started afterwards: all three serve every model and answer
    /admin/deployments; sharing still works (a cooldown made on one replica reaches the
    others, a fourth started afterwards loads it)."""
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    root = write_policies(tmp_path / "p", policy(fake.url))
    started: list[GatewayProcess] = []

    async def replica() -> GatewayProcess:
        gw = GatewayProcess(root, state_url=redis_server.url, admin_key=ADMIN_KEY)
        started.append(await gw.start())
        return gw

    try:
        one, two = await replica(), await replica()
        await asyncio.sleep(0.2)  # the scenario: both listen (ready: /readyz does not wait)
        for message in BAD_MESSAGES:
            await redis.publish(CHANNEL, message)
        await plant(redis)
        late = await replica()
        results = {"one": await answers(one), "two": await answers(two)}
        results["late"] = await answers(late)
        fake.push(Error.openai_rate_limit(retry_after=30))
        await one.openai().chat.completions.create(model=CLEAN, messages=MESSAGES)  # type: ignore[arg-type]
        shared = [
            await eventually(lambda gw=gw: cooling(gw, CLEAN), within=1.5, fail=False)  # type: ignore[misc]
            for gw in (two, late)
        ]
        again = await replica()
        shared.append(await eventually(lambda: cooling(again, CLEAN), within=2.0, fail=False))
        ok: dict[str, Any] = {k: 200 for k in [*MODELS, "/admin/deployments"]}
        ok["admin body over 64 KiB, secret shown"] = (False, False)
        # shared: replicas two, late and again see replica one's cooldown
        assert (results, shared) == ({"one": ok, "two": ok, "late": ok}, [True] * 3)
    finally:
        for gw in started:
            await gw.stop()


async def test_each_bad_entry_is_logged_once_without_its_value(
    redis_server: RedisServer, redis: Redis
) -> None:
    """The sync loads every valid entry, logs each bad one once (the key named, the value
    not), and keeps listening after bad messages: a valid one still arrives."""
    await plant(redis)
    good = DeploymentState(until=time.time() + 60, state="cooldown", why="rate_limit")
    await redis.hset(f"{PREFIX}:gpt-good", "keys#1", orjson.dumps(asdict(good)))
    board = DeploymentBoard()
    with capture_logs() as logs:
        sync = DeploymentSync(redis_server.url, board)
        await sync.start()
        try:
            await asyncio.wait_for(sync.ready.wait(), 3)
            for message in BAD_MESSAGES * 2:
                await redis.publish(CHANNEL, message)
            valid = {"r": "other", "m": "gpt-good", "n": "keys#2",
                     "s": {"until": time.time() + 30, "state": "out", "why": "auth"}}  # fmt: skip
            await redis.publish(CHANNEL, orjson.dumps(valid))
            await eventually(lambda: "gpt-good|keys#2" in board.snapshot(), within=2.0,
                             what="a valid message after the bad ones")  # fmt: skip
            # a change to the model whose key is not a hash, then one to a good model: the
            # failed write does not stop the sender
            board.put(f"gpt-g-{WRONG_REDIS_TYPE}", "keys#1", good)
            board.put("gpt-good", "keys#3", good)

            async def written() -> bool:
                return bool(await redis.hexists(f"{PREFIX}:gpt-good", "keys#3"))  # type: ignore[misc]

            await eventually(written, within=2.0, what="the next change written")
        finally:
            await sync.close()
    assert board.snapshot()["gpt-good|keys#1"]["state"] == "cooldown"
    garbage_seen = {k for k in board.snapshot() if k.startswith("gpt-g-")}
    assert garbage_seen == {f"gpt-g-{WRONG_REDIS_TYPE}|keys#1"}  # only the one put here
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert all(e["event"] == "state_value_ignored" for e in warned), warned
    keys = [(e["key"], e.get("field")) for e in warned]
    assert len(keys) == len(set(keys)), "logged more than once"
    for name in [*GARBAGE, WRONG_REDIS_TYPE]:
        assert any(k == f"{PREFIX}:gpt-g-{name}" for k, _ in keys), (name, keys)
    assert any(k == CHANNEL for k, _ in keys)
    assert SECRET not in repr(logs) and "soon" not in repr(logs)


# ---- fallback states and counters (gateway/state/redis*.py) --------------------------------

FB_KEY = "llm-gateway:fb:team-a/0|gpt-test"  # the fast policy's route, model gpt-test
STUCK: dict[str, bytes] = {
    # each would keep the route on its fallback for ever (it never probes the primary)
    "since NaN": b'{"active": 1, "streak": 0, "since": "NaN", "probe_until": 0}',
    "since far ahead": b'{"active": 1, "streak": 0, "since": 1e300, "probe_until": 0}',
    "probe lease far ahead": orjson.dumps(
        {"active": 1, "streak": 0, "since": 0, "probe_until": FAR}
    ),
    "active a bool, streak a string": b'{"active": true, "streak": "0", "since": 0.0,'
    b' "probe_until": 0, "note": "' + SECRET.encode() + b'"}',
}


@pytest.mark.parametrize("raw", list(STUCK.values()), ids=list(STUCK))
async def test_garbage_fallback_state_is_the_initial_state(
    make_gateway: Any, fake: FakeProvider, redis_server: RedisServer, redis: Redis, raw: bytes
) -> None:
    """A fallback state the gateway did not write is read as the initial one (the primary
    serves), logged once without its value, and replaced by the next change; Redis is
    not taken for unreachable."""
    await redis.set(FB_KEY, raw)
    fb = {"fallback": {"chain": ["gpt-backup"], "cooldown": "100ms"}, "turn_retry": {"max": 0}}
    gw = await make_gateway(policy=fb, state_url=redis_server.url)
    with capture_logs() as logs:
        models = []
        for _ in range(3):
            answer = await gw.async_openai().chat.completions.with_raw_response.create(
                model="gpt-test", messages=MESSAGES
            )
            models.append(answer.headers["x-gateway-model"])
    # (price_unknown: said once per process about the test policy's unpriced model)
    warned = [
        (e["event"], e.get("key"))
        for e in logs
        if e["log_level"] == "warning" and e["event"] != "price_unknown"
    ]
    assert (models, warned) == (["gpt-test"] * 3, [("state_value_ignored", FB_KEY)])
    assert SECRET not in repr(logs)
    assert not gw.gateway.state.degraded


@pytest.mark.parametrize("kind", ["tokens", "strings", "wrong-redis-types"])
async def test_garbage_counters_neither_hang_nor_degrade(
    make_gateway: Any, fake: FakeProvider, redis_server: RedisServer, redis: Redis, kind: str
) -> None:
    """A team window's request and token counters and a route's retry counters that are
    not integers (``strings``; ``tokens``: that one only), or not even strings
    (``wrong-redis-types``): admissions and
    the retry budget read them as 0 or start them again, and log each key once; requests
    are answered at once and Redis stays in use."""
    now = time.time()
    window, second = math.floor(now / 60), math.floor(now)
    for w in (window, window + 1):
        requests, tokens = f"llm-gateway:limit:team-a:req:{w}", f"llm-gateway:limit:team-a:tok:{w}"
        if kind == "tokens":
            await redis.set(tokens, "garbage")
        elif kind == "strings":
            await redis.set(requests, "garbage")
            await redis.set(tokens, "1e3")
        else:
            await redis.hset(requests, "x", "1")
            await redis.rpush(tokens, "1")  # type: ignore[misc]
    for b in range(second - 9, second + 30):  # the windows of the next half minute too
        if kind in ("tokens", "strings"):
            await redis.set(f"llm-gateway:budget:team-a/0:req:{b}", b"\xff")
            await redis.set(f"llm-gateway:budget:team-a/0:retry:{b}", b"-")
        else:
            await redis.sadd(f"llm-gateway:budget:team-a/0:req:{b}", "1")  # type: ignore[misc]
    gw = await make_gateway(limits={"requests_per_minute": 1000}, state_url=redis_server.url)
    fake.script("fake-model", [Error.openai_server(500)])  # one retry: spends the budget
    with capture_logs() as logs:
        started = time.monotonic()
        try:
            async with asyncio.timeout(3):
                for _ in range(3):
                    await gw.async_openai().chat.completions.create(
                        model="gpt-test", messages=MESSAGES
                    )
                    await asyncio.sleep(0.1)  # the scenario: a background flush in between
            outcome = "answered"
        except TimeoutError:
            outcome = "no answer in 3 s"
        took = time.monotonic() - started
    events = {e["event"] for e in logs if e["log_level"] == "warning"}
    keys = [e["key"] for e in logs if e["event"] == "state_value_ignored"]
    degraded = gw.gateway.state.degraded
    assert (outcome, events, degraded) == ("answered", {"state_value_ignored"}, False)
    assert len(keys) == len(set(keys)), keys
    assert took < 1.5
