"""What happens once an answer has started (docs/recovery.md, Continuation and Streams):
the decisions after the first byte, pure like :mod:`gateway.resilience.decide`.

Two questions, each answered with an action or a :class:`Stop` whose ``reason`` is the
log field and the ``simulate`` column:

- an answer that arrived whole but cut at the token limit: ask for the rest
  (:func:`continuation` -> :class:`Continue`), for JSON answers and streams alike;
- a stream that broke after its first byte: resume it in place
  (:func:`after_break` -> :class:`Resume`, trying prefill first where the model
  supports it, then a regeneration that must repeat what was sent), or end it with
  the endpoint's error event.

Both count what was already done, so ``output_recovery.max_continuations: 2`` means at
most two follow-up requests (three parts), and ``stream.max_resumes`` at most that many
resumes, whichever path the answer takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.formats import Format
from gateway.policy.schema import OutputRecovery, StreamPolicy

PREFILL, REGENERATE = "prefill", "regenerate"


@dataclass(frozen=True, slots=True)
class Continue:
    """Ask the model that answered for the rest; ``n`` counts continuations (1, 2, ...)."""

    n: int


@dataclass(frozen=True, slots=True)
class Resume:
    """Resume the broken stream; ``modes`` in the order to try (prefill, then regenerate)."""

    n: int
    modes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    """Nothing more: the answer stays as it is (``reason`` names why)."""

    reason: str


def continuation(
    request: Mapping[str, Any],
    fmt: Format,
    policy: OutputRecovery,
    done: int,
    *,
    cut: bool,
    text: str,
    continuable: bool = True,
) -> Continue | Stop:
    """Whether to ask for the rest of an answer that ended; ``done`` continuations so far.

    ``cut``: it stopped at the output token limit and is not a tool call; ``text``: the
    answer's text so far; ``continuable``: the answer's shape allows splicing a follow-up
    (one choice, no tool call or other non-text part sent).
    """
    if not cut:
        return Stop("complete")
    if done >= policy.max_continuations:
        return Stop("max_continuations")
    if policy.respect_client_max_tokens and fmt.capped(request):
        return Stop("client_max_tokens")
    if fmt.several_choices(request):
        return Stop("several_choices")
    if not continuable:
        return Stop("not_continuable")
    if not (text.strip() if done == 0 else text):
        return Stop("empty_answer")
    return Continue(done + 1)


def after_break(
    policy: StreamPolicy,
    done: int,
    *,
    resumable: bool,
    diverged: bool,
    prefill: bool,
    deadline_passed: bool = False,
) -> Resume | Stop:
    """What to do when a stream broke after its first byte; ``done`` resumes so far.

    ``resumable``: what the client was sent can be continued in place (see
    :attr:`gateway.formats.transcript.Transcript.resumable`); ``diverged``: the break is a
    regeneration that did not repeat the text already sent; ``prefill``: the model
    continues a final assistant message; ``deadline_passed``: the request's deadline
    ended the stream, which is final.
    """
    if deadline_passed:
        return Stop("deadline")
    if policy.on_midstream_failure != "continue":
        return Stop("policy_error")
    if diverged:
        return Stop("resume_diverged")
    if done >= policy.max_resumes:
        return Stop("max_resumes")
    if not resumable:
        return Stop("not_resumable")
    return Resume(done + 1, (PREFILL, REGENERATE) if prefill else (REGENERATE,))


def tracks_answer(
    request: Mapping[str, Any], fmt: Format, out: OutputRecovery, stream: StreamPolicy
) -> bool:
    """Whether a stream's text must be kept as it is relayed: some decision above may need
    it (a resume, or a continuation the client did not rule out)."""
    if stream.on_midstream_failure == "continue":
        return True
    if out.max_continuations <= 0:
        return False
    return not (out.respect_client_max_tokens and fmt.capped(request))
