"""The loops that carry out the decisions after the first byte (``resilience/followup``).

Like :func:`gateway.recovery.engine.recover` before the first byte, these loops only ask and
act: :func:`continue_answer` asks for the rest of a JSON answer cut at the token limit,
part after part; :func:`follow_stream` relays a stream segment after segment, continuing
a cut answer or resuming a broken one in place. The live relay (``gateway/live/relay.py``)
and ``llm-gateway simulate`` plug their own side into the same loops, so both make the
same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from gateway.errors import Category
from gateway.formats.transcript import UNREADABLE
from gateway.formats.usage import Usage
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Fallback
from gateway.recovery.billing import bill_answer
from gateway.recovery.engine import recover
from gateway.recovery.seams import Attempter, Env, Request, Result
from gateway.resilience import continuation, followup
from gateway.resilience.classify import transport_failure
from gateway.resilience.decide import DEADLINE_PASSED
from gateway.resilience.failure import Failure

#: Why an answer was not continued, or a stream not resumed, when the decision said to but
#: the follow-up request found no answer (its own recovery gave up).
CONTINUATION_FAILED = "continuation_failed"
RESUME_FAILED = "resume_failed"


def same_model(req: Request, model: str, body: dict[str, Any]) -> Request:
    """A follow-up request for ``model`` only: a continuation never falls back."""
    return replace(
        req, body=body, model=model, policy=req.policy.model_copy(update={"fallback": Fallback()})
    )


async def continue_answer(
    att: Attempter,
    req: Request,
    result: Result,
    first: dict[str, Any],
    log: RequestLog,
    env: Env,
    *,
    prefill: bool,
) -> tuple[bytes, dict[str, Any]]:
    """The whole answer: ``first`` and, while the decision says so, its continuations,
    merged (text joined, usage summed). A failed follow-up keeps what arrived."""
    model = result.progress.model
    parts: list[dict[str, Any]] = [first]
    price = att.price(model, result.progress.deployment)
    window = req.context_window if model == req.model else None  # bounds its counts
    bill_answer(req.bill, log, req.fmt, first, result.body, price, model, window=window)
    policy = req.policy.output_recovery
    while True:
        last = parts[-1]
        if not req.fmt.cut_at_length(last):
            break  # complete, the usual answer: nothing to decide (the decision says Stop)
        d = followup.continuation(
            req.body,
            req.fmt,
            policy,
            len(parts) - 1,
            cut=True,
            text=req.fmt.answer_text(last),
        )
        if isinstance(d, followup.Stop):
            env.events.not_continued(log, model, d.reason, len(parts) - 1)
            break
        follow = continuation.continuation_request(req.body, parts, req.fmt, prefill=prefill)
        r = await recover(same_model(req, model, follow), log, env, att)
        part = r.outcome.json() if r.outcome.failure is None else None
        if part is None:  # keep what we have: the answer stays marked as cut
            env.events.not_continued(log, model, CONTINUATION_FAILED, len(parts) - 1)
            break
        parts.append(part)
        price = att.price(model, r.progress.deployment)
        bill_answer(req.bill, log, req.fmt, part, r.body, price, model, window=window)
        log.used("continuation")
        env.events.output_continuation(log, model, d.n)
    log.answered_by = model
    if len(parts) == 1:
        return result.outcome.body, first
    merged = continuation.merge_parts(parts, req.fmt)
    try:
        return orjson.dumps(merged), merged
    except orjson.JSONEncodeError:  # counts summed past 64 bits: the first part, as it came
        return result.outcome.body, first


@dataclass(slots=True)
class Segment:
    """How one upstream stream ended."""

    complete: bool = False
    failure: Failure | None = None
    diverged: bool = False
    held: list[Any] = field(default_factory=list)  # closing events held back
    usage: Usage | None = None  # what the stream reported (its counts so far: the last)
    # what the model wrote that the stream relayed, in the token estimate's units (counted
    # as it passes when no transcript is kept: Format.stream_output)
    output: int = 0


class StreamSide(Protocol):
    """What :func:`follow_stream` acts through: the live relay, or simulate's script."""

    #: The public model whose stream is relayed (the last attempt's, as the engine's
    #: result said): the model the loop's events name.
    model: str

    async def pump(self) -> Segment:
        """Relay the current upstream stream until it ends, breaks or diverges."""
        ...

    def cut(self, seg: Segment) -> bool:
        """The segment ended at the output token limit (not a tool call)."""
        ...

    def text(self) -> str:
        """The answer's text the client was sent so far."""
        ...

    def continuable(self) -> bool:
        """What the client was sent can be continued in place."""
        ...

    def prefill(self) -> bool:
        """The model that answered continues a final assistant message."""
        ...

    async def open_continuation(self) -> bool:
        """Ask for the rest of the cut answer; True when its stream is open."""
        ...

    async def open_resume(self, modes: tuple[str, ...]) -> bool:
        """Resume the broken answer (modes in order); True when a stream is open."""
        ...

    async def finish(self, seg: Segment) -> None:
        """Send what ends the answer (the held closing events)."""
        ...

    async def fail(self, original: Failure) -> None:
        """End the stream with the endpoint's error event for ``original``."""
        ...


def unreadable(e: Exception) -> Failure:
    """A provider's event the gateway could not read (a field of the wrong type): a broken
    answer, like a server error. Only the exception's class is told: the provider's values
    may quote the prompt."""
    return transport_failure(
        Category.server_error, f"malformed upstream answer ({type(e).__name__})"
    )


async def follow_stream(side: StreamSide, req: Request, log: RequestLog, env: Env) -> bool:
    """Relay a stream to its end: segment after segment, each followed by a decision.
    True when the answer ended whole, False when it ended with the error event.

    An upstream event the gateway cannot read where it must (a field of the wrong type)
    ends the stream with the endpoint's error event, never silently: what the client was
    sent is then not known well enough to be resumed."""
    try:
        return await _follow(side, req, log, env)
    except UNREADABLE as e:
        f = unreadable(e)
        env.events.stream_interrupted(log, side.model, f, "error_event", reason="unreadable")
        log.error = f"stream interrupted: {f.category.value}"
        await side.fail(f)
        return False


async def _follow(side: StreamSide, req: Request, log: RequestLog, env: Env) -> bool:
    original: Failure | None = None  # the first failure: the one the client is told about
    continuations = resumes = 0
    while True:
        seg = await side.pump()
        if seg.complete:
            d = followup.continuation(
                req.body,
                req.fmt,
                req.policy.output_recovery,
                continuations,
                cut=side.cut(seg),
                text=side.text(),
                continuable=side.continuable(),
            )
            if isinstance(d, followup.Continue):
                if await side.open_continuation():
                    continuations = d.n
                    log.used("continuation")
                    env.events.output_continuation(log, side.model, d.n)
                    continue
                env.events.not_continued(log, side.model, CONTINUATION_FAILED, continuations)
            elif d.reason != "complete":  # the usual end is no "no"
                env.events.not_continued(log, side.model, d.reason, continuations)
            await side.finish(seg)
            return True
        original = original or seg.failure
        assert original is not None
        r = followup.after_break(
            req.policy.stream,
            resumes,
            resumable=side.continuable(),
            diverged=seg.diverged,
            prefill=side.prefill(),
            deadline_passed=seg.failure is not None and seg.failure.stage == DEADLINE_PASSED,
        )
        action = "resume" if isinstance(r, followup.Resume) else "error_event"
        reason = "" if isinstance(r, followup.Resume) else r.reason
        env.events.stream_interrupted(
            log, side.model, seg.failure or original, action, reason=reason
        )
        if isinstance(r, followup.Resume):
            if await side.open_resume(r.modes):
                resumes = r.n
                log.used("retry")
                continue
            env.events.stream_interrupted(
                log, side.model, original, "error_event", reason=RESUME_FAILED
            )
        log.error = f"stream interrupted: {original.category.value}"
        await side.fail(original)
        return False
