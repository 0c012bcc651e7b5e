"""``simulate``'s upstream: the script played as answers on a virtual clock, and the
timeline of what the real loops did with them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import Category, GatewayError
from gateway.formats import CHAT, Format
from gateway.formats.endpoints import endpoint_of
from gateway.money.pricing import Price
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.recovery.admission import past_deadline, untranslatable
from gateway.recovery.seams import Outcome, RecoveryEvents
from gateway.resilience.classify import classify_response, transport_failure
from gateway.resilience.decide import FIRST_BYTE_TIMEOUT, Progress, Retry
from gateway.resilience.deployments import Transition
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed
from gateway.simulate.script import Step, json_answer
from gateway.simulate.shaped import error_event
from gateway.translate import convert


@dataclass(slots=True)
class Row:
    attempt: int | None  # None: the summary call of the summarize strategy
    at: float
    model: str  # as the timeline shows it: with the deployment, and the translation
    outcome: str
    action: str = ""
    asked: str = ""  # the public model the attempt went to


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


SUMMARY = (
    "(simulated summary) Read f0.py to f7.py; the retry test waits on the real clock "
    "in client.py:88. Open: make the backoff use the injected clock."
)


_OK = Step(200, {}, b"{}", label="200")


class ScriptedAttempter:
    """Plays the script as the upstream; waits advance the virtual clock."""

    def __init__(
        self,
        steps: list[Step],
        policy: Policy,
        clock: VirtualClock,
        *,
        per_deployment: Mapping[str, list[Step]] | None = None,
        deployments_of: Callable[[str], tuple[Sequence[Deployed], str]] | None = None,
        client: Format = CHAT,
        summary_info: Callable[[str], tuple[Format, int | None]] | None = None,
    ) -> None:
        self.steps = list(steps)
        #: The format and context window of a summary model (``model_info``).
        self.summary_info = summary_info
        #: The client's format (:mod:`gateway.formats`): an
        #: attempt on a deployment speaking another is translated, and shown so.
        self.client = client
        #: A script per deployment name (``--deployment NAME=SCRIPT``); others use ``steps``.
        self.per_deployment = {k: list(v) for k, v in (per_deployment or {}).items()}
        self.deployments_of = deployments_of
        self.policy = policy
        self.clock = clock
        self.rows: list[Row] = []
        self.last: Row | None = None  # the last attempt's row (not a summary call's)
        self.answered: list[Row] = []  # rows of attempts that answered (parts, streams)
        self.stream = False  # the simulated client asked for a stream
        self.attempts = 0

    def note(self, strategy: str, outcome: str, sizes: dict[str, Any]) -> None:
        """A compaction step, on the row of the attempt that asked for it."""
        if outcome == "proactive":  # before the first attempt: a row of its own
            what = (
                f"{strategy} ahead ({sizes['messages_before']}->{sizes['messages_after']}"
                f" messages, {sizes['tokens_before']}->{sizes['tokens_after']} tokens)"
            )
            self.rows.append(Row(None, self.clock.now, "-", "over the window", what))
            return
        if self.last is None or outcome not in ("applied", "failed"):
            return  # a skipped step changes nothing and is not shown
        if outcome == "failed":
            what = f"{strategy} failed ({sizes.get('error')})"
        else:
            what = (
                f"{strategy} ({sizes['messages_before']}->{sizes['messages_after']} messages,"
                f" {sizes['tokens_before']}->{sizes['tokens_after']} tokens)"
            )
        self.last.action = f"{self.last.action}; {what}" if self.last.action else what

    def deployments(self, model: str) -> tuple[Sequence[Deployed], str]:
        """The model's deployments from the policy set (``deployments_of``), else one."""
        if self.deployments_of is not None:
            return self.deployments_of(model)
        return (Deployed(model, "script", None, model),), "ordered"

    def _step(
        self, model: str, body: dict[str, Any], progress: Progress
    ) -> tuple[Step | Failure, str]:
        """The next step for the deployment the attempt goes to (its own script when it
        has one, else the shared one), and how the timeline names where it went; or the
        failure of an attempt that is not made (the deadline passed, a body the
        translators refuse), as the live attempter has it (:mod:`gateway.recovery.admission`)."""
        where = model
        found, _ = self.deployments(model)
        d = found[progress.deployment] if progress.deployment < len(found) else found[0]
        if len(found) > 1:
            where = f"{model}@{d.name}"
        if self.client not in d.fmts:  # translated (docs/translation.md)
            where += f" ({self.client.name}->{d.fmts[0].name})"
        if self.clock.now >= progress.deadline:
            return past_deadline(), where
        if self.client not in d.fmts:
            try:
                convert.check(body, self.client)
                convert.request(body, self.client, d.fmts[0], max_output_tokens=None)
            except GatewayError as e:
                return untranslatable(e), where
        if len(found) > 1:
            own = self.per_deployment.get(d.name)
            if own is not None:
                return (own.pop(0) if own else _OK), where
        return (self.steps.pop(0) if self.steps else _OK), where

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        last = self.last
        if last is not None and not last.action:
            last.action = f"fallback -> {model}"
        elif last is not None and last.asked != model:  # after a compaction step
            last.action += f"; fallback -> {model}"
        step, where = self._step(model, body, progress)
        self.attempts += 1  # across the request: follow-ups too (progress counts per recover)
        label = step.label if isinstance(step, Step) else f"not sent: {step.stage}"
        row = Row(self.attempts, self.clock.now, where, label, asked=model)
        self.rows.append(row)
        self.last = row
        if isinstance(step, Failure):
            return Outcome(step, status=step.status or 0)
        if step.transport is not None:
            f = transport_failure(step.transport, step.label)
            if step.label == "timeout":
                self.clock.now += self.policy.timeouts.first_byte
                f = Failure(
                    Category.timeout,
                    None,
                    "first-byte timeout",
                    code=FIRST_BYTE_TIMEOUT,
                    stage=FIRST_BYTE_TIMEOUT,
                )
            row.outcome = f.category.value
            return Outcome(f, status=0)
        if step.status < 300:
            self.answered.append(row)
            if self.stream and step.fault == "error" and step.at == 0:  # its first event
                ep = endpoint_of(self.client)
                raw, f = error_event(ep, self.policy, self.clock.wall())
                row.outcome = f"error event {f.category.value}"
                self.answered.pop()
                return Outcome(f, status=0, body=raw)
            if self.stream:
                row.outcome = "stream opened"
                return Outcome(stream=step)
            row.outcome = "ok, cut at the limit" if step.fault == "length" else "ok"
            row.action = "answered"
            answer = json_answer(step, len(self.answered))
            if self.client is not CHAT:  # in the client's format, as the attempter answers
                translated = convert.answer(orjson.loads(answer), CHAT, self.client, model)
                answer = orjson.dumps(translated)
            return Outcome(body=answer)
        f = classify_response(
            step.status, step.headers, step.body, rules=self.policy.classify, now=self.clock.wall()
        )
        row.outcome = f"{step.label} {f.category.value}"
        return Outcome(f, step.status, step.body)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        kind = "turn retry" if decision.turn else "retry"
        if self.last is not None:
            if decision.sibling:
                self.last.action = (
                    f"retry on another deployment in {seconds:.2f}s"
                    if seconds
                    else "retry on another deployment at once"
                )
            else:
                self.last.action = f"{kind} in {seconds:.2f}s"
        self.clock.now += seconds

    def price(self, model: str, deployment: int) -> Price | None:
        """Simulated answers are not priced."""
        return None

    def model_info(self, model: str, deployment: int) -> tuple[Format, int | None]:
        """The summary model's format and window, from the policy set when given."""
        return self.summary_info(model) if self.summary_info is not None else (CHAT, None)

    async def ask(
        self, model: str, fmt: Format, body: dict[str, Any], within: float, deployment: int
    ) -> Outcome:
        step = self.steps.pop(0) if self.steps else Step(200, {}, b"{}", label="200")
        row = Row(None, self.clock.now, model, f"summary {step.label}")
        self.rows.append(row)
        if step.transport is not None:
            if step.label == "timeout":
                self.clock.now += within
            f = transport_failure(step.transport, step.label)
            row.outcome = f"summary {f.category.value}"
            return Outcome(f, status=0)
        if step.status < 300:
            row.outcome, row.action = "summary ok", f"summary of {len(SUMMARY)} characters"
            answer: dict[str, Any] = {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": SUMMARY}}]
            }
            if fmt is not CHAT:  # the summary model's own format, as the live call gets it
                answer = convert.answer(answer, CHAT, fmt, model)
            return Outcome(body=orjson.dumps(answer))
        f = classify_response(
            step.status, step.headers, step.body, rules=self.policy.classify, now=self.clock.wall()
        )
        row.outcome = f"summary {step.label} {f.category.value}"
        return Outcome(f, step.status, step.body)


class TimelineRecorder:
    """Simulate's side of the loops' :class:`~gateway.recovery.seams.RecoveryEvents`:
    each event goes to ``live`` (the gateway's emitter: the same log lines and metrics as
    a live request's), then what the timeline shows of it is noted on its row. It wraps the
    live emitter and is passed where the live path passes it (``Env.events``): the live
    path's own events never pass through here."""

    def __init__(self, attempter: ScriptedAttempter, live: RecoveryEvents) -> None:
        self.attempter = attempter
        self.live = live
        #: What was decided after the first byte, in order: (continue, n), (resume, ""),
        #: (error_event, reason), (not_continued, reason); a test compares it with the
        #: live path's events.
        self.decisions: list[tuple[str, str]] = []

    # ---- noted on the timeline ----------------------------------------------------
    def prompt_too_long_recovery(
        self, r: RequestLog, model: str, strategy: str, outcome: str, **sizes: Any
    ) -> None:
        self.live.prompt_too_long_recovery(r, model, strategy, outcome, **sizes)
        self.attempter.note(strategy, outcome, sizes)

    def output_continuation(self, r: RequestLog, model: str, n: int) -> None:
        """Noted on the part that was cut (the answer before the continuation's)."""
        self.live.output_continuation(r, model, n)
        self.decisions.append(("continue", str(n)))
        rows = self.attempter.answered
        if len(rows) >= 2:
            rows[-2].action = f"continue (#{n})"

    def gave_up(self, r: RequestLog, model: str, reason: str, f: Failure) -> None:
        """Noted on the attempt it ends."""
        self.live.gave_up(r, model, reason, f)
        row = self.attempter.last
        if row is not None:
            row.action = join_action(row.action, f"give up ({reason})")

    def not_continued(self, r: RequestLog, model: str, reason: str, n: int) -> None:
        """Noted on the part that ends the answer, as the live path logs it."""
        self.live.not_continued(r, model, reason, n)
        self.decisions.append(("not_continued", reason))
        rows = self.attempter.answered
        if rows:
            rows[-1].action = join_action(rows[-1].action, f"not continued ({reason})")

    def stream_interrupted(
        self, r: RequestLog, model: str, f: Failure, action: str, *, reason: str = ""
    ) -> None:
        self.live.stream_interrupted(r, model, f, action, reason=reason)
        self.decisions.append((action, reason))
        row = self.attempter.last
        if row is not None:
            row.action = "resume" if action == "resume" else f"stop ({reason})"

    # ---- shown by the attempter's own rows: only emitted --------------------------
    def api_retry(
        self,
        r: RequestLog,
        model: str,
        attempt: int,
        max_retries: int,
        wait: float,
        f: Failure,
        *,
        reason: str | None = None,
    ) -> None:
        self.live.api_retry(r, model, attempt, max_retries, wait, f, reason=reason)

    def turn_retry(self, r: RequestLog, model: str, wait: float, f: Failure) -> None:
        self.live.turn_retry(r, model, wait, f)

    def retry_budget_exhausted(self, r: RequestLog, model: str, f: Failure) -> None:
        self.live.retry_budget_exhausted(r, model, f)

    def fallback(self, r: RequestLog, from_model: str, to_model: str, reason: str) -> None:
        self.live.fallback(r, from_model, to_model, reason)

    def fallback_model_activated(
        self,
        team: str,
        model: str,
        fallback_model: str,
        reason: str,
        r: RequestLog | None = None,
    ) -> None:
        self.live.fallback_model_activated(team, model, fallback_model, reason, r)

    def fallback_model_recovered(self, team: str, model: str) -> None:
        self.live.fallback_model_recovered(team, model)

    def deployment_attempt(self, model: str, deployment: str, f: Failure | None) -> None:
        self.live.deployment_attempt(model, deployment, f)

    def deployment_changed(
        self, team: str, model: str, deployment: str, t: Transition, r: RequestLog | None = None
    ) -> None:
        self.live.deployment_changed(team, model, deployment, t, r)

    def stream_event_dropped(self, r: RequestLog, model: str, count: int = 1) -> None:
        self.live.stream_event_dropped(r, model, count)


def join_action(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def agent_conversation(model: str) -> dict[str, Any]:
    """A coding agent's request: system, task, eight tool rounds with long results, a question."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the flaky retry test."},
    ]
    for i in range(8):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "f{i}.py"}}'},
        }
        lines = "".join(f"{i}.{n:03d}: x = compute({n})\n" for n in range(300))[:6000]
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": lines})
    messages.append({"role": "user", "content": "What makes it flaky?"})
    return {"model": model, "messages": messages}
