"""``simulate`` equals the live path: random scripts and small policies, both ways.

Each example draws a script of upstream outcomes (429 with and without
``retry-after-ms``, 500, 529, 200, and for a stream a reset mid-stream, the
provider's error event (first or after some text), or another text where a
regeneration must repeat the one sent) and a small
policy (retries, turn retry, retry budget, a fallback model, what a broken stream
does), runs it through ``simulate`` and through one live gateway in front of the
scripted fake provider, and compares what both did: the attempts and the models
they went to, every decision event (retries with their waits, fallbacks, give-ups,
resumes and their reasons) and the outcome. Waits are jitter-free, so they agree
to the millisecond; each example gets a route of its own, so no state (budget,
fallback streaks) carries over from the one before.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import openai
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from gateway.simulate import Scenario, simulate
from gateway.testing import CutAfter, Error, ErrorEventAfter, FakeProvider, Success
from tests.harness import Harness, policy_files, write_policies

#: The decision events compared, and the fields of each that must agree.
DECISIONS = {
    "api_retry": ("model", "category", "wait_seconds"),
    "turn_retry": ("model", "category", "wait_seconds"),
    "fallback_used": ("model", "fallback_model", "reason"),
    "retry_budget_exhausted": ("model", "category"),
    "give_up": ("model", "reason", "category"),
    "stream_interrupted": ("category", "action", "reason"),
    "output_not_continued": ("reason", "n"),
}
UPSTREAM_NAME = {"gpt-test": "fake-model", "gpt-backup": "gpt-backup"}
MESSAGES = [{"role": "user", "content": "Tell me about retries."}]
CUT = "200:cut@12"  # simulate's reset mid-stream; live: the fake's CutAfter(2)
#: The provider's error event as the stream's first event, and after some text.
FIRST_ERROR, LATER_ERROR = "200:error@0", "200:error@12"
DIVERGE = "200:diverge"  # another text: a regeneration that does not repeat what was sent

outcome = st.sampled_from(["500", "529", "200", "429"]) | st.integers(5, 60).map(
    lambda ms: f"429:ms={ms}"
)


def small_policy(
    max_retries: int = 2,
    budget: dict[str, float] | None = None,
    turn_retries: int = 0,
    chain: tuple[str, ...] = (),
    on_midstream_failure: str = "error",
    max_resumes: int = 1,
) -> dict[str, Any]:
    """A policy with sub-second, jitter-free waits."""
    return {
        "retry": {
            "max_retries": max_retries,
            "rate_limit": {"base": "20ms", "cap": "60ms", "jitter": 0, "retry_after_jitter": 0},
            "transient": {"base": "5ms", "cap": "20ms", "jitter": 0},
            "budget": budget or {},
        },
        "turn_retry": {"max": turn_retries, "wait": "10ms"},
        "fallback": {"chain": list(chain)},
        "stream": {"on_midstream_failure": on_midstream_failure, "max_resumes": max_resumes},
    }


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], list[str], bool]:
    stream = draw(st.booleans())
    items = (
        outcome | st.sampled_from([CUT, FIRST_ERROR, LATER_ERROR, DIVERGE]) if stream else outcome
    )
    script = draw(st.lists(items, min_size=2, max_size=6))
    policy = small_policy(
        max_retries=draw(st.integers(0, 3)),
        budget=draw(
            st.sampled_from(
                [{}, {"ratio": 1.0, "min_per_second": 0}, {"ratio": 0.0, "min_per_second": 0}]
            )
        ),
        turn_retries=draw(st.integers(0, 1)),
        chain=draw(st.sampled_from([(), ("gpt-backup",)])),
        on_midstream_failure=draw(st.sampled_from(["error", "continue"])),
        max_resumes=draw(st.integers(0, 2)),
    )
    return policy, script, stream


def _live_steps(script: list[str]) -> list[Any]:
    steps: list[Any] = []
    for item in script:
        if item == "200":
            break  # the first success answers; nothing after it is asked for
        if item == CUT:
            steps.append(CutAfter(2))
        elif item == FIRST_ERROR:
            steps.append(ErrorEventAfter(0))
        elif item == LATER_ERROR:
            steps.append(ErrorEventAfter(2))
        elif item == DIVERGE:
            steps.append(Success(text="Another answer altogether."))
        elif item.startswith("429:ms="):
            steps.append(Error.openai_rate_limit(retry_after_ms=int(item[7:])))
        elif item == "429":
            steps.append(Error.openai_rate_limit())
        else:
            steps.append(Error.openai_server(int(item)))
    return steps


def _decisions(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for e in events:
        fields = DECISIONS.get(e["event"])
        if fields is not None:
            values = (round(e[f], 3) if f == "wait_seconds" else e.get(f) for f in fields)
            out.append((e["event"], *values))
    return out


async def _live(gw: Harness, stream: bool) -> tuple[list[tuple[Any, ...]], int, bool]:
    client = gw.async_openai()
    answered = True
    with capture_logs() as events:
        try:
            if stream:
                chunks = await client.chat.completions.create(
                    model="gpt-test",
                    messages=MESSAGES,  # type: ignore[arg-type]
                    stream=True,
                )
                async for _ in chunks:
                    pass
            else:
                await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
        except openai.APIError:  # an error answer, or the stream's error event
            answered = False
    done = next(e for e in events if e["event"] == "request_completed")
    return _decisions(events), done["attempts"], answered


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
@example(scenario=(small_policy(on_midstream_failure="continue"), [CUT, "500", "200"], True))
@example(scenario=(small_policy(), [FIRST_ERROR, LATER_ERROR], True))
@example(scenario=(small_policy(on_midstream_failure="continue"), [CUT, DIVERGE], True))
@example(scenario=(small_policy(budget={"ratio": 1.0, "min_per_second": 0}), ["500", "200"], False))
async def test_simulate_and_the_live_gateway_agree(
    make_gateway: Callable[..., Awaitable[Harness]],
    fake: FakeProvider,
    scenario: tuple[dict[str, Any], list[str], bool],
) -> None:
    """Random scripts and policies: the same attempts, models, decisions, waits and outcome."""
    gw = _started.get(id(fake))
    if gw is None:  # one gateway for every example of the run
        gw = _started[id(fake)] = await make_gateway()
    fake.reply["fake-model"] = fake.reply["gpt-backup"] = "word " * 40
    policy, script, stream = scenario
    files = policy_files(fake.url, policy)
    name = f"parity-{next(_routes)}"  # a route of its own: fresh budget and fallback state
    files["teams/team-a.yaml"]["teams"]["team-a"]["routes"][0]["name"] = name
    write_policies(gw.policy_dir, files)
    assert gw.gateway.reload("test")
    route = gw.gateway.policies.route("team-a", "gpt-test", "/v1/chat/completions")
    assert route is not None and route.id == name

    fake.reset()
    fake.script(None, _live_steps(script))
    live, live_attempts, live_answered = await _live(gw, stream)
    live_models = [r.model for r in fake.requests]

    with capture_logs() as events:
        sim = await simulate(
            Scenario(
                route.policy, route.id, "team-a", "gpt-test", ",".join(script), 0, stream=stream
            )
        )
    sim_models = [UPSTREAM_NAME[m] for m in sim.models]
    sim_answered = sim.timeline.splitlines()[-1].startswith("answered")

    assert _decisions(events) == live
    assert (sim.attempts, sim_models) == (live_attempts, live_models)
    assert sim_answered == live_answered


_started: dict[int, Harness] = {}  # the run's gateway, by its fake provider
_routes = itertools.count()
