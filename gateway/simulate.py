"""``llm-gateway simulate``: replay scripted upstream outcomes through the real engine.

The script is a comma list of outcomes, one per upstream attempt, in order::

    200                  success
    429 | 500 | 529 ...  an error with that status (a realistic body for the status)
    429:ra=3             ... with Retry-After: 3 (seconds)
    429:ms=250           ... with retry-after-ms: 250
    429:code=insufficient_quota   ... with that error code in the body
    timeout | reset      no response: a first-byte timeout, a reset connection

When the script runs out, further attempts succeed. The engine, the decision
function, backoff, budgets and fallback state are the ones the proxy runs; only
the clock is virtual (waits advance it instantly) and the upstream is the script.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from gateway.engine import Env, Outcome, Request, recover
from gateway.errors import Category
from gateway.observe.events import Events, RequestLog
from gateway.observe.metrics import Metrics
from gateway.policy.load import PolicyError, load_policy_dir
from gateway.policy.schema import Policy
from gateway.resilience.classify import classify_response, transport_failure
from gateway.resilience.decide import FIRST_BYTE_TIMEOUT, Progress, Retry
from gateway.resilience.failure import Failure
from gateway.state.memory import MemoryState

_MESSAGES = {
    429: ("rate_limit_exceeded", "Rate limit reached for requests"),
    500: ("server_error", "The server had an error while processing your request."),
    502: ("bad_gateway", "Bad gateway"),
    503: ("server_is_overloaded", "The server is overloaded, please try again later."),
    529: ("overloaded_error", "Overloaded"),
    401: ("invalid_api_key", "Incorrect API key provided"),
    400: ("invalid_request_error", "Invalid request"),
}


@dataclass(frozen=True, slots=True)
class Step:
    status: int  # 0 for transport failures
    headers: dict[str, str]
    body: bytes
    transport: Category | None = None
    label: str = ""


def parse_script(script: str) -> list[Step]:
    """``"429:ra=3,500,200"`` -> steps; raises ValueError with the offending item."""
    steps = []
    for item in (s.strip() for s in script.split(",")):
        if not item:
            continue
        head, _, opts = item.partition(":")
        if head in ("timeout", "reset"):
            cat = Category.timeout if head == "timeout" else Category.connection
            steps.append(Step(0, {}, b"", cat, head))
            continue
        if not head.isdigit() or not 100 <= int(head) <= 599:
            raise ValueError(f"script item {item!r}: expected a status, 'timeout' or 'reset'")
        status, headers = int(head), {}
        code, message = _MESSAGES.get(status, ("error", f"HTTP {status}"))
        for opt in filter(None, opts.split(";") if ";" in opts else opts.split(":")):
            key, _, value = opt.partition("=")
            if key == "ra":
                headers["retry-after"] = value
            elif key == "ms":
                headers["retry-after-ms"] = value
            elif key == "code":
                code = value
            else:
                raise ValueError(f"script item {item!r}: unknown option {key!r} (ra, ms, code)")
        body = orjson.dumps({"error": {"message": message, "type": code, "code": code}})
        steps.append(Step(status, headers, body, None, item))
    return steps


@dataclass(slots=True)
class Row:
    attempt: int
    at: float
    model: str
    outcome: str
    action: str = ""


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


class ScriptedAttempter:
    """Plays the script as the upstream; waits advance the virtual clock."""

    def __init__(self, steps: list[Step], policy: Policy, clock: VirtualClock) -> None:
        self.steps = list(steps)
        self.policy = policy
        self.clock = clock
        self.rows: list[Row] = []

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        if self.rows and not self.rows[-1].action:
            self.rows[-1].action = f"fallback -> {model}"
        step = self.steps.pop(0) if self.steps else Step(200, {}, b"{}", label="200")
        row = Row(progress.attempts, self.clock.now, model, step.label)
        self.rows.append(row)
        if step.transport is not None:
            f = transport_failure(step.transport, step.label)
            if step.label == "timeout":
                self.clock.now += self.policy.timeouts.first_byte
                f = Failure(Category.timeout, None, "first-byte timeout", code=FIRST_BYTE_TIMEOUT)
            row.outcome = f.category.value
            return Outcome(f, status=0)
        if step.status < 300:
            row.outcome, row.action = "ok", "answered"
            return Outcome(body=step.body)
        f = classify_response(
            step.status, step.headers, step.body, rules=self.policy.classify, now=self.clock.wall()
        )
        row.outcome = f"{step.label} {f.category.value}"
        return Outcome(f, step.status, step.body)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        kind = "turn retry" if decision.turn else "retry"
        self.rows[-1].action = f"{kind} in {seconds:.2f}s"
        self.clock.now += seconds


async def run(policy: Policy, route_id: str, team: str, model: str, script: str, seed: int) -> str:
    clock = VirtualClock()
    attempter = ScriptedAttempter(parse_script(script), policy, clock)
    env = Env(
        MemoryState(),
        Events(Metrics()),
        clock.monotonic,
        clock.wall,
        random.Random(seed),
    )
    body = {"model": model, "messages": [{"role": "user", "content": "simulated"}]}
    req = Request("openai", body, model, route_id, team, policy, policy.timeouts.total)
    log = RequestLog("simulated", 0.0)
    result = await recover(req, log, env, attempter)
    rows = attempter.rows
    if result.outcome.failure is not None:
        rows[-1].action = f"give up ({result.reason})"
    return render(rows, clock.now, result.outcome.failure is None)


def render(rows: Sequence[Row], total: float, ok: bool) -> str:
    lines = [f"{'attempt':>7}  {'t(s)':>8}  {'model':<20} {'outcome':<28} action"]
    for r in rows:
        lines.append(f"{r.attempt:>7}  {r.at:>8.2f}  {r.model:<20} {r.outcome:<28} {r.action}")
    verdict = "answered" if ok else "failed"
    lines.append(f"{verdict} after {len(rows)} attempt(s) in {total:.2f}s (virtual time)")
    return "\n".join(lines)


def _drop(_: Any, __: str, ___: Any) -> Any:
    raise structlog.DropEvent  # the timeline is the output; events would repeat it


def main(args: argparse.Namespace) -> int:
    import asyncio

    structlog.configure(processors=[_drop], logger_factory=structlog.ReturnLoggerFactory())
    try:
        policies = load_policy_dir(Path(args.policies))
    except PolicyError as e:
        print(str(e), file=sys.stderr)
        return 1
    if args.team not in policies.teams:
        print(f"unknown team {args.team!r}; teams: {', '.join(policies.teams)}", file=sys.stderr)
        return 1
    if args.model not in policies.models or not policies.model_allowed(args.team, args.model):
        print(
            f"team {args.team!r} may not use model {args.model!r}; its models: "
            f"{', '.join(policies.team_models(args.team))}",
            file=sys.stderr,
        )
        return 1
    route = policies.route(args.team, args.model, args.path)
    if route is None:
        print(
            f"no route of team {args.team!r} matches {args.model!r} on {args.path}", file=sys.stderr
        )
        return 1
    try:
        text = asyncio.run(
            run(route.policy, route.id, args.team, args.model, args.script, args.seed)
        )
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    print(f"team={args.team} route={route.id} policy={route.policy_name} model={args.model}")
    print(text)
    return 0
