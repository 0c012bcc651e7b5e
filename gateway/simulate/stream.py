"""``simulate``'s side of the stream loop (:func:`gateway.recovery.continuing.follow_stream`).

A scripted stream relays the simulated answer (:data:`ANSWER_CHARS` characters) up to
its fault, the decisions of the real loop then say what follows:

    200              the whole answer (the rest of it, for a continuation or resume)
    200:length       40 characters more, then the final event says "cut at the limit"
    200:cut@N        N characters, then the connection resets
    200:stall@N      N characters, then silence for ``timeouts.stream_idle``
    200:badchunk@N   the whole answer, with one undecodable event at chunk N (dropped)
    200:error@N      N characters, then the provider's error event in the client's
                     format (at 0 it is the first event: the attempt failed)
    200:diverge      as a regeneration (a resume without prefill), a text that does not
                     start with what the client has: the resume diverged; else 200

Positions count from the start of that stream: a continuation or a prefill resume
starts where the client's text stands, a regeneration starts again at 0 and the
characters the client already has are not sent twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.errors import Category
from gateway.formats.endpoints import endpoint_of
from gateway.observe.request_log import RequestLog
from gateway.recovery.continuing import Segment, same_model
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Request
from gateway.resilience import followup
from gateway.resilience.failure import Failure
from gateway.resilience.verdict import DEADLINE_MESSAGE, cut_at_length, verdict
from gateway.simulate.attempter import join_action
from gateway.simulate.shaped import closing_events, error_event

if TYPE_CHECKING:
    from gateway.simulate.attempter import Row, ScriptedAttempter
    from gateway.simulate.script import Step

ANSWER_CHARS = 120
LENGTH_CHARS = 40


class ScriptedStream:
    """Relays scripted streams; opens continuations and resumes through the scripted
    attempter, so every one of them is an attempt on the timeline."""

    def __init__(
        self,
        att: ScriptedAttempter,
        req: Request,
        log: RequestLog,
        env: Env,
        first: Step,
        model: str,
        prefill_of: Callable[[str], bool],
    ) -> None:
        self.att, self.req, self.log, self.env = att, req, log, env
        self.step = first
        #: The model whose answer is relayed: the one that answered the last request
        #: this stream opened (as the engine's result says, never read back from the log).
        self.model = model
        self.row: Row | None = att.last
        self.sent = 0  # characters of the answer the client has
        self.base = 0  # where the current stream starts in the answer
        self.prefill_of = prefill_of
        self.endpoint = endpoint_of(req.fmt)
        policy = req.policy  # the relay keeps the text only when a decision may need it
        self.tracked = followup.tracks_answer(
            req.body, req.fmt, policy.output_recovery, policy.stream
        )

    async def pump(self) -> Segment:
        step, row = self.step, self.row
        fault, at = step.fault, step.at
        end = ANSWER_CHARS
        if fault == "length":
            end = min(ANSWER_CHARS, self.base + LENGTH_CHARS)
        elif fault in ("cut", "stall", "error"):
            end = min(ANSWER_CHARS, self.base + at)
        # a regeneration whose text is not the one the client has: nothing more is sent
        diverged = fault == "diverge" and self.base == 0 and self.sent > 0
        if diverged:
            end = self.sent
        new = max(0, end - self.sent)
        self.sent = max(self.sent, end)
        seg = Segment(complete=fault not in ("cut", "stall", "error") and not diverged)
        seg.diverged = diverged
        failure: Failure | None = None
        broken: tuple[Category, str] | None = None
        deadline_passed = False
        if diverged:
            what = "stream: regenerated another text"
        elif fault == "error":
            failure = error_event(self.endpoint, self.req.policy, self.att.clock.wall())[1]
            what = f"stream: {new} chars, then error event"
        elif fault == "cut":
            what = f"stream: {new} chars, then reset"
            broken = (Category.connection, "reset mid-stream")
        elif fault == "stall":
            idle = self.req.policy.timeouts.stream_idle
            clock = self.att.clock
            deadline_passed = clock.now + idle >= self.req.deadline
            clock.now = min(clock.now + idle, max(clock.now, self.req.deadline))
            what = f"stream: {new} chars, then silence"
            if deadline_passed:
                what += " to the deadline"
                broken = (Category.timeout, DEADLINE_MESSAGE)
            else:
                broken = (Category.timeout, f"upstream went quiet for {idle:g} s mid-stream")
        else:  # the stream's real closing events, in the client's format
            seg.held = closing_events(self.endpoint, "length" if end < ANSWER_CHARS else "stop")
            cut = self.cut(seg)
            what = f"stream: {new} chars" + (", cut at the limit" if cut else ", complete")
            if fault == "badchunk":
                what += f" (bad event at chunk {at} dropped)"
        seg.failure = verdict(seg.complete, failure, diverged, broken, deadline_passed)
        if seg.failure is not None:
            seg.complete = False
        if row is not None:
            row.outcome = what
        return seg

    def cut(self, seg: Segment) -> bool:
        return self.tracked and cut_at_length(seg.held, self.endpoint)

    def text(self) -> str:
        return "x" * self.sent

    def continuable(self) -> bool:
        return self.tracked

    def prefill(self) -> bool:
        return self.prefill_of(self.model)

    async def _open(self, sub: Request, base: int) -> bool:
        result = await recover(sub, self.log, self.env, self.att)
        self.model = result.progress.model  # the model it answered or gave up on
        step = result.outcome.stream
        if result.outcome.failure is not None or step is None:
            return False
        self.step, self.row, self.base = step, self.att.last, base
        return True

    async def open_continuation(self) -> bool:
        follow: dict[str, Any] = {**self.req.body, "continue_after_chars": self.sent}
        return await self._open(same_model(self.req, self.model, follow), self.sent)

    async def open_resume(self, modes: tuple[str, ...]) -> bool:
        for mode in modes:
            if mode == followup.PREFILL:  # as the relay does: the same request, the text as prefill
                body = {**self.req.body, "prefill_chars": self.sent}
                if await self._open(replace(self.req, body=body, model=self.model), self.sent):
                    return True
            elif await self._open(self.req, 0):
                return True
        return False

    async def finish(self, seg: Segment) -> None:
        if self.row is not None:
            self.row.action = join_action(self.row.action, f"answered ({self.sent} chars sent)")

    async def fail(self, original: Failure) -> None:
        if self.row is not None:
            self.row.action = join_action(
                self.row.action, f"error event ({original.category.value})"
            )
