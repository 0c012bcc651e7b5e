"""Sessions on the wire (docs/caching.md): one model on three deployments with
``affinity: session`` (the default for ``balance: weighted``), driven by the official SDKs.

Each deployment carries its own key, so the key the fake provider saw names the deployment
that answered. A session, however it is named (the gateway's header, Claude Code's, the
Codex CLI's, ``prompt_cache_key``, or nothing: the conversation's start), keeps its turns
on one deployment; sessions spread by weight; a 429 moves a session to its next-ranked
deployment at once and it returns when the first serves again; teams are independent;
two gateway processes choose alike with no shared state.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from structlog.testing import capture_logs

from gateway.resilience import affinity
from gateway.routing.policyset import hash_key
from gateway.testing import Error, FakeProvider
from tests.harness import CLIENT_KEY, FAST_POLICY, Harness, write_policies
from tests.process import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"AFF_KEY_1": "key-1", "AFF_KEY_2": "key-2", "AFF_KEY_3": "key-3"}
NAMES = ["one", "two", "three"]  # the deployments, by their providers' names
KEY_OF = dict(zip(NAMES, KEYS.values(), strict=True))
TEAM_B_KEY = "team-b-client-key"

Make = Callable[..., Awaitable[Harness]]


def files(
    fake_url: str, model: dict[str, Any] | None = None, policy: dict[str, Any] | None = None
) -> dict[str, Any]:
    deployments = [{"provider": n, "weight": 1} for n in NAMES]
    routes = [{"match": {"model": "*"}, "policy": "fast"}]
    providers = {n: {"api": "openai", "base_url": fake_url + "/v1", "api_key_env": env}
                 for n, env in zip(NAMES, KEYS, strict=True)}  # fmt: skip
    providers["solo"] = {"api": "openai", "base_url": fake_url + "/v1", "api_key_env": "AFF_SOLO"}
    models = {
        "gpt-agent": {"deployments": deployments, **(model or {})},
        "gpt-solo": {"provider": "solo"},
    }
    teams = {
        "team-a": {"keys": [hash_key(CLIENT_KEY)], "models": ["*"], "routes": routes},
        "team-b": {"keys": [hash_key(TEAM_B_KEY)], "models": ["*"], "routes": routes},
    }
    platform = {
        "providers": providers,
        "models": models,
        "policies": {"fast": {**FAST_POLICY, **(policy or {})}},
    }
    return {"platform.yaml": platform, "teams/a.yaml": {"teams": teams}}


@pytest.fixture
def make(
    fake: FakeProvider, gateway_of: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Make:
    for k, v in {**KEYS, "AFF_SOLO": "key-solo"}.items():
        monkeypatch.setenv(k, v)

    async def start(
        model: dict[str, Any] | None = None, policy: dict[str, Any] | None = None
    ) -> Harness:
        h: Harness = await gateway_of(files(fake.url, model, policy))
        return h

    return start


def keys(fake: FakeProvider) -> list[str]:
    return [r.key or "" for r in fake.requests]


def first_choice(team: str, session: str) -> str:
    """The key of the deployment ``team``'s ``session`` ranks first."""
    order = affinity.ranked(affinity.digest(team, session), NAMES, [1, 1, 1])
    return KEY_OF[NAMES[order[0]]]


def ranking(team: str, session: str) -> list[str]:
    order = affinity.ranked(affinity.digest(team, session), NAMES, [1, 1, 1])
    return [KEY_OF[NAMES[i]] for i in order]


async def chat_turns(gw: Harness, turns: int, **kw: Any) -> None:
    """An agent's turns on chat: the transcript grows by a question and an answer."""
    client = gw.async_openai()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"step {n}"})
        reply = await client.chat.completions.create(model="gpt-agent", messages=messages, **kw)  # type: ignore[call-overload]
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})


async def test_claude_codes_header_keeps_a_session_on_one_deployment(
    make: Make, fake: FakeProvider
) -> None:
    """The Anthropic SDK as Claude Code calls: ``x-claude-code-session-id`` on every turn,
    a transcript that grows (translated to the deployments' chat)."""
    gw = await make()
    seen: set[str] = set()
    for session in ("c1710eb4-4ed7-4bbc-b436-04fa057d16c6", "0b6a58a1-0c07-4f6e-9d0e-3c7e0d5a0c11",
                    "8f0e3c52-5d3b-4b0e-a1c2-77d1f0a9e2b3"):  # fmt: skip
        fake.requests.clear()
        client = gw.async_anthropic(default_headers={"x-claude-code-session-id": session})
        messages: list[dict[str, Any]] = []
        for n in range(20):
            messages.append({"role": "user", "content": f"step {n}"})
            reply = await client.messages.create(
                model="gpt-agent", max_tokens=64, system="You are Claude Code.", messages=messages
            )
            messages.append({"role": "assistant", "content": reply.content[0].text})  # type: ignore[union-attr]
        assert set(keys(fake)) == {first_choice("team-a", session)}
        seen |= set(keys(fake))
    assert len(seen) > 1  # the sessions are not all on one deployment: each has its own


async def test_codex_session_header_keeps_a_session_on_one_deployment(
    make: Make, fake: FakeProvider
) -> None:
    """The OpenAI SDK on Responses with Codex's ``session-id`` header."""
    gw = await make()
    session = "01a250ae-4c7f-7572-97d8-61e8377c00ef"
    client = gw.async_openai(default_headers={"session-id": session})
    history: list[Any] = []
    for n in range(20):
        history.append({"role": "user", "content": f"step {n}"})
        reply = await client.responses.create(model="gpt-agent", input=history)
        history.append({"role": "assistant", "content": reply.output_text})
    assert len(fake.requests) == 20
    assert set(keys(fake)) == {first_choice("team-a", session)}


async def test_prompt_cache_key_keeps_a_session_on_one_deployment(
    make: Make, fake: FakeProvider
) -> None:
    gw = await make()
    await chat_turns(gw, 20, prompt_cache_key="agent-7")
    assert set(keys(fake)) == {first_choice("team-a", "agent-7")}


async def test_a_conversation_without_an_id_keeps_its_deployment(
    make: Make, fake: FakeProvider
) -> None:
    """No session named: the conversation's stable start (system, first user turn) is
    the session, the same on every turn of it."""
    gw = await make()
    await chat_turns(gw, 20)
    assert len(fake.requests) == 20 and len(set(keys(fake))) == 1


async def test_sixty_sessions_spread_over_the_deployments(make: Make, fake: FakeProvider) -> None:
    gw = await make()
    client = gw.async_openai()
    for i in range(60):
        await client.chat.completions.create(
            model="gpt-agent", messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-gateway-session": f"session-{i}"},
        )  # fmt: skip
    counts = Counter(keys(fake))
    assert sum(counts.values()) == 60
    assert all(8 <= counts[k] <= 32 for k in KEYS.values()), counts  # about 20 each
    assert counts == Counter(first_choice("team-a", f"session-{i}") for i in range(60))


async def test_a_429_moves_the_session_to_its_next_and_it_returns(
    make: Make, fake: FakeProvider
) -> None:
    """A rate limit on the session's deployment: the same request goes to the session's
    second deployment at once; the session stays there while the first cools down, and
    returns to the first (where its cache is) once it serves again."""
    gw = await make()
    session = "agent-session-429"
    first, second, _ = ranking("team-a", session)
    client = gw.async_openai(default_headers={"x-gateway-session": session})

    async def turn() -> dict[str, str]:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-agent", messages=[{"role": "user", "content": "hi"}]
        )
        raw.parse()
        return dict(raw.headers)

    fake.push(Error.openai_rate_limit(retry_after=1), key=first)
    headers = await turn()
    assert keys(fake) == [first, second] and headers["x-gateway-attempts"] == "2"
    fake.requests.clear()
    await turn()
    assert keys(fake) == [second]  # the first is cooling down: the session's second
    await asyncio.sleep(1.1)
    fake.requests.clear()
    await turn()
    assert keys(fake) == [first]  # back on the first


async def test_a_fallback_model_is_chosen_by_the_same_session(
    make: Make, fake: FakeProvider
) -> None:
    """The route falls back from a one-deployment model to the three-deployment one: the
    fallback's deployment is each session's own first."""
    policy = {"fallback": {"chain": ["gpt-agent"], "after_consecutive_server_errors": 1,
                           "cooldown": "30s"}, "retry": {"max_retries": 0}}  # fmt: skip
    gw = await make(policy=policy)
    client = gw.async_openai()
    fake.push(Error.openai_server(500), key="key-solo")
    for i in range(6):
        fake.requests.clear()
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-solo", messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-gateway-session": f"fb-{i}"},
        )  # fmt: skip
        raw.parse()
        assert raw.headers["x-gateway-model"] == "gpt-agent"
        assert keys(fake)[-1] == first_choice("team-a", f"fb-{i}")


async def test_two_teams_with_the_same_session_value_are_independent(
    make: Make, fake: FakeProvider
) -> None:
    """The same ``x-gateway-session`` from two teams: each lands by its own ranking, and
    the access log names the two by different digests."""
    gw = await make()
    value = next(f"shared-{i}" for i in range(100)
                 if first_choice("team-a", f"shared-{i}") != first_choice("team-b", f"shared-{i}"))  # fmt: skip
    a = gw.async_openai(default_headers={"x-gateway-session": value})
    b = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=TEAM_B_KEY, max_retries=0,
                           default_headers={"x-gateway-session": value})  # fmt: skip
    with capture_logs() as events:
        for client in (a, b, a, b):
            await client.chat.completions.create(
                model="gpt-agent", messages=[{"role": "user", "content": "hi"}]
            )
    await b.close()
    want_a, want_b = first_choice("team-a", value), first_choice("team-b", value)
    assert keys(fake) == [want_a, want_b, want_a, want_b]
    done = [e for e in events if e["event"] == "request_completed"]
    sessions = {e["team"]: e["session"] for e in done}
    assert sessions["team-a"] != sessions["team-b"]
    assert value not in str(events)  # never the raw value
    assert {e["deployment"] for e in done} == {
        NAMES[list(KEYS.values()).index(want_a)],
        NAMES[list(KEYS.values()).index(want_b)],
    }


async def test_affinity_none_draws_every_request(make: Make, fake: FakeProvider) -> None:
    gw = await make({"affinity": "none"})
    await chat_turns(gw, 30, prompt_cache_key="one-session")
    assert len(set(keys(fake))) > 1  # 30 draws over three: all on one has p = 3^-29


async def test_two_gateway_processes_choose_the_same_deployment(
    fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes, no Redis: the same session lands on the same deployment."""
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    root = write_policies(tmp_path / "policies", files(fake.url))
    procs = [GatewayProcess(root) for _ in range(2)]
    for gp in procs:
        gp.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
    try:
        for gp in procs:
            await gp.start()
        per_process: list[list[str]] = []
        for gp in procs:
            fake.requests.clear()
            client = gp.openai()
            for i in range(12):
                await client.chat.completions.create(
                    model="gpt-agent", messages=[{"role": "user", "content": f"task {i}"}],
                    extra_headers={"x-claude-code-session-id": f"s-{i}"},
                )  # fmt: skip
            per_process.append(keys(fake))
    finally:
        for gp in procs:
            await gp.stop()
    assert per_process[0] == per_process[1]
    assert per_process[0] == [first_choice("team-a", f"s-{i}") for i in range(12)]


async def test_admin_deployments_shows_each_deployments_cached_share(
    fake: FakeProvider, gateway_of: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions kept on their deployments read their prompts from its cache: per
    deployment, /admin/deployments shows the prompt tokens, the reads and writes, and the
    share read, as the access log and the fake provider counted them."""
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    gw: Harness = await gateway_of(files(fake.url), admin_key="cache-admin-key")
    long = "An agent's system prompt and tools, resent on every turn of its session. " * 80
    client = gw.async_openai()
    for session in ("s-1", "s-2", "s-3", "s-4"):
        messages: list[dict[str, Any]] = [{"role": "system", "content": long}]
        for n in range(5):
            messages.append({"role": "user", "content": f"step {n}"})
            reply = await client.chat.completions.create(
                model="gpt-agent", messages=messages,  # type: ignore[arg-type]
                extra_headers={"x-gateway-session": session},
            )  # fmt: skip
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    admin = {"authorization": "Bearer cache-admin-key"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/deployments", headers=admin) as r,
    ):
        body = await r.json()
    rows = {row["deployment"]: row for row in body["models"]["gpt-agent"]["deployments"]}
    served = Counter(r.key for r in fake.requests)
    for name, key in KEY_OF.items():
        mine = [r for r in fake.requests if r.key == key]
        if not served[key]:
            assert "cache" not in rows[name]
            continue
        cache = rows[name]["cache"]
        assert cache["cache_read_tokens"] == sum(r.cache_read for r in mine) > 0
        assert cache["cache_write_tokens"] == 0  # OpenAI reports no writes
        assert cache["minutes"] == 5
        assert cache["cached_share"] == round(
            cache["cache_read_tokens"] / cache["prompt_tokens"], 4
        )
        assert cache["cached_share"] > 0.5  # four of five turns read the long prefix
