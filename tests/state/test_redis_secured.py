"""A Redis with a password, and with TLS, as docs/operations.md sets it up: a gateway
process given ``GATEWAY_STATE_URL`` with the password (``redis://:PASSWORD@host``) and the CA
(``rediss://...?ssl_ca_certs=``) shares its state through it; one with a wrong password
serves on its own state and writes nothing."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest
import trustme
from redis.asyncio import Redis

from gateway.testing import FakeProvider, Success
from tests.harness import policy_files, write_policies
from tests.process import GatewayProcess
from tests.redis_server import NO_REDIS, REDIS_SERVER, RedisServer, Tls
from tests.waiting import eventually

pytestmark = pytest.mark.redis
PASSWORD = secrets.token_hex(16)
MESSAGES = [{"role": "user", "content": "Say hello"}]
SPEND = "llm-gateway:spend:team-a:*"
ONE_USD = Success(usage={"prompt_tokens": 1000, "completion_tokens": 0})
FREE = Success(usage={"prompt_tokens": 0, "completion_tokens": 0})


def tls_files(where: Path) -> Tls:
    """A CA and a certificate for 127.0.0.1 that it signed."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    files = Tls(cert=where / "redis.crt", key=where / "redis.key", ca=where / "ca.pem")
    cert.cert_chain_pems[0].write_to_path(str(files.cert))
    cert.private_key_pem.write_to_path(str(files.key))
    ca.cert_pem.write_to_path(str(files.ca))
    return files


@pytest.fixture(params=["password", "password and TLS"])
async def secured(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    tls = tls_files(tmp_path) if "TLS" in request.param else None
    server = RedisServer(REDIS_SERVER, tmp_path, password=PASSWORD, tls=tls)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def degraded(gw: GatewayProcess) -> float:
    async with aiohttp.ClientSession() as s, s.get(gw.url + "/metrics") as r:
        text = await r.text()
    (value,) = re.findall(r"^llm_gateway_state_backend_degraded (\S+)$", text, re.MULTILINE)
    return float(value)


async def test_the_state_url_carries_the_password_and_the_ca(
    fake: FakeProvider, tmp_path: Path, secured: RedisServer
) -> None:
    """With the password (and the CA for TLS) in the URL, a priced request's spending
    reaches Redis and the gateway is not degraded; with a wrong password, Redis refuses
    it (WRONGPASS): the gateway serves on its own, degraded, and writes nothing."""
    files = policy_files(fake.url)
    for spec in files["platform.yaml"]["models"].values():
        spec["price"] = {"input": 1000, "output": 1000}
    files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = {"usd": 100, "per": "day"}
    root = write_policies(tmp_path / "policies", files)
    wrong = secured.url.replace(f":{PASSWORD}@", ":not-the-password@")
    redis = Redis.from_url(secured.url)
    started = []
    try:
        for url in (secured.url, wrong):
            gw = GatewayProcess(root, state_url=url, state_reconnect_s="0.1")
            started.append(await gw.start())
            client = gw.openai()
            fake.script("fake-model", [ONE_USD] + [FREE] * 50)
            await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]

            async def shared(gw: GatewayProcess = gw, client: openai.AsyncOpenAI = client) -> bool:
                # a loaded machine may time the first connection out at start: the next
                # request after the reconnect interval tries again
                await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
                return await degraded(gw) == 0 and bool(await redis.keys(SPEND))

            if url == secured.url:
                await eventually(shared, within=3, step=0.15, what="the spending in Redis")
            else:
                assert not await eventually(shared, within=0.5, step=0.15, fail=False)
                assert await degraded(gw) == 1
            [key] = await redis.keys(SPEND)
            spent = int(await redis.get(key))  # micro-dollars
            # the dollar once (each later request's prompt, reported as 0 tokens, is
            # estimated: about a cent each); the gateway with the wrong password, whose
            # first request cost a dollar too, wrote nothing
            assert 1_000_000 <= spent < 1_500_000
    finally:
        for gw in started:
            await gw.stop()
        await redis.aclose()
