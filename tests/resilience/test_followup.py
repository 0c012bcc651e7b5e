"""The decisions after the first byte (gateway/resilience/followup.py): continue a cut
answer, resume a broken stream, or stop, each stop with a named reason."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import CHAT, MESSAGES, RESPONSES, Format
from gateway.policy.schema import OutputRecovery, StreamPolicy
from gateway.resilience.followup import (
    PREFILL,
    REGENERATE,
    Continue,
    Resume,
    Stop,
    after_break,
    tracks_answer,
)
from gateway.resilience.followup import continuation as decide_continuation
from tests.resilience.test_continuation import (
    ANTHROPIC_REQUEST,
    OPENAI_REQUEST,
    RESPONSES_REQUEST,
    anthropic_answer,
    openai_answer,
    responses_answer,
)

pytestmark = pytest.mark.fast

POLICY = OutputRecovery()
FREE = OutputRecovery(respect_client_max_tokens=False)


def decide(
    request: dict[str, Any], answer: dict[str, Any], api: Format, policy: OutputRecovery, done: int
) -> Continue | Stop:
    """The decision for a JSON answer, as the live path and simulate ask it."""
    return decide_continuation(
        request,
        api,
        policy,
        done,
        cut=api.cut_at_length(answer),
        text=api.answer_text(answer),
    )


@pytest.mark.parametrize("limit", [0, 1, 2, 3])
def test_max_continuations_is_the_number_of_follow_ups(limit: int) -> None:
    """max_continuations N: exactly N follow-up requests for an answer cut every time."""
    policy = OutputRecovery(max_continuations=limit)
    cut = openai_answer("partial")
    decisions = [decide(OPENAI_REQUEST, cut, CHAT, policy, done) for done in range(limit + 2)]
    assert decisions[:limit] == [Continue(n) for n in range(1, limit + 1)]
    assert decisions[limit:] == [Stop("max_continuations")] * 2


def test_no_continuation_when_the_client_capped_output() -> None:
    """A client's own max_tokens is respected unless the policy says otherwise."""
    capped = {**OPENAI_REQUEST, "max_tokens": 100}
    cut = openai_answer("partial")
    assert decide(capped, cut, CHAT, POLICY, 0) == Stop("client_max_tokens")
    assert decide(capped, cut, CHAT, FREE, 0) == Continue(1)
    capped_responses = {**RESPONSES_REQUEST, "max_output_tokens": 100}
    assert decide(capped_responses, responses_answer("p"), RESPONSES, POLICY, 0) == Stop(
        "client_max_tokens"
    )


def test_anthropic_is_continued_only_when_client_limits_are_not_respected() -> None:
    """Anthropic max_tokens is mandatory, so it always counts as the client's own cap."""
    cut = anthropic_answer("partial")
    assert decide(ANTHROPIC_REQUEST, cut, MESSAGES, POLICY, 0) == Stop("client_max_tokens")
    assert decide(ANTHROPIC_REQUEST, cut, MESSAGES, FREE, 0) == Continue(1)


def test_tool_calls_finished_answers_several_choices_and_empty_text_stop() -> None:
    """Each reason not to continue is named."""
    tool = openai_answer("", tool_calls=[{"id": "c", "type": "function"}])
    assert decide(OPENAI_REQUEST, tool, CHAT, POLICY, 0) == Stop("complete")
    done = openai_answer("done", "stop")
    assert decide(OPENAI_REQUEST, done, CHAT, POLICY, 0) == Stop("complete")
    several = {**OPENAI_REQUEST, "n": 2}
    assert decide(several, openai_answer("a"), CHAT, POLICY, 0) == Stop("several_choices")
    assert decide(OPENAI_REQUEST, openai_answer("   "), CHAT, POLICY, 0) == Stop("empty_answer")
    assert decide_continuation(
        OPENAI_REQUEST, CHAT, POLICY, 0, cut=True, text="x", continuable=False
    ) == Stop("not_continuable")


def test_a_later_part_may_be_whitespace() -> None:
    """Only the first part needs visible text (a later one may be a newline)."""
    assert decide(OPENAI_REQUEST, openai_answer("\n"), CHAT, POLICY, 1) == Continue(2)


RESUMING = StreamPolicy(on_midstream_failure="continue")


@pytest.mark.parametrize(
    ("policy", "done", "resumable", "diverged", "expected"),
    [
        (StreamPolicy(), 0, True, False, Stop("policy_error")),
        (RESUMING, 0, True, True, Stop("resume_diverged")),
        (RESUMING, 2, True, False, Stop("max_resumes")),
        (StreamPolicy(on_midstream_failure="continue", max_resumes=0), 0, True, False,
         Stop("max_resumes")),
        (RESUMING, 0, False, False, Stop("not_resumable")),
        (RESUMING, 1, True, False, Resume(2, (REGENERATE,))),
    ],
)  # fmt: skip
def test_after_a_break(
    policy: StreamPolicy, done: int, resumable: bool, diverged: bool, expected: object
) -> None:
    """A broken stream is resumed only by policy, within max_resumes, when it can be."""
    got = after_break(policy, done, resumable=resumable, diverged=diverged, prefill=False)
    assert got == expected


def test_prefill_is_tried_before_regenerating() -> None:
    """A model that continues a final assistant message is asked that way first."""
    got = after_break(RESUMING, 0, resumable=True, diverged=False, prefill=True)
    assert got == Resume(1, (PREFILL, REGENERATE))


def test_the_text_is_kept_only_when_a_decision_may_need_it() -> None:
    """Streams keep a transcript for resumes, or for continuations the client allows."""
    out, stream = OutputRecovery(), StreamPolicy()
    assert tracks_answer(OPENAI_REQUEST, CHAT, out, stream)
    assert not tracks_answer({**OPENAI_REQUEST, "max_tokens": 5}, CHAT, out, stream)
    assert not tracks_answer(OPENAI_REQUEST, CHAT, OutputRecovery(max_continuations=0), stream)
    assert tracks_answer(ANTHROPIC_REQUEST, MESSAGES, out, RESUMING)
