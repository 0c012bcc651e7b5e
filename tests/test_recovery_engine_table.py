"""The engine's loop, case by case, in memory: a table of what each attempt answers.

Each case gives the policy, what every attempt on each model answers (in order), and
what the loop must do: the attempts it makes (model and deployment), the waits it asks
for, the events it reports, and how it ends. The attempter is a scripted fake, the
clock virtual, the random seeded, the state the real in-process backend; the events
go to a recorder plugged in where the live emitter goes (``Env.events``). No sockets,
no real sleeping. The fallback state across requests is in tests/test_engine.py, the
deadline's edges in tests/resilience/test_deadline_boundary.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway.errors import Category
from gateway.formats import CHAT
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Outcome, Request, Result
from gateway.resilience.classify import classify_response, transport_failure
from gateway.resilience.decide import Progress, Retry
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed
from gateway.simulate import VirtualClock
from gateway.state.memory import MemoryState

pytestmark = pytest.mark.fast

FIRST_BYTE = 10.0  # seconds a "timeout" answer takes (the policy's first-byte timeout)
PTL = orjson.dumps(
    {"error": {"message": "This model's maximum context length is 8192 tokens. However, your "
               "messages resulted in 9000 tokens.", "type": "invalid_request_error",
               "code": "context_length_exceeded"}}
)  # fmt: skip
BAD = b'{"error": {"message": "bad field", "type": "invalid_request_error"}}'
DOWN = b'{"error": {"message": "boom", "type": "server_error"}}'

#: What one attempt answers: 200; a status (with headers); "ptl" (the prompt is too
#: long); "timeout" (no first byte within FIRST_BYTE seconds).
Answer = int | tuple[int, dict[str, str]] | str


class Table:
    """The attempter: each attempt on a model takes that model's next answer (then 200)."""

    def __init__(
        self, clock: VirtualClock, answers: dict[str, list[Answer]], two: set[str]
    ) -> None:
        self.clock = clock
        self.answers = {m: list(a) for m, a in answers.items()}
        self.two = two  # the models with two deployments
        self.calls: list[tuple[str, int]] = []  # (model, deployment) of each attempt
        self.bodies: list[dict[str, Any]] = []
        self.waits: list[float] = []

    def deployments(self, model: str) -> tuple[list[Deployed], str]:
        names = ("d0", "d1") if model in self.two else ("d0",)
        return [Deployed(n, "p", None, model) for n in names], "ordered"

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        self.calls.append((model, progress.deployment))
        self.bodies.append(body)
        todo = self.answers.get(model, [])
        answer = todo.pop(0) if todo else 200
        if answer == 200:
            return Outcome(body=b'{"choices": []}')
        if answer == "timeout":
            self.clock.now += FIRST_BYTE
            return Outcome(transport_failure(Category.timeout, "first-byte timeout"), status=0)
        status, headers, raw = 500, {}, DOWN
        if answer == "ptl":
            status, raw = 400, PTL
        elif isinstance(answer, tuple):
            status, headers = answer
        elif isinstance(answer, int):
            status, raw = answer, BAD if answer < 500 else DOWN
        f = classify_response(status, headers, raw, now=self.clock.wall())
        return Outcome(f, status, raw)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        self.waits.append(seconds)
        self.clock.now += seconds


class Seen:
    """The events the loop reports, by name, in order (the failure of a give-up kept)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.given_up: Failure | None = None

    def __getattr__(self, name: str) -> Any:
        def note(*args: Any, **kwargs: Any) -> None:
            self.names.append(name)
            if name == "gave_up":
                self.given_up = args[3]

        return note


def conversation(turns: int) -> dict[str, Any]:
    """A request whose middle compaction can drop: ``turns`` question-answer pairs."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i} " + "x" * 400})
        messages.append({"role": "assistant", "content": f"answer {i} " + "y" * 400})
    messages.append({"role": "user", "content": "and now?"})
    return {"model": "a", "messages": messages}


@dataclass(frozen=True)
class Case:
    answers: dict[str, list[Answer]]
    attempts: list[tuple[str, int]]  # (model, deployment), in order
    waits: list[float]
    events: list[str]
    reason: str = ""  # "": answered; else the give-up's reason
    category: str | None = None  # the failure the give-up reports
    policy: dict[str, Any] = field(default_factory=dict)
    deadline: float = 1e9  # monotonic, on the virtual clock (starting at 0)
    two: frozenset[str] = frozenset()  # the models with two deployments
    recovery: tuple[str, ...] = ()  # what the access log says was used


NO_JITTER = {"transient": {"base": 1, "jitter": 0}, "rate_limit": {"retry_after_jitter": 0}}
CHAIN = {"chain": ["b"], "after_consecutive_server_errors": 3, "cooldown": 60}

CASES = {
    "success first try": Case({"a": [200]}, [("a", 0)], [], []),
    "429 with retry-after, then success": Case(
        {"a": [(429, {"retry-after": "2"}), 200]},
        [("a", 0), ("a", 0)],
        [2.0],
        ["api_retry"],
        policy={"retry": NO_JITTER},
        recovery=("retry",),
    ),
    "5xx storm moves to the fallback model after 3": Case(
        {"a": [500, 502, 503]},
        [("a", 0), ("a", 0), ("a", 0), ("b", 0)],
        [1.0, 2.0],
        ["api_retry", "api_retry", "fallback_model_activated", "fallback"],
        policy={"retry": NO_JITTER, "fallback": CHAIN},
        recovery=("retry", "fallback"),
    ),
    "5xx storm without a chain: retries exhausted": Case(
        {"a": [500, 500, 500]},
        [("a", 0), ("a", 0), ("a", 0)],
        [1.0, 2.0],
        ["api_retry", "api_retry", "gave_up"],
        reason="retries_exhausted",
        category="server_error",
        policy={"retry": {**NO_JITTER, "max_retries": 2}, "turn_retry": {"max": 0}},
        recovery=("retry",),
    ),
    "retries exhausted, then the turn retry answers": Case(
        {"a": [500, 500, 500]},
        [("a", 0), ("a", 0), ("a", 0), ("a", 0)],
        [1.0, 2.0, 10.0],
        ["api_retry", "api_retry", "turn_retry"],
        policy={"retry": {**NO_JITTER, "max_retries": 2}},
        recovery=("retry",),
    ),
    "prompt too long: one compaction step, then success": Case(
        {"a": ["ptl", 200]},
        [("a", 0), ("a", 0)],
        [],
        ["prompt_too_long_recovery"],
        policy={"compaction": {"strategies": ["drop_middle"], "keep_recent": 2}},
        recovery=("compaction",),
    ),
    "prompt too long, nothing to compact: given up": Case(
        {"a": ["ptl"]},
        [("a", 0)],
        [],
        ["prompt_too_long_recovery", "gave_up"],
        reason="prompt_too_long",
        category="prompt_too_long",
        policy={"compaction": {"strategies": ["drop_middle"], "keep_recent": 100}},
    ),
    "a retry-after past the deadline: given up as a rate limit": Case(
        {"a": [(429, {"retry-after": "30"})]},
        [("a", 0)],
        [],
        ["gave_up"],
        reason="deadline",
        category="rate_limit",
        deadline=20.0,
    ),
    "timeouts until the deadline: given up as a timeout": Case(
        {"a": ["timeout", "timeout", "timeout"]},
        [("a", 0), ("a", 0), ("a", 0)],  # at 0, 11 and 23 s: each times out 10 s later
        [1.0, 2.0],
        ["api_retry", "api_retry", "gave_up"],
        reason="deadline",
        category="timeout",
        policy={"retry": NO_JITTER},
        deadline=25.0,
        recovery=("retry",),
    ),
    "retry budget exhausted": Case(
        {"a": [500]},
        [("a", 0)],
        [],
        ["retry_budget_exhausted", "gave_up"],
        reason="retry_budget_exhausted",
        category="server_error",
        policy={"retry": {"budget": {"ratio": 0, "min_per_second": 0}}},
    ),
    "a 400 is not retried": Case(
        {"a": [400]},
        [("a", 0)],
        [],
        ["gave_up"],
        reason="not_retryable",
        category="invalid_request",
    ),
    "a 429 on one deployment: its sibling takes the retry at once": Case(
        {"a": [(429, {"retry-after": "30"})]},
        [("a", 0), ("a", 1)],
        [0.0],
        ["deployment_attempt", "deployment_changed", "api_retry", "deployment_attempt"],
        two=frozenset({"a"}),
        recovery=("retry",),
    ),
    "every deployment out: a wait for the first back, then it answers": Case(
        {"a": [(429, {"retry-after": "30"}), (429, {"retry-after": "20"})]},
        [("a", 0), ("a", 1), ("a", 1)],
        [0.0, 20.0],
        [
            *("deployment_attempt", "deployment_changed", "api_retry"),  # d0 out: d1 at once
            *("deployment_attempt", "deployment_changed", "api_retry"),  # both out: wait 20 s
            *("deployment_attempt", "deployment_changed"),  # d1 answers: back in service
        ],
        policy={"retry": NO_JITTER},
        two=frozenset({"a"}),
        recovery=("retry",),
    ),
    "a prompt too long for every step: moved to the larger model": Case(
        {"a": ["ptl"]},
        [("a", 0), ("big", 0)],
        [],
        ["prompt_too_long_recovery", "fallback"],
        policy={
            "compaction": {"strategies": ["drop_middle"], "keep_recent": 100},
            "fallback": {"on_prompt_too_long": ["big"]},
        },
        recovery=("fallback",),
    ),
}


async def run_case(case: Case) -> tuple[Result, Table, Seen, RequestLog, Request]:
    clock, seen = VirtualClock(), Seen()
    table = Table(clock, case.answers, set(case.two))
    env = Env(MemoryState(), seen, clock.monotonic, clock.wall, random.Random(0))  # type: ignore[arg-type]
    policy = Policy.model_validate(case.policy)
    body = conversation(12)
    req = Request(CHAT, body, "a", "route", "team", policy, case.deadline, 8192)
    log = RequestLog("r", 0.0)
    return await recover(req, log, env, table), table, seen, log, req


@pytest.mark.parametrize("name", list(CASES))
async def test_engine_table(name: str) -> None:
    case = CASES[name]
    result, table, seen, log, req = await run_case(case)
    assert table.calls == case.attempts
    assert table.waits == case.waits
    assert seen.names == case.events
    assert result.reason == case.reason
    assert (result.outcome.failure is None) == (not case.reason)
    assert (seen.given_up and seen.given_up.category.value) == case.category
    assert result.progress.attempts == log.attempts == len(case.attempts)
    assert log.answered_by == table.calls[-1][0]
    assert tuple(log.recovery) == case.recovery
    if "compaction" in case.recovery:  # the second attempt sent the compacted body
        assert result.body is table.bodies[-1] is not req.body
        assert len(result.body["messages"]) < len(req.body["messages"])
    else:
        assert all(b is req.body for b in table.bodies)
