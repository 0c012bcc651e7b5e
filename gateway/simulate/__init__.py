"""``llm-gateway simulate``: replay scripted upstream outcomes through the real engine.

The script is a comma list of outcomes, one per upstream attempt, in order::

    200                  success
    429 | 500 | 529 ...  an error with that status (a realistic body for the status)
    429:ra=3             ... with Retry-After: 3 (seconds)
    429:ms=250           ... with retry-after-ms: 250
    429:code=insufficient_quota   ... with that error code in the body
    timeout | reset      no response: a first-byte timeout, a reset connection
    200:length           an answer cut at the output token limit (continued by policy)
    200:cut@N, 200:stall@N, 200:badchunk@N, 200:error@N
                         a stream that resets or goes quiet after N characters,
                         carries an undecodable event at chunk N, or the provider's
                         error event after N characters (``error@0``: as its first
                         event, a failed attempt) (``--stream``; any of these implies
                         it): see :mod:`gateway.simulate.stream`
    200:diverge          a regenerated stream that does not repeat what was sent

Each upstream call takes the next item, the summary call of the ``summarize``
compaction strategy included (it is shown as a ``-`` row under the attempt it
helps; a successful one answers with a canned summary). When the script runs
out, further calls succeed. The engine, the decision function, backoff, budgets,
fallback state and compaction are the ones the proxy runs; only the clock is
virtual (waits advance it instantly) and the upstream is the script.

The simulated request is one short user message, or with ``--conversation agent``
a coding agent's transcript (a system prompt, a task, eight tool calls with
6,000-character results, a last question) that compaction can shrink.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import structlog

from gateway.errors import GatewayError, PolicyError
from gateway.formats import CHAT, Format
from gateway.formats.endpoints import ENDPOINT_OF, Endpoint
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Model, Policy
from gateway.recovery.admission import prepare, request_for, resolve
from gateway.recovery.continuing import continue_answer, follow_stream
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env
from gateway.resilience import affinity
from gateway.routing.load import load_policy_dir
from gateway.routing.policyset import Deployed, PolicySet, ResolvedRoute
from gateway.simulate.attempter import (
    Row,
    ScriptedAttempter,
    TimelineRecorder,
    VirtualClock,
    agent_conversation,
)
from gateway.simulate.script import STREAM_FAULTS, Step, parse_script
from gateway.simulate.stream import ScriptedStream
from gateway.state.memory import MemoryState
from gateway.translate import convert

DeploymentsOf = Callable[[str], tuple[Sequence[Deployed], str]]
SummaryInfo = Callable[[str], tuple[Format, int | None]]

__all__ = [
    "Row",
    "Scenario",
    "ScriptedAttempter",
    "Step",
    "VirtualClock",
    "main",
    "parse_script",
    "run",
    "simulate",
]


def _no_prefill(model: str) -> bool:
    return False


@dataclass(slots=True)
class Scenario:
    """One simulated request: the route it takes, what it asks, the upstream's script,
    and what the policy set says of the models it may reach.

    ``deployments`` gives a script per deployment name (the others take the shared
    ``script``); ``deployments_of`` says which deployments a model has (default one);
    ``client`` is the format of the endpoint called (:mod:`gateway.formats`): an attempt
    on a model of another format shows as translated; ``context_window`` is the model's
    (proactive compaction), ``client_timeout`` the client's own timeout header (the
    deadline), ``summary_info`` the format and window of a model the ``summarize`` step
    asks (default: chat completions, no window), ``fields`` more fields of the request
    body (in the client's format), ``prefill_of`` whether a model continues a final
    assistant message."""

    policy: Policy
    route_id: str
    team: str
    model: str
    script: str
    seed: int = 0
    conversation: str = "short"  # or "agent": a coding agent's transcript
    _: KW_ONLY
    stream: bool = False
    prefill_of: Callable[[str], bool] = _no_prefill
    deployments: Mapping[str, str] = field(default_factory=dict)
    deployments_of: DeploymentsOf | None = None
    client: Format = CHAT
    context_window: int | None = None
    client_timeout: float | None = None
    summary_info: SummaryInfo | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    session: str | None = None  # the client's session, as its x-gateway-session header


@dataclass(slots=True)
class Simulation:
    timeline: str
    decisions: list[tuple[str, str]]  # after the first byte (see TimelineRecorder)
    attempts: int
    recovery: list[str]
    models: list[str]  # the public model each attempt went to, in order


async def run(scenario: Scenario) -> str:
    """The timeline of one simulated request (see :func:`simulate`)."""
    return (await simulate(scenario)).timeline


async def simulate(s: Scenario) -> Simulation:
    """Run the script through the real loops: ``recover`` before the first byte, then
    ``continue_answer`` (JSON) or ``follow_stream`` (a stream) after it.

    The loops get simulate's side through their declared seams
    (:mod:`gateway.recovery.seams`): the scripted attempter, the virtual clock, a seeded
    random and the timeline recorder as the Env's events. Before the first attempt the
    request goes through :mod:`gateway.recovery.admission` as a live one does."""
    clock = VirtualClock()
    attempter = _attempter(s, clock)
    events = TimelineRecorder(attempter, Events(Metrics()))
    env = Env(MemoryState(), events, clock.monotonic, clock.wall, random.Random(s.seed))
    log = RequestLog("simulated", 0.0)
    log.team, log.route, log.model = s.team, s.route_id, s.model
    headers = {} if s.client_timeout is None else {"x-gateway-timeout": str(s.client_timeout)}
    if s.session is not None:
        headers["x-gateway-session"] = s.session
    route = ResolvedRoute(s.route_id, s.team, s.policy)
    body = _body(s, attempter.stream)
    req = request_for(s.client, body, route, s.context_window, clock.now, headers)
    req = await prepare(req, log, env)
    result = await recover(req, log, env, attempter)
    out = result.outcome
    ok = out.failure is None
    if ok and attempter.stream:
        model = result.progress.model
        side = ScriptedStream(attempter, req, log, env, out.stream, model, s.prefill_of)
        ok = await follow_stream(side, req, log, env)
    elif ok:
        first = out.json()
        if first is not None:
            prefill = s.prefill_of(result.progress.model)
            await continue_answer(attempter, req, result, first, log, env, prefill=prefill)
    timeline = render(attempter.rows, clock.now, ok)
    if req.session is not None and s.deployments_of is not None:
        timeline = f"{session_order(req.session, s.model, s.deployments_of)}\n{timeline}"
    models = [r.asked for r in attempter.rows if r.attempt is not None]
    return Simulation(timeline, events.decisions, log.attempts, list(log.recovery), models)


def session_order(session: int, model: str, deployments_of: DeploymentsOf) -> str:
    """Why a session's attempts go where they go: its deployments of ``model`` in the
    session's order (gateway/resilience/affinity.py), the first that can serve taking each
    attempt."""
    found, rule = deployments_of(model)
    label = affinity.label(session)
    if len(found) < 2 or rule != "session":
        why = "one deployment" if len(found) < 2 else f"balance {rule}: not by session"
        return f"session {label}: {model} goes by {why}"
    names = [d.name for d in found]
    order = affinity.ranked(session, names, [d.weight for d in found])
    ranked = ", ".join(f"{model}@{names[i]}" for i in order)
    return f"session {label} ranks {ranked} (the first that can serve takes each attempt)"


def _attempter(s: Scenario, clock: VirtualClock) -> ScriptedAttempter:
    """The scripted upstream of ``s``; streaming when asked, or when a step is a stream's
    fault."""
    steps = parse_script(s.script)
    own = {name: parse_script(text) for name, text in s.deployments.items()}
    attempter = ScriptedAttempter(
        steps,
        s.policy,
        clock,
        per_deployment=own,
        deployments_of=s.deployments_of,
        client=s.client,
        summary_info=s.summary_info,
    )
    every = [*steps, *(step for script in own.values() for step in script)]
    attempter.stream = s.stream or any(step.fault in STREAM_FAULTS for step in every)
    return attempter


def _body(s: Scenario, stream: bool) -> dict[str, Any]:
    """The simulated request's body, in the client's format."""
    body: dict[str, Any] = {
        "model": s.model,
        "messages": [{"role": "user", "content": "simulated"}],
    }
    if s.conversation == "agent":
        body = agent_conversation(s.model)
    if s.client is not CHAT:  # the same conversation as the client's endpoint would carry it
        body, _ = convert.request(body, CHAT, s.client, max_output_tokens=None)
        body["model"] = s.model
    body.update(s.fields)
    if stream:
        body["stream"] = True
    return body


def render(rows: Sequence[Row], total: float, ok: bool) -> str:
    width = max([20, *(len(r.model) + 1 for r in rows)])
    lines = [f"{'attempt':>7}  {'t(s)':>8}  {'model':<{width}} {'outcome':<28} action"]
    for r in rows:
        n = "-" if r.attempt is None else r.attempt
        line = f"{n:>7}  {r.at:>8.2f}  {r.model:<{width}} {r.outcome:<28} {r.action}"
        lines.append(line.rstrip())
    verdict = "answered" if ok else "failed"
    attempts = sum(r.attempt is not None for r in rows)
    lines.append(f"{verdict} after {attempts} attempt(s) in {total:.2f}s (virtual time)")
    return "\n".join(lines)


def _drop(_: Any, __: str, ___: Any) -> Any:
    raise structlog.DropEvent  # the timeline is the output; events would repeat it


def _summary_info(policies: PolicySet, model: str) -> tuple[Format, int | None]:
    """What the live summary call of ``model`` speaks (the first format of its first
    deployment, as :meth:`gateway.live.attempter.HttpAttempter.model_info` answers), and the
    model's context window."""
    fmt = policies.deployments[model][0].fmts[0]
    return fmt, policies.models[model].context_window


def main(args: argparse.Namespace) -> int:
    import asyncio

    structlog.configure(processors=[_drop], logger_factory=structlog.ReturnLoggerFactory())
    try:
        policies = load_policy_dir(Path(args.policies))
    except PolicyError as e:
        print(str(e), file=sys.stderr)
        return 1
    found = _resolve(policies, args)
    if isinstance(found, int):
        return found
    spec, route, endpoint = found
    own = _pairs(args.deployment, "--deployment", "write NAME=SCRIPT", str, named=False)
    if own is None:
        return 2
    fields = _pairs(args.field, "--field", "write NAME=JSON, e.g. temperature=1.5", orjson.loads)
    if fields is None:
        return 2
    known = {d.name for deps in policies.deployments.values() for d in deps}
    if unknown := sorted(set(own) - known):
        print(
            f"unknown deployment {unknown[0]!r}; deployments: {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    scenario = Scenario(
        route.policy, route.id, args.team, args.model, args.script, args.seed, args.conversation,
        stream=args.stream,
        prefill_of=lambda m: policies.models[m].prefill,
        deployments=own,
        deployments_of=lambda m: (policies.deployments[m], policies.models[m].rule),
        client=endpoint.fmt if endpoint.continuable else CHAT,
        context_window=spec.context_window,
        client_timeout=args.timeout,
        summary_info=lambda m: _summary_info(policies, m),
        fields=fields,
        session=args.session,
    )  # fmt: skip
    try:
        text = asyncio.run(run(scenario))
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    print(f"team={args.team} route={route.id} policy={route.policy_name} model={args.model}")
    print(text)
    return 0


def _resolve(
    policies: PolicySet, args: argparse.Namespace
) -> tuple[Model, ResolvedRoute, Endpoint] | int:
    """The model, route and endpoint the command line names, checked as the live handler
    checks them (with its messages); else the exit status, the reason printed."""
    if args.team not in policies.teams:
        print(f"unknown team {args.team!r}; teams: {', '.join(policies.teams)}", file=sys.stderr)
        return 1
    endpoint = ENDPOINT_OF.get(args.path)
    if endpoint is None:
        print(
            f"unknown endpoint {args.path!r}; endpoints: {', '.join(ENDPOINT_OF)}", file=sys.stderr
        )
        return 1
    try:  # the live handler's checks, with its messages
        spec, route = resolve(
            policies, args.team, args.model, endpoint, args.path, RequestLog("simulated", 0.0)
        )
    except GatewayError as e:
        hint = f"; team {args.team!r} may use: {', '.join(policies.team_models(args.team))}"
        print(f"{e.status}: {e.message}{hint}", file=sys.stderr)
        return 1
    return spec, route, endpoint


def _pairs(
    given: Sequence[str] | None,
    option: str,
    hint: str,
    value: Callable[[str], Any],
    *,
    named: bool = True,
) -> dict[str, Any] | None:
    """``NAME=VALUE`` options as a dict, each value read by ``value``; None (the problem
    printed) when one is not of that form (``named``: with a name) or its value does not
    read."""
    pairs: dict[str, Any] = {}
    for text in given or ():
        name, sep, raw = text.partition("=")
        try:
            pairs[name] = value(raw)
        except ValueError:  # orjson's JSONDecodeError is one
            sep = ""
        if not sep or (named and not name):
            print(f"{option} {text!r}: {hint}", file=sys.stderr)
            return None
    return pairs
