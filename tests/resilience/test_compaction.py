"""Compaction strategies over OpenAI, Anthropic and Responses agent transcripts."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import formats
from gateway.formats import CHAT, MESSAGES, RESPONSES, Format
from gateway.policy.schema import Compaction
from gateway.resilience.compaction import (
    DROP_NOTE,
    SUMMARY_INPUT_MAX_CHARS,
    SUMMARY_INSTRUCTIONS,
    SUMMARY_MAX_TOKENS,
    Compacted,
    apply_summary,
    compact,
    conversation_problems,
    estimate_tokens,
    is_valid_conversation,
    snip_text,
    summary_input_chars,
    summary_request,
    summary_text,
    target_tokens_for,
)
from gateway.resilience.conversation import (
    PINNED_ROLES,
    plain_text,
    role,
)
from tests.resilience.transcripts import (
    Step,
    Transcript,
    coding_session,
    filler,
    render,
    tool_round,
)

pytestmark = pytest.mark.fast

APIS = (CHAT, MESSAGES, RESPONSES)
POLICY = Compaction()
NOTE_MARK = "llm-gateway removed"
SUMMARY_MARK = "llm-gateway replaced"


# ---- invariant checks shared by unit and property tests ------------------------------


def first_user_index(items: list[Any]) -> int:
    return next(i for i, e in enumerate(items) if role(e) == "user")


def notes(body: dict[str, Any], api: Format, mark: str = NOTE_MARK) -> list[Any]:
    return [e for e in api.entries(body) if mark in plain_text(e.get("content"))]


def check_kept(before: dict[str, Any], after: dict[str, Any], api: Format, keep: int) -> None:
    """System/developer, the first user message and the last ``keep`` entries survive."""
    old, new = api.entries(before), api.entries(after)
    assert [e for e in new if role(e) in PINNED_ROLES] == [
        e for e in old if role(e) in PINNED_ROLES
    ]
    for key in ("system", "instructions", "tools", "model", "max_tokens"):
        assert after.get(key) == before.get(key)
    k = min(keep, len(old))
    assert new[len(new) - k :] == old[len(old) - k :]
    i = first_user_index(old)
    assert plain_text(new[i].get("content")).startswith(plain_text(old[i].get("content")))


def check_compacted(
    before: dict[str, Any], c: Compacted | None, api: Format, policy: Compaction, strategy: str
) -> None:
    """The invariants every non-None result of ``strategy`` must hold."""
    if c is None:
        return
    assert c.strategy == strategy
    assert conversation_problems(c.body, api) == []
    assert c.tokens_before == estimate_tokens(before, api)
    assert c.tokens_after == estimate_tokens(c.body, api) < c.tokens_before
    assert c.messages_before == len(api.entries(before))
    assert c.messages_after == len(api.entries(c.body))
    check_kept(before, c.body, api, policy.keep_recent)
    old, new = api.entries(before), api.entries(c.body)
    if strategy == "snip_tool_results":
        assert len(new) == len(old)
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                assert api.closed_calls(a) and i < len(old) - policy.keep_recent
                assert "characters cut by llm-gateway" in json.dumps(b)
        return
    mark = NOTE_MARK if strategy == "drop_middle" else SUMMARY_MARK
    assert len(notes(c.body, api, mark)) == 1
    assert c.messages_after < c.messages_before + 1
    # what is left is the input in order, apart from the note (and its Anthropic host)
    rest = iter(old)
    for entry in new:
        if mark in plain_text(entry.get("content")):
            continue
        assert any(entry == candidate for candidate in rest)


def result_texts(items: list[Any], api: Format) -> list[str]:
    """The texts of the tool results among ``items``."""
    if api is CHAT:
        return [plain_text(e["content"]) for e in items if role(e) == "tool"]
    if api is RESPONSES:
        return [plain_text(e["output"]) for e in items if e.get("type") == "function_call_output"]
    return [
        plain_text(b["content"])
        for e in items
        if isinstance(e["content"], list)
        for b in e["content"]
        if b["type"] == "tool_result"
    ]


_CALL = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
_CALLS = {"role": "assistant", "tool_calls": [_CALL]}
_USER = {"role": "user", "content": "u"}
_TOOL_B = {"role": "tool", "tool_call_id": "b", "content": "r"}
_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}
_RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]}
_FC = {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"}
_FC_OUT = {"type": "function_call_output", "call_id": "a", "output": "r"}


# ---- estimate ---------------------------------------------------------------------


def test_estimate_is_chars_over_four_plus_four_per_message() -> None:
    """The estimate is ceil(text chars / 4) plus 4 tokens per message."""
    body = {
        "messages": [{"role": "system", "content": "a" * 10}, {"role": "user", "content": "b" * 7}]
    }
    assert estimate_tokens(body, CHAT) == 5 + 2 * 4


def test_estimate_counts_system_tool_arguments_results_and_tools() -> None:
    """Anthropic system, tool_use input JSON, tool results and tool schemas all count."""
    tools = [{"name": "t"}]
    body = {
        "system": "s" * 40,
        "tools": tools,
        "messages": [
            {"role": "user", "content": "hi"},
            {**_USE, "content": [{**_USE["content"][0], "input": {"a": 1}}]},
            {"role": "user", "content": [{**_RESULT["content"][0], "content": "r" * 100}]},
        ],
    }
    chars = 40 + len('[{"name":"t"}]') + 2 + 1 + len('{"a":1}') + 100
    assert estimate_tokens(body, MESSAGES) == -(-chars // 4) + 3 * 4


def test_estimate_counts_an_image_as_a_fixed_size() -> None:
    """An image costs 1,600 tokens whatever the length of its base64 data."""
    image = {"type": "image", "source": {"type": "base64", "data": "A" * 100_000}}
    body = {"messages": [{"role": "user", "content": [image]}]}
    assert estimate_tokens(body, MESSAGES) == 1600 + 4


def test_estimate_responses_string_input_and_instructions() -> None:
    """A Responses string input is one message; instructions count."""
    assert estimate_tokens({"instructions": "i" * 8, "input": "x" * 8}, RESPONSES) == 4 + 4


def test_unknown_format_and_strategy_raise() -> None:
    """Misuse is loud: an unknown format or strategy name raises ValueError."""
    with pytest.raises(ValueError, match="unknown format"):
        formats.by_name("cohere")
    with pytest.raises(ValueError, match="unknown compaction strategy"):
        compact({"messages": []}, CHAT, "shrink", POLICY)


# ---- snip_tool_results --------------------------------------------------------------


def test_snip_text_keeps_head_and_tail_within_the_limit() -> None:
    """A long text keeps its head and tail around a marker counting the cut characters."""
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = snip_text(text, 1000)
    assert len(out) <= 1000
    assert out.startswith("HEAD") and out.endswith("TAIL")
    cut = len(text) - len(out) + len(out.split("\n")[1]) + 2
    assert f"[... {cut} characters cut by llm-gateway ...]" in out
    assert snip_text(out, 1000) == out
    assert snip_text("short", 1000) == "short"


@pytest.mark.parametrize("api", APIS)
def test_snip_cuts_old_large_results_only(api: Format) -> None:
    """Large tool results outside the recent window are snipped; small and recent ones stay."""
    body = render(coding_session(), api)
    c = compact(body, api, "snip_tool_results", POLICY)
    assert c is not None
    check_compacted(body, c, api, POLICY, "snip_tool_results")
    assert c.tokens_after < c.tokens_before / 2
    dumped = json.dumps(api.entries(c.body))
    assert "characters cut by llm-gateway" in dumped
    assert "r1.1:00000" in dumped  # a 637-character result, kept whole
    assert c.messages_after == c.messages_before


@pytest.mark.parametrize("api", APIS)
def test_snip_keeps_a_large_result_inside_the_recent_window(api: Format) -> None:
    """The last keep_recent messages are never snipped, however large their results."""
    t = Transcript(task="Read it.", steps=[tool_round(0, [50_000]), Step("user", "Thanks.")])
    body = render(t, api)
    assert compact(body, api, "snip_tool_results", POLICY) is None


@pytest.mark.parametrize("api", APIS)
def test_snip_returns_none_when_no_result_is_long(api: Format) -> None:
    """Nothing to snip: the strategy is skipped rather than resending the same prompt."""
    t = Transcript(task="Go.", steps=[tool_round(i, [300, 200]) for i in range(10)])
    assert compact(render(t, api), api, "snip_tool_results", POLICY) is None


def test_snip_handles_list_content_parts() -> None:
    """OpenAI tool content given as text parts is snipped part by part."""
    big = filler("p", 9000)
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": big}]},
            *[{"role": "user", "content": "more"}] * 6,
        ]
    }
    c = compact(body, CHAT, "snip_tool_results", POLICY)
    assert c is not None
    part = c.body["messages"][2]["content"][0]
    assert part["type"] == "text" and len(part["text"]) <= POLICY.tool_result_max_chars


@pytest.mark.parametrize("api", APIS)
def test_snip_with_a_target_snips_harder(api: Format) -> None:
    """With a target below the plain snip, the limit is halved until it fits (floor 256)."""
    body = render(coding_session(), api)
    plain = compact(body, api, "snip_tool_results", POLICY)
    assert plain is not None
    harder = compact(
        body, api, "snip_tool_results", POLICY, target_tokens=plain.tokens_after - 2000
    )
    assert harder is not None
    check_compacted(body, harder, api, POLICY, "snip_tool_results")
    assert harder.tokens_after <= plain.tokens_after - 2000
    floor = compact(body, api, "snip_tool_results", POLICY, target_tokens=1)
    assert floor is not None and floor.tokens_after < harder.tokens_after


# ---- drop_middle ----------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_drop_middle_keeps_system_first_user_recent_and_leaves_a_note(api: Format) -> None:
    """The whole middle goes; system, task and recent window stay; one note marks the gap."""
    body = render(coding_session(), api)
    c = compact(body, api, "drop_middle", POLICY)
    assert c is not None
    check_compacted(body, c, api, POLICY, "drop_middle")
    assert c.messages_after <= POLICY.keep_recent + 6


def test_drop_middle_openai_note_is_a_user_message_after_the_task() -> None:
    """OpenAI: the note is its own user message right where the dropped messages were."""
    body = render(coding_session(), CHAT)
    c = compact(body, CHAT, "drop_middle", POLICY)
    assert c is not None
    messages = c.body["messages"]
    assert [m["role"] for m in messages[:3]] == ["system", "user", "user"]
    removed = c.messages_before - c.messages_after + 1
    assert messages[2]["content"] == DROP_NOTE.format(n=removed)


def test_drop_middle_anthropic_merges_the_note_and_keeps_roles_alternating() -> None:
    """Anthropic: the note joins the first user message, the next message is the assistant's."""
    body = render(coding_session(), MESSAGES)
    c = compact(body, MESSAGES, "drop_middle", POLICY)
    assert c is not None
    messages = c.body["messages"]
    assert messages[0]["content"].startswith(body["messages"][0]["content"] + "\n\n")
    assert NOTE_MARK in messages[0]["content"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + ["user"]


def test_drop_middle_anthropic_note_appends_a_block_to_list_content() -> None:
    """Anthropic: a first user message with content blocks gets the note as a text block."""
    t = coding_session()
    t.steps.insert(0, Step("user", "Also keep the changelog updated."))
    body = render(t, MESSAGES)
    c = compact(body, MESSAGES, "drop_middle", POLICY)
    assert c is not None
    first = c.body["messages"][0]["content"]
    assert first[:-1] == body["messages"][0]["content"]
    assert first[-1]["type"] == "text" and NOTE_MARK in first[-1]["text"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("keep", [1, 2, 3, 4, 5])
def test_drop_middle_never_starts_the_window_with_orphan_results(api: Format, keep: int) -> None:
    """A recent window that would start inside a parallel tool round is widened to its start."""
    t = Transcript(
        task="Go.",
        steps=[tool_round(i, [3000, 3000, 3000]) for i in range(6)],
    )
    body = render(t, api)
    policy = Compaction(keep_recent=keep)
    c = compact(body, api, "drop_middle", policy)
    assert c is not None
    check_compacted(body, c, api, policy, "drop_middle")


def test_drop_middle_keeps_developer_messages_in_the_middle() -> None:
    """OpenAI/Responses developer messages in the middle are kept where they were."""
    t = coding_session()
    t.developer_notes = {3: "Never touch generated files."}
    for api in (CHAT, RESPONSES):
        body = render(t, api)
        c = compact(body, api, "drop_middle", POLICY)
        assert c is not None
        check_compacted(body, c, api, POLICY, "drop_middle")
        assert any(role(e) == "developer" for e in api.entries(c.body))


@pytest.mark.parametrize("api", APIS)
def test_drop_middle_with_target_drops_oldest_groups_only_as_needed(api: Format) -> None:
    """With a target, the oldest rounds go first and no more than needed to fit."""
    t = Transcript(task="Go.", steps=[tool_round(i, [8000]) for i in range(10)])
    body = render(t, api)
    one_round = 2000
    before = estimate_tokens(body, api)
    c = compact(body, api, "drop_middle", POLICY, target_tokens=before - 3 * one_round)
    assert c is not None
    check_compacted(body, c, api, POLICY, "drop_middle")
    assert c.tokens_after <= before - 3 * one_round
    dumped = json.dumps(api.entries(c.body))
    assert "r2.0:" not in dumped and "r3.0:" in dumped  # rounds 0-2 dropped, round 3 kept
    everything = compact(body, api, "drop_middle", POLICY)
    assert everything is not None and everything.messages_after < c.messages_after


@pytest.mark.parametrize("api", APIS)
def test_drop_middle_with_unreachable_target_drops_the_whole_middle(api: Format) -> None:
    """A target that cannot be met drops all of the middle, still smaller."""
    body = render(coding_session(), api)
    c = compact(body, api, "drop_middle", POLICY, target_tokens=10)
    assert c == compact(body, api, "drop_middle", POLICY)


@pytest.mark.parametrize("api", APIS)
def test_drop_middle_returns_none_without_a_middle(api: Format) -> None:
    """A conversation no longer than the recent window has nothing to drop."""
    t = Transcript(task="Go.", steps=[tool_round(0, [90_000]), Step("user", "ok")])
    assert compact(render(t, api), api, "drop_middle", POLICY) is None


def test_drop_middle_returns_none_when_the_note_is_bigger_than_the_middle() -> None:
    """Dropping two short messages for a longer note would not shrink: skipped."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    messages += [{"role": "user", "content": "x" * 200}] * 6
    assert compact({"messages": messages}, CHAT, "drop_middle", POLICY) is None


@pytest.mark.parametrize("api", [CHAT, RESPONSES])
def test_no_user_message_or_string_input_is_left_alone(api: Format) -> None:
    """Without a user message (or with a plain string input) nothing can be dropped."""
    lonely = [{"role": "system", "content": "s"}] + [{"role": "assistant", "content": "a"}] * 9
    body: dict[str, Any] = {"input": "x" * 100_000} if api is RESPONSES else {"messages": lonely}
    for strategy in ("snip_tool_results", "drop_middle"):
        assert compact(body, api, strategy, POLICY) is None


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("strategy", ["snip_tool_results", "drop_middle"])
def test_compaction_never_mutates_the_request(api: Format, strategy: str) -> None:
    """The client's body is left as it was; the result shares no mutable part with it."""
    body = render(coding_session(), api)
    snapshot = copy.deepcopy(body)
    c = compact(body, api, strategy, POLICY)
    assert c is not None and body == snapshot
    api.entries(c.body)[0]["content"] = "changed"
    assert body == snapshot


# ---- summarize --------------------------------------------------------------------------


def test_compact_skips_summarize_which_needs_a_model_call() -> None:
    """compact() cannot summarise on its own, so the step is skipped (None)."""
    assert compact(render(coding_session(), CHAT), CHAT, "summarize", POLICY) is None


@pytest.mark.parametrize("api", APIS)
def test_summary_request_is_an_openai_chat_request_over_the_middle(api: Format) -> None:
    """The summary request carries our instructions, the task and the dropped middle."""
    body = render(coding_session(), api)
    request = summary_request(body, api, POLICY, "glm-4-flash")
    assert request is not None
    assert request["model"] == "glm-4-flash" and request["stream"] is False
    system, user = request["messages"]
    assert system == {"role": "system", "content": SUMMARY_INSTRUCTIONS}
    assert "Fix the flaky retry test" in user["content"]
    assert "assistant called read_file" in user["content"]
    assert "tool result: r1.1:00000" in user["content"]
    assert "Round 0: looking" in user["content"]
    assert "Running the tests once more" not in user["content"]  # recent, not summarised
    assert len(user["content"]) < 60_000


@pytest.mark.parametrize("api", APIS)
def test_apply_summary_puts_the_summary_where_the_middle_was(api: Format) -> None:
    """The summary replaces the middle as one note; the rest stays valid."""
    body = render(coding_session(), api)
    c = apply_summary(body, api, POLICY, "  The retry test sleeps on a real clock.  ")
    assert c is not None
    check_compacted(body, c, api, POLICY, "summarize")
    (note,) = notes(c.body, api, SUMMARY_MARK)
    assert plain_text(note["content"]).endswith("The retry test sleeps on a real clock.")


@pytest.mark.parametrize("api", APIS)
def test_summary_parts_are_none_without_a_middle_or_summary(api: Format) -> None:
    """No middle, or an empty summary: nothing to request or apply."""
    short = render(Transcript(task="Go.", steps=[Step("user", "ok")]), api)
    assert summary_request(short, api, POLICY, "m") is None
    assert apply_summary(short, api, POLICY, "summary") is None
    assert apply_summary(render(coding_session(), api), api, POLICY, "   ") is None


@pytest.mark.parametrize("api", APIS)
def test_summarize_replaces_exactly_the_middle_drop_middle_drops(api: Format) -> None:
    """The summary request covers, and the splice removes, what drop_middle removes."""
    body = render(coding_session(), api)
    drop = compact(body, api, "drop_middle", POLICY)
    summary = apply_summary(body, api, POLICY, "S.")
    assert drop is not None and summary is not None
    assert summary.messages_after == drop.messages_after
    kept = [e for e in api.entries(drop.body) if NOTE_MARK not in plain_text(e.get("content"))]
    assert [
        e for e in api.entries(summary.body) if SUMMARY_MARK not in plain_text(e.get("content"))
    ] == kept
    request = summary_request(body, api, POLICY, "m")
    assert request is not None
    transcript = request["messages"][1]["content"]
    dropped = [e for e in api.entries(body) if e not in kept]
    assert result_texts(dropped, api)  # the tool results of the middle ...
    for text in result_texts(dropped, api):
        assert text[:40] in transcript  # ... are all in the transcript (snipped)
    for text in result_texts(kept, api):
        assert text[:40] not in transcript  # the kept window is not summarised


def test_summarize_splice_shape_per_api() -> None:
    """OpenAI and Responses: a user message after the task; Anthropic: joined to the task."""
    for api in (CHAT, RESPONSES):
        body = render(coding_session(), api)
        c = apply_summary(body, api, POLICY, "The summary.")
        assert c is not None
        items = api.entries(c.body)
        task = first_user_index(items)
        note = items[task + 1]
        assert note["role"] == "user" and SUMMARY_MARK in note["content"]
        assert note["content"].endswith("\nThe summary.")
        assert items[task] == api.entries(body)[task]
    body = render(coding_session(), MESSAGES)
    c = apply_summary(body, MESSAGES, POLICY, "The summary.")
    assert c is not None
    first = c.body["messages"][0]
    assert first["content"].startswith(body["messages"][0]["content"] + "\n\n[llm-gateway replaced")
    assert first["content"].endswith("\nThe summary.")
    assert c.body["messages"][1]["role"] == "assistant"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("keep", [1, 2, 3, 4, 5])
def test_summarize_keeps_tool_pairs_valid(api: Format, keep: int) -> None:
    """Parallel tool rounds: the summary never leaves a call without its results or back."""
    body = render(Transcript(task="Go.", steps=[tool_round(i, [3000] * 3) for i in range(6)]), api)
    policy = Compaction(keep_recent=keep)
    c = apply_summary(body, api, policy, "Rounds 0 to 4 read the modules.")
    assert c is not None
    check_compacted(body, c, api, policy, "summarize")
    assert is_valid_conversation(c.body, api)


@pytest.mark.parametrize("api", APIS)
def test_summarize_is_skipped_when_the_summary_is_not_smaller(api: Format) -> None:
    """A summary longer than the middle it replaces is not used (None, like any strategy)."""
    t = Transcript(task="Go.", steps=[Step("assistant", "a"), Step("user", "u")] * 4)
    body = render(t, api)
    assert summary_request(body, api, Compaction(keep_recent=2), "m") is not None
    assert apply_summary(body, api, Compaction(keep_recent=2), "x" * 5000) is None


def test_summary_request_in_the_anthropic_format() -> None:
    """In Messages: the instructions as system, one user message, max_tokens set."""
    body = render(coding_session(), CHAT)
    request = summary_request(body, CHAT, POLICY, "claude-haiku", summary_fmt=MESSAGES)
    assert request is not None
    assert request["system"] == SUMMARY_INSTRUCTIONS
    assert request["model"] == "claude-haiku" and request["stream"] is False
    assert request["max_tokens"] == SUMMARY_MAX_TOKENS and request["temperature"] == 0
    (user,) = request["messages"]
    assert user["role"] == "user" and "<transcript>" in user["content"]


def test_summary_request_in_the_responses_format() -> None:
    """In Responses: the instructions as instructions, one input message, max_output_tokens."""
    body = render(coding_session(), CHAT)
    request = summary_request(body, CHAT, POLICY, "m", summary_fmt=RESPONSES)
    assert request is not None
    assert request["instructions"] == SUMMARY_INSTRUCTIONS and "messages" not in request
    assert request["max_output_tokens"] == SUMMARY_MAX_TOKENS and request["stream"] is False
    (user,) = request["input"]
    assert user["role"] == "user" and "<transcript>" in user["content"]


def test_summary_request_transcript_fits_max_input_chars() -> None:
    """The transcript is snipped (head and tail) to max_input_chars."""
    body = render(coding_session(), CHAT)
    full = summary_request(body, CHAT, POLICY, "m")
    small = summary_request(body, CHAT, POLICY, "m", max_input_chars=3000)
    assert full is not None and small is not None
    assert len(small["messages"][1]["content"]) < 3000 + 600 < len(full["messages"][1]["content"])
    assert "characters cut by llm-gateway" in small["messages"][1]["content"]


@pytest.mark.parametrize(
    ("window", "scale", "expected"),
    [
        (None, 1.0, SUMMARY_INPUT_MAX_CHARS),
        (1_000_000, 1.0, SUMMARY_INPUT_MAX_CHARS),
        (8192, 1.0, int((8192 - 2048) * 0.9 * 4) - 2000),
        (8192, 0.5, int((8192 - 2048) * 0.9 * 2) - 2000),
        (2048, 1.0, 1000),  # no room: the floor
    ],
)
def test_summary_input_chars(window: int | None, scale: float, expected: int) -> None:
    """The transcript's share of the summarize model's window, in characters."""
    assert summary_input_chars(window, scale) == expected


@pytest.mark.parametrize(
    ("fmt", "answer", "text"),
    [
        (CHAT, {"choices": [{"message": {"content": "  Did X.  "}}]}, "Did X."),
        (CHAT, {"choices": [{"message": {"content": [{"type": "text", "text": "A"}]}}]}, "A"),
        (CHAT, {"choices": [{"message": {"content": None, "tool_calls": []}}]}, ""),
        (CHAT, {"choices": []}, ""),
        (CHAT, None, ""),
        (MESSAGES, {"content": [{"type": "thinking", "thinking": "hm"},
                                   {"type": "text", "text": "Did "}, {"type": "text", "text": "Y"}]},
         "Did \nY"),  # the text blocks one per line: sentences of two blocks stay apart
        (MESSAGES, {"content": []}, ""),
    ],
)  # fmt: skip
def test_summary_text(fmt: Format, answer: Any, text: str) -> None:
    """The summary is the answer's text; reasoning, tool calls and odd shapes give nothing."""
    assert summary_text(answer, fmt) == text


# ---- cumulative sequence ------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_strategies_applied_in_order_shrink_at_every_step(api: Format) -> None:
    """snip then drop_middle then a summary: each step valid and smaller than the last."""
    body = render(coding_session(rounds=20), api)
    original = body
    for strategy in POLICY.strategies:
        c = compact(body, api, strategy, POLICY)
        assert c is not None
        check_compacted(body, c, api, POLICY, strategy)
        body = c.body
    check_kept(original, body, api, POLICY.keep_recent)
    assert apply_summary(body, api, POLICY, "s") is None  # drop_middle left no middle


# ---- target_tokens_for -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "limit", "output", "estimate", "expected"),
    [
        (9100, 8192, None, 9100, 7372),  # 90 % of 8192
        (9100, 8192, 1000, 9100, 6472),  # room left for the requested output
        (210_000, 200_000, 8192, 105_000, 86_313),  # our estimate counts half the provider's
        (None, 8192, None, 5000, 7372),  # no prompt count: no scaling
        (9100, None, 1000, 9100, None),  # no limit: unknown
        (None, None, None, 9100, None),
        (9100, 8192, 8192, 9100, 0),  # the requested output alone fills the window
    ],
)
def test_target_tokens_for(
    prompt: int | None, limit: int | None, output: int | None, estimate: int, expected: int | None
) -> None:
    """The target is 90 % of the room left beside the output, in our estimate's units."""
    assert target_tokens_for(prompt, limit, output, estimate) == expected


# ---- validity -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "messages", "problem"),
    [
        (CHAT, [{"role": "tool", "tool_call_id": "a", "content": "r"}], "outside a tool block"),
        (CHAT, [_CALLS, _USER], "no result"),
        (CHAT, [_CALLS], "no result"),
        (CHAT, [_CALLS, _TOOL_B], "answers no pending"),
        (MESSAGES, [], "no messages"),
        (MESSAGES, [{"role": "assistant", "content": "a"}], "not 'user'"),
        (MESSAGES, [_USER, _USER], "in a row"),
        (MESSAGES, [{"role": "system", "content": "a"}], "role 'system'"),
        (MESSAGES, [_USER, _USE], "no tool_result"),
        (MESSAGES, [_USER, _USE, _USER], "no tool_result"),
        (MESSAGES, [_RESULT], "no tool_use"),
        (RESPONSES, [_FC_OUT], "no call before"),
        (RESPONSES, [_FC], "has no output"),
    ],
)
def test_invalid_conversations_are_reported(api: Format, messages: list[Any], problem: str) -> None:
    """Each broken tool pairing or role order is named as a problem."""
    key = "input" if api is RESPONSES else "messages"
    problems = conversation_problems({key: messages}, api)
    assert any(problem in p for p in problems), problems
    assert not is_valid_conversation({key: messages}, api)


@pytest.mark.parametrize("api", APIS)
def test_rendered_transcripts_are_valid(api: Format) -> None:
    """The transcript builders produce conversations the providers accept."""
    assert is_valid_conversation(render(coding_session(), api), api)


# ---- properties ---------------------------------------------------------------------------

RESULT_SIZES = st.sampled_from([40, 300, 900, 5000, 20_000])


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    steps: list[Step] = []
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools"]))
        if kind == "tools":
            sizes = draw(st.lists(RESULT_SIZES, min_size=1, max_size=3))
            steps.append(tool_round(i, sizes, draw(st.sampled_from(["", "Checking."]))))
        else:
            steps.append(Step(kind, filler(f"{kind}{i}", draw(st.sampled_from([10, 200, 3000])))))
    if not steps or steps[-1].kind == "assistant":
        steps.append(Step("user", "Go on."))
    notes_at = draw(st.sets(st.integers(0, len(steps) - 1), max_size=2))
    return Transcript(
        task=filler("task", draw(st.sampled_from([20, 2000]))),
        steps=steps,
        developer_notes={i: "Be brief." for i in notes_at},
    )


POLICIES = st.builds(
    Compaction,
    keep_recent=st.integers(1, 8),
    tool_result_max_chars=st.sampled_from([1000, 4000]),
)


def _droppable_range_exists(body: dict[str, Any], api: Format, policy: Compaction) -> bool:
    """Brute force: is there a middle range whose removal stays valid and saves real size?"""
    items = api.entries(body)
    key = "input" if api is RESPONSES else "messages"
    start = first_user_index(items) + 1
    end = len(items) - policy.keep_recent
    budget = estimate_tokens(body, api) - len(DROP_NOTE) // 4 - 16
    for s in range(start, end):
        for e in range(s + 1, end + 1):
            if any(role(x) in PINNED_ROLES for x in items[s:e]):
                break
            smaller = {**body, key: items[:s] + items[e:]}
            if estimate_tokens(smaller, api) < budget and is_valid_conversation(smaller, api):
                return True
    return False


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=150, derandomize=True, deadline=None)
@given(t=transcripts(), policy=POLICIES)
def test_property_each_strategy_keeps_invariants(
    api: Format, t: Transcript, policy: Compaction
) -> None:
    """On random valid transcripts every strategy returns a valid, smaller body or None."""
    body = render(t, api)
    assert is_valid_conversation(body, api)
    snapshot = copy.deepcopy(body)
    snip = compact(body, api, "snip_tool_results", policy)
    check_compacted(body, snip, api, policy, "snip_tool_results")
    if snip is None:
        old = api.entries(body)[: max(0, len(api.entries(body)) - policy.keep_recent)]
        assert all(len(text) <= policy.tool_result_max_chars for text in result_texts(old, api))
    drop = compact(body, api, "drop_middle", policy)
    check_compacted(body, drop, api, policy, "drop_middle")
    if drop is None:
        assert not _droppable_range_exists(body, api, policy)
    summary = apply_summary(body, api, policy, "A short summary.")
    check_compacted(body, summary, api, policy, "summarize")
    if summary_request(body, api, policy, "m") is None:
        assert summary is None and drop is None
    assert body == snapshot


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=150, derandomize=True, deadline=None)
@given(t=transcripts(), policy=POLICIES)
def test_property_cumulative_sequence_keeps_invariants(
    api: Format, t: Transcript, policy: Compaction
) -> None:
    """Applying the strategies one after another keeps every invariant at every step."""
    original = render(t, api)
    body = original
    size = estimate_tokens(body, api)
    for strategy in ("snip_tool_results", "drop_middle"):
        c = compact(body, api, strategy, policy)
        check_compacted(body, c, api, policy, strategy)
        if c is not None:
            assert c.tokens_after < size
            body, size = c.body, c.tokens_after
    c = apply_summary(body, api, policy, "Summary of what happened.")
    check_compacted(body, c, api, policy, "summarize")
    check_kept(original, c.body if c else body, api, policy.keep_recent)


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=150, derandomize=True, deadline=None)
@given(t=transcripts(), policy=POLICIES, fraction=st.floats(0.0, 1.0))
def test_property_targets_are_met_when_reachable(
    api: Format, t: Transcript, policy: Compaction, fraction: float
) -> None:
    """A target between 'drop everything' and the current size is met with less dropped."""
    body = render(t, api)
    everything = compact(body, api, "drop_middle", policy)
    if everything is None:
        return
    target = int(
        everything.tokens_after + fraction * (everything.tokens_before - everything.tokens_after)
    )
    c = compact(body, api, "drop_middle", policy, target_tokens=target)
    check_compacted(body, c, api, policy, "drop_middle")
    assert c is not None and c.tokens_after <= target
    assert c.messages_after >= everything.messages_after
    snip = compact(body, api, "snip_tool_results", policy, target_tokens=target)
    check_compacted(body, snip, api, policy, "snip_tool_results")


# ---- less common shapes -------------------------------------------------------------------


def _padding(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"note {i}"} for i in range(n)]


def test_responses_custom_tool_calls_pair_and_snip_like_function_calls() -> None:
    """Codex's custom_tool_call / custom_tool_call_output pair up and are snipped and dropped."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Patch it."}]
    for i in range(4):
        items.append(
            {
                "type": "custom_tool_call",
                "call_id": f"c{i}",
                "name": "apply_patch",
                "input": "*** Begin",
            }
        )
        items.append(
            {"type": "custom_tool_call_output", "call_id": f"c{i}", "output": filler(f"o{i}", 9000)}
        )
    body = {"input": [*items, *_padding(6)]}
    assert is_valid_conversation(body, RESPONSES)
    snip = compact(body, RESPONSES, "snip_tool_results", POLICY)
    check_compacted(body, snip, RESPONSES, POLICY, "snip_tool_results")
    assert snip is not None and snip.tokens_after < 5000
    drop = compact(body, RESPONSES, "drop_middle", POLICY)
    check_compacted(body, drop, RESPONSES, POLICY, "drop_middle")
    assert drop is not None and drop.messages_after == 1 + 1 + 6
    request = summary_request(body, RESPONSES, POLICY, "m")
    assert request is not None and "assistant called apply_patch(*** Begin)" in str(request)


def test_anthropic_tool_result_blocks_snip_text_and_keep_images() -> None:
    """A tool_result with text and image blocks has its text snipped and its image kept."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
    }
    result = {
        "type": "tool_result",
        "tool_use_id": "a",
        "content": [{"type": "text", "text": filler("s", 20_000)}, image],
    }
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Take a screenshot."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "shot", "input": {}}],
        },
        {"role": "user", "content": [result]},
    ]
    for i in range(3):
        messages += [
            {"role": "assistant", "content": f"a{i}"},
            {"role": "user", "content": f"u{i}"},
        ]
    body = {"system": "s", "max_tokens": 10, "messages": messages}
    c = compact(body, MESSAGES, "snip_tool_results", POLICY)
    check_compacted(body, c, MESSAGES, POLICY, "snip_tool_results")
    assert c is not None
    text, kept_image = c.body["messages"][2]["content"][0]["content"]
    assert len(text["text"]) <= POLICY.tool_result_max_chars and kept_image == image
    request = summary_request(body, MESSAGES, POLICY, "m")
    assert request is not None and "[image]" in request["messages"][1]["content"]


def test_openai_messages_before_the_first_user_message_are_kept() -> None:
    """Everything up to the first user message (e.g. a greeting) belongs to the kept head."""
    head = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "Hello!"}]
    middle = [{"role": "assistant", "content": filler("m", 5000)}] * 3
    body = {"messages": [*head, {"role": "user", "content": "task"}, *middle, *_padding(6)]}
    c = compact(body, CHAT, "drop_middle", POLICY)
    check_compacted(body, c, CHAT, POLICY, "drop_middle")
    assert c is not None and c.body["messages"][:3] == body["messages"][:3]
    assert c.messages_after == 3 + 1 + 6
