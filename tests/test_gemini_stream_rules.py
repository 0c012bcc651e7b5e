"""Gemini as a client format: its stream rules (gateway/formats/gemini_stream.py: the
client's stream read into a transcript, a resumed stream spliced into it, the parts' usage
summed) and its JSON answer rules for a continuation (``Gemini.text_answer`` / ``merge``).
Pure: the fake Gemini's own stream shapes (gateway/testing/gemini_shapes.py), no sockets.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.formats import GEMINI
from gateway.formats.gemini import Gemini, candidate
from gateway.formats.gemini_stream import finished, gemini_usage
from gateway.formats.parts import text_size
from gateway.formats.splice import Diverged, Splice, Transcript, partial_response
from gateway.formats.sse import Event, Kind, Splitter, classify_event, usage_of
from gateway.formats.usage import Usage, from_gemini
from gateway.policy.schema import OutputRecovery
from gateway.resilience import followup
from gateway.resilience.continuation import continuation_request, merge_parts
from gateway.testing.answer import FakeAnswer, FakeToolCall
from gateway.testing.gemini_shapes import gemini_chunks

pytestmark = pytest.mark.fast


class GeminiEndpoint:
    """The endpoint a Gemini client's stream comes through, as a transcript and a splice
    read it (no :class:`~gateway.formats.endpoints.Endpoint` has the format yet)."""

    value = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    fmt: Gemini = GEMINI
    text_key = "content"
    continuable = True


EP = GeminiEndpoint()
T = "The quick brown fox jumps over the lazy dog. Then it rests, 休息一下 🦊."
ORIG, NEW = "resp-orig", "resp-new"
THOUGHT = "**Planning**\n\nA fox, a dog."
CALL = FakeToolCall(name="get_weather", arguments='{"city": "Zürich", "days": 3}', call_id="c1")
VERTEX_TIME = "2023-11-14T22:13:20.000000Z"  # what the fake Vertex writes for CREATED
CREATED = 1700000000


def answer(
    text: str, *, new: bool = False, finish: str = "stop", chunks: int = 8,
    tool: FakeToolCall | None = None,
) -> FakeAnswer:  # fmt: skip
    return FakeAnswer(id=NEW if new else ORIG, model="model-b" if new else "model-a", text=text,
                      finish=finish, prompt_tokens=10, completion_tokens=20,
                      created=CREATED + 99 if new else CREATED, chunks=chunks,
                      tool_call=tool)  # fmt: skip


def classify(raw: bytes) -> Event:
    """An upstream Gemini event as the relay reads it (gateway/formats/sse.py: the event
    with a ``finishReason`` is the final one)."""
    return classify_event(raw, EP)


def test_the_event_with_a_finish_reason_is_final() -> None:
    """The relay sees a Gemini stream's last event as its final one (no ``[DONE]``)."""
    kinds = [classify(e.encode()).kind for e in gemini_chunks(answer(T))]
    assert kinds[-1] is Kind.final and set(kinds[:-1]) == {Kind.data}
    unfinished = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": 7}]}
    assert event(unfinished).kind is Kind.data


def upstream(a: FakeAnswer, **kw: Any) -> list[tuple[Event, bool]]:
    """The answer's events as the relay classifies them, each with its content-delta mark."""
    return [(classify(e.encode()), e.delta) for e in gemini_chunks(a, **kw)]


def event(obj: dict[str, Any]) -> Event:
    return classify(b"data: " + orjson.dumps(obj) + b"\n\n")


def forward(
    t: Transcript, events: list[tuple[Event, bool]], k: int, out: list[bytes]
) -> list[tuple[Event, bool]]:
    """Send events to the client until k content deltas went out (the closing event held
    back, as the relay does); returns the events never sent."""
    seen = 0
    for i, (ev, delta) in enumerate(events):
        if (delta and seen == k) or t.closes(ev):
            return events[i:]
        t.observe(ev)
        out.append(ev.raw)
        seen += delta
    return []


def cut(text: str, k: int, chunks: int = 8, **kw: Any) -> tuple[Transcript, bytes]:
    """The client's stream so far: the original answer up to its k-th content delta."""
    shape = {key: kw.pop(key) for key in ("thought", "signature", "vertex") if key in kw}
    t = Transcript(EP)
    out: list[bytes] = []
    forward(t, upstream(answer(text, chunks=chunks, **kw), **shape), k, out)
    return t, b"".join(out)


def splice(
    t: Transcript, new_text: str, *, regenerate: bool, chunks: int = 5,
    base: Usage | None = None, **shape: Any,
) -> bytes | Diverged:  # fmt: skip
    """Feed a resumed stream (new id, model and time) through a Splice, its usage handed
    to the splice as the relay reads it."""
    sp = Splice(t, EP, regenerate=regenerate, base=base)
    out: list[bytes] = []
    for ev, _ in upstream(answer(new_text, new=True, chunks=chunks), **shape):
        if (u := usage_of(ev.data, EP, sp.usage)) is not None:
            sp.usage = u
        r = sp.feed(ev)
        if isinstance(r, Diverged):
            return r
        out.append(r)
    assert sp.done
    return b"".join(out)


def parse(body: bytes) -> list[dict[str, Any]]:
    s = Splitter()
    events = [classify(raw) for raw in s.feed(body)]
    assert s.pending == b""
    assert all(e.kind in (Kind.data, Kind.final) for e in events)
    return [e.data for e in events]


def check(body: bytes, *, vertex: bool = False) -> str:
    """Assert the client's bytes are one well-formed Gemini stream of the original answer
    (its ids throughout, thoughts only before the text, one final event, last); its text."""
    objs = parse(body)
    assert {o["responseId"] for o in objs} == {ORIG}
    assert {o["modelVersion"] for o in objs} == {"model-a"}
    if vertex:
        assert {o["createTime"] for o in objs} == {VERTEX_TIME}
    ends = [i for i, o in enumerate(objs) if finished(candidate(o))]
    assert ends == [len(objs) - 1]
    texts: list[str] = []
    thoughts_after_text = False
    for o in objs:
        (c,) = o["candidates"]
        for p in (c.get("content") or {}).get("parts", []):
            assert p  # no empty part
            if p.get("thought"):
                thoughts_after_text = thoughts_after_text or any(texts)
            elif "text" in p:
                texts.append(p["text"])
    assert not thoughts_after_text
    return "".join(texts)


def continued(full: str, sent: str) -> str:
    """What a model continuing ``sent`` writes (Gemini sees its prefill untrimmed)."""
    return full[len(sent) :]


def resume_ok(text: str, k: int, *, regenerate: bool, chunks: int = 8, **shape: Any) -> str:
    t, head = cut(text, k, chunks, **shape)
    assert t.resumable
    new = text if regenerate else continued(text, t.text)
    tail = splice(t, new, regenerate=regenerate, **shape)
    assert not isinstance(tail, Diverged), tail
    return check(head + tail, vertex=shape.get("vertex", False))


# --- the transcript of what the client was sent ----------------------------------------


def test_a_text_stream_is_recorded() -> None:
    """The text of its parts, its id and model from the events, closed by the final one."""
    t = Transcript(EP)
    for ev, _ in upstream(answer(T)):
        t.observe(ev)
    assert (t.text, t.id, t.model, t.created) == (T, ORIG, "model-a", None)
    assert t.closed and not t.resumable
    assert t.output == text_size(T) and t.choice_index == 0


def test_vertex_creation_time_is_recorded_and_kept() -> None:
    """Vertex's ``createTime`` is the answer's: a resumed stream's events carry the client's."""
    t, head = cut(T, 3, vertex=True)
    assert t.created == VERTEX_TIME
    tail = splice(t, continued(T, t.text), regenerate=False, vertex=True)
    assert isinstance(tail, bytes) and check(head + tail, vertex=True) == T


def test_thoughts_then_text() -> None:
    """A thought is output besides the text; a stream mid-thought is not resumable (its
    thought cannot be finished), one whose text began is."""
    t = Transcript(EP)
    events = upstream(answer(T), thought=THOUGHT)
    t.observe(events[0][0])
    assert t.reasoning and t.text == "" and t.other == text_size(THOUGHT)
    assert not t.resumable
    t.observe(events[1][0])
    assert t.text and t.resumable


def test_a_function_call_is_a_tool_call() -> None:
    """A function call's name and arguments are output; the stream is no longer resumable."""
    t, _ = cut("", 1, tool=CALL, finish="tool_calls", signature="c2ln")
    assert t.tool and t.id == ORIG and not t.resumable
    assert t.other == text_size(CALL.name + CALL.arguments)


def test_a_cut_answer_holds_its_final_event() -> None:
    """Recorded as the relay does (``record``): the MAX_TOKENS event is held back, not
    recorded; the text before it can be continued."""
    t = Transcript(EP)
    held = [ev for ev, _ in upstream(answer(T, finish="length")) if t.record(ev.kind, ev.data)]
    assert len(held) == 1 and GEMINI.event_cut(held[0].data)
    assert t.text == T and not t.closed and t.resumable


def test_a_closing_event_with_text_is_held_whole() -> None:
    """Gemini's last event often carries the last text: held back with it (the relay's
    ``record`` of a data event, before any hook makes it final), recorded whole when sent."""
    last = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "tail."}]}, "finishReason": "STOP"}
        ],
        "responseId": ORIG,
        "modelVersion": "model-a",
    }
    t, _ = cut("Head, ", 8)
    assert GEMINI.stream_read(t, last, hold=True) is True
    assert t.record(Kind.data, last) is True
    assert t.text == "Head, " and not t.closed
    t.observe(Event(b"", Kind.data, last))
    assert t.text == "Head, tail." and t.closed


def test_several_candidates_are_not_resumable() -> None:
    """A stream of ``candidateCount`` > 1 answers cannot be continued as one."""
    t, _ = cut(T, 2)
    two = {"responseId": ORIG, "candidates": [{"index": 1, "content": {"parts": [{"text": "x"}]}}]}
    t.observe(event(two))
    assert not t.resumable


@pytest.mark.parametrize(
    "part",
    [{"inlineData": {"mimeType": "image/png", "data": "AA=="}},
     {"executableCode": {"language": "PYTHON", "code": "1"}}, {"text": 5}, "x"],
)  # fmt: skip
def test_parts_not_text_end_resumability(part: Any) -> None:
    """An image or code part, a text of another type, a part that is no object: the
    client has something other than text."""
    t, _ = cut(T, 2)
    t.observe(event({"responseId": ORIG, "candidates": [{"content": {"parts": [part]}}]}))
    assert not t.resumable


def test_a_signature_alone_is_no_content() -> None:
    """A part holding only a ``thoughtSignature`` adds nothing."""
    t, _ = cut(T, 2)
    t.observe(event({"responseId": ORIG, "candidates": [{"content": {"parts": [
        {"thoughtSignature": "c2ln"}]}}]}))  # fmt: skip
    assert t.resumable


# --- what one event wrote (the running count of a stream relayed without a transcript) ---


@pytest.mark.parametrize(
    ("shape", "tool", "want"),
    [
        ({}, None, text_size(T)),
        ({"thought": THOUGHT}, None, text_size(THOUGHT + T)),
        ({"signature": "c2ln"}, CALL, text_size(CALL.name + CALL.arguments)),
    ],
    ids=["text", "thought", "call"],
)
def test_the_running_count_and_the_transcript_agree(
    shape: dict[str, Any], tool: FakeToolCall | None, want: int
) -> None:
    """Text, thoughts, a call's name and arguments (as JSON text), counted both ways."""
    a = answer("" if tool else T, tool=tool, finish="tool_calls" if tool else "stop")
    t = Transcript(EP)
    running = 0
    for ev, _ in upstream(a, **shape):
        running += GEMINI.stream_output(ev.data)
        t.observe(ev)
    assert running == t.output == want


@pytest.mark.parametrize(
    "data",
    [
        {"candidates": "x"},
        {"candidates": [None, 3, {"content": []}, {"content": {"parts": "x"}}]},
        {"candidates": [{"content": {"parts": [None, 1, {"text": 5}, {"text": None}]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": "f"}]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"name": 1, "args": 2}}]}}]},
        {"candidates": {"0": {"content": {"parts": [{"text": "x"}]}}}},
        {"usageMetadata": {"promptTokenCount": 1}},
    ],
)
def test_a_field_of_the_wrong_type_counts_nothing(data: dict[str, Any]) -> None:
    """Never raises: the count is read from every event the relay passes on."""
    assert GEMINI.stream_output(orjson.loads(orjson.dumps(data))) == 0


def test_arguments_that_are_not_json_count_their_name() -> None:
    """An object no JSON text can hold (only in memory) counts the call's name alone."""
    call = {"functionCall": {"name": "f", "args": {"x": {1, 2}}}}
    assert GEMINI.stream_output({"candidates": [{"content": {"parts": [call]}}]}) == 1


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["candidates", "content", "parts", "text", "thought", "functionCall",
                         "name", "args", "finishReason", "index", "responseId", "x"]),
        inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, derandomize=True, deadline=None)
@given(data=st.dictionaries(st.sampled_from(["candidates", "responseId", "usageMetadata"]), JSON))
def test_odd_events_never_break_the_rules(data: dict[str, Any]) -> None:
    """Any decoded event: the count never raises, the transcript reads it or finds it
    unreadable, and whether it closes the answer is an answer."""
    assert GEMINI.stream_output(data) >= 0
    t = Transcript(EP)
    t.observe(Event(b"", Kind.data, data))
    assert isinstance(t.closes(Event(b"", Kind.data, data)), bool)
    assert isinstance(t.text, str)


# --- a resumed stream spliced into the client's ------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 7, 8])
@pytest.mark.parametrize("regenerate", [False, True])
def test_a_resumed_stream_is_one_stream(k: int, regenerate: bool) -> None:
    """Continued after k deltas (appended as it comes) or regenerated (passed once it
    covers the text sent): one stream of exactly the answer, the client's ids throughout."""
    assert resume_ok(T, k, regenerate=regenerate) == T


def test_nothing_sent_is_nothing_to_resume() -> None:
    """Gemini has no preamble: before its first event the client has no id, and a
    failure then is retried, not resumed."""
    t, head = cut(T, 0)
    assert head == b"" and t.id is None and not t.resumable


@pytest.mark.parametrize("regenerate", [False, True])
def test_the_resumed_thoughts_are_dropped_once_the_client_had_text(regenerate: bool) -> None:
    """The resumed stream thinks again before its text: the client, which has text, does
    not get those thoughts."""
    t, head = cut(T, 3, thought=THOUGHT)
    new = T if regenerate else continued(T, t.text)
    tail = splice(t, new, regenerate=regenerate, thought="again")
    assert isinstance(tail, bytes) and b"again" not in tail
    assert check(head + tail) == T


def test_thoughts_pass_when_the_client_has_no_output_yet() -> None:
    """Before any output reached the client, a regenerated answer passes whole."""
    t = Transcript(EP)
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}}],
             "responseId": ORIG, "modelVersion": "model-a"}  # fmt: skip
    t.observe(ev := event(first))
    head = ev.raw
    assert t.id == ORIG and t.text == "" and t.resumable
    tail = splice(t, T, regenerate=True, thought=THOUGHT)
    assert isinstance(tail, bytes) and check(head + tail) == T
    assert orjson.dumps(THOUGHT) in tail


def test_a_cut_answer_is_continued_in_the_same_stream() -> None:
    """Cut at MAX_TOKENS (its final event held back, dropped), continued: one stream,
    whose final event is the continuation's, with the signature it carries."""
    t, head = cut(T[:30], 8, finish="length")
    assert t.resumable and t.text == T[:30]
    tail = splice(t, continued(T, T[:30]), regenerate=False, signature="c2ln")
    assert isinstance(tail, bytes) and check(head + tail) == T
    last = parse(tail)[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    assert last["content"]["parts"] == [{"text": "", "thoughtSignature": "c2ln"}]


def test_a_final_event_with_text_passes_its_text_once() -> None:
    """A regenerated answer whose last event carries text and the finish: the text past
    what the client has, then the end."""
    t, head = cut(T, 3)
    sp = Splice(t, EP, regenerate=True)
    whole = {"candidates": [{"content": {"role": "model", "parts": [{"text": T}]},
                             "finishReason": "STOP", "index": 0}], "responseId": NEW}  # fmt: skip
    got = sp.feed(event(whole))
    assert isinstance(got, bytes) and sp.done
    assert check(head + got) == T


def test_a_second_resume_continues_the_same_stream() -> None:
    """The splice keeps the transcript current: a resumed stream can break and resume again."""
    t, head = cut(T, 2)
    sp = Splice(t, EP, regenerate=False)
    out, seen = [head], 0
    for ev, delta in upstream(answer(continued(T, t.text), new=True, chunks=6)):
        if delta and seen == 3:
            break
        r = sp.feed(ev)
        assert isinstance(r, bytes)
        out.append(r)
        seen += delta
    assert not sp.done and t.resumable and T.startswith(t.text) and len(t.text) > len(T) // 4
    tail = splice(t, T, regenerate=True)
    assert isinstance(tail, bytes) and check(b"".join(out) + tail) == T


def test_a_diverging_regeneration_is_diverged() -> None:
    """A regenerated text that differs from the text sent: Diverged, nothing passed on."""
    t, _ = cut(T, 3)
    sent = t.text
    sp = Splice(t, EP, regenerate=True)
    other = sent[:5] + "X" + sent[6:] + " and more"
    results = [sp.feed(ev) for ev, _ in upstream(answer(other, new=True))]
    first = next(i for i, r in enumerate(results) if isinstance(r, Diverged))
    assert all(r == b"" for r in results[:first])
    assert all(r is results[first] for r in results[first:])
    assert "character 5" in results[first].reason  # type: ignore[union-attr]
    assert t.text == sent


def test_a_regeneration_too_short_is_diverged() -> None:
    t, _ = cut(T, 5)
    r = splice(t, t.text[:-3], regenerate=True)
    assert isinstance(r, Diverged) and "ended" in r.reason


def test_a_regeneration_calling_a_tool_is_diverged() -> None:
    """A regenerated answer that calls a function instead of repeating the text."""
    t, _ = cut(T, 2)
    sp = Splice(t, EP, regenerate=True)
    tool = answer("", new=True, tool=CALL, finish="tool_calls")
    results = [sp.feed(ev) for ev, _ in upstream(tool, signature="c2ln")]
    assert any(isinstance(r, Diverged) and "function call" in r.reason for r in results)


def test_a_continuation_calling_a_tool_passes_it_after_the_text() -> None:
    """A continued answer that ends in a function call: the call reaches the client."""
    t, head = cut(T, 3)
    sp = Splice(t, EP, regenerate=False)
    call = {"candidates": [{"content": {"role": "model", "parts": [
        {"text": continued(T, t.text)}, {"functionCall": {"name": "f", "args": {}}}]},
        "finishReason": "STOP"}], "responseId": NEW}  # fmt: skip
    got = sp.feed(event(call))
    assert isinstance(got, bytes) and check(head + got) == T
    assert t.tool and t.closed


def test_events_without_candidates_pass_with_the_client_ids() -> None:
    """A chunk of usage or prompt feedback alone has no parts to splice: it passes."""
    t, _ = cut(T, 3)
    sp = Splice(t, EP, regenerate=False)
    got = sp.feed(event({"usageMetadata": {"promptTokenCount": 3}, "responseId": NEW}))
    assert isinstance(got, bytes)
    assert parse(got) == [{"usageMetadata": {"promptTokenCount": 3}, "responseId": ORIG,
                           "modelVersion": "model-a"}]  # fmt: skip


TEXTS = st.text(alphabet=st.sampled_from(list("ab .,\n\t é🦊")), min_size=0, max_size=60)


@settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    text=TEXTS.filter(bool),
    k=st.integers(1, 10),
    chunks=st.integers(1, 12),
    new_chunks=st.integers(1, 12),
    regenerate=st.booleans(),
)
def test_random_texts_and_cuts(
    text: str, k: int, chunks: int, new_chunks: int, regenerate: bool
) -> None:
    """Any text, cut anywhere, resumed either way, reaches the client whole and once."""
    t, head = cut(text, k, chunks)
    assert t.resumable and text.startswith(t.text)
    new = text if regenerate else continued(text, t.text)
    tail = splice(t, new, regenerate=regenerate, chunks=new_chunks)
    assert isinstance(tail, bytes)
    assert check(head + tail) == text == t.text


@settings(max_examples=150, derandomize=True, deadline=None)
@given(text=TEXTS.filter(bool), other=TEXTS, k=st.integers(1, 10))
def test_random_regeneration_diverges_or_matches(text: str, other: str, k: int) -> None:
    """A regenerated text is spliced when it starts with the text sent, else Diverged."""
    t, head = cut(text, k)
    sent = t.text
    tail = splice(t, other, regenerate=True)
    if other.startswith(sent):
        assert isinstance(tail, bytes) and check(head + tail) == other
    else:
        assert isinstance(tail, Diverged)


def test_google_sdk_reads_the_spliced_stream() -> None:
    """Each event is a ``GenerateContentResponse`` to google-genai, the text its chunks'."""
    types = pytest.importorskip("google.genai.types")
    t, head = cut(T, 3, thought=THOUGHT)
    tail = splice(t, continued(T, t.text), regenerate=False, signature="c2ln")
    assert isinstance(tail, bytes)
    chunks = [types.GenerateContentResponse.model_validate(o) for o in parse(head + tail)]
    assert "".join(c.text or "" for c in chunks) == T
    assert {c.response_id for c in chunks} == {ORIG}
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


# --- the usage a resumed stream tells the client ----------------------------------------

BASE = Usage(100, 16, cache_read=30, reasoning=2)  # the parts before


def last_usage(body: bytes) -> Usage:
    """What the client's SDK ends with: the last ``usageMetadata`` (each counts the answer
    so far)."""
    return from_gemini([o for o in parse(body) if "usageMetadata" in o][-1]["usageMetadata"])


def test_the_resumed_usage_is_the_parts_summed() -> None:
    """Every usage block of the resumed stream tells the parts before it plus its own so far:
    the client's last is the whole answer's, its total their sum."""
    t, head = cut(T, 3, thought=THOUGHT)
    tail = splice(t, continued(T, t.text), regenerate=False, base=BASE, thought="again")
    assert isinstance(tail, bytes) and check(head + tail) == T
    (last, _) = upstream(answer(T, new=True), thought="again")[-1]  # counts, not text
    own = from_gemini(last.data["usageMetadata"])  # the resumed stream's own, at its end
    assert own.reasoning
    got = last_usage(tail)
    assert (got.input, got.output) == (BASE.input + own.input, BASE.output + own.output)
    assert (got.cache_read, got.reasoning) == (30, 2 + (own.reasoning or 0))
    for o in parse(tail):
        u = o["usageMetadata"]
        assert u["totalTokenCount"] == u["promptTokenCount"] + u["candidatesTokenCount"] + u.get(
            "thoughtsTokenCount", 0
        )
        assert u["promptTokenCount"] >= BASE.input


def test_without_a_base_the_usage_passes_as_it_came() -> None:
    t, _ = cut(T, 3)
    tail = splice(t, continued(T, t.text), regenerate=False)
    assert isinstance(tail, bytes)
    got = last_usage(tail)
    assert (got.input, got.output, got.cache_read) == (10, 20, 0)


@pytest.mark.parametrize(
    "block",
    [
        {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10},
        {"promptTokenCount": 7, "candidatesTokenCount": 3, "thoughtsTokenCount": 4,
         "cachedContentTokenCount": 5, "toolUsePromptTokenCount": 2, "totalTokenCount": 16,
         "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 7}],
         "trafficType": "ON_DEMAND"},
        {"trafficType": "ON_DEMAND"},
    ],
)  # fmt: skip
def test_gemini_usage_reads_back_as_the_sum(block: dict[str, Any]) -> None:
    """The written block reads back as the counts written (the tool prompt folded into
    the prompt's, the breakdowns of the provider's own counts left out), its other fields
    kept."""
    total = from_gemini(block)
    total.add(BASE)
    out = gemini_usage(block, total)
    back = from_gemini(out)
    assert (back.input, back.output, back.cache_read) == (
        total.input,
        total.output,
        30 + (block.get("cachedContentTokenCount") or 0),
    )
    assert back.reasoning == total.reasoning
    assert out["totalTokenCount"] == total.input + total.output
    assert "toolUsePromptTokenCount" not in out and "promptTokensDetails" not in out
    assert out.get("trafficType") == block.get("trafficType")


def test_no_thoughts_no_thought_count() -> None:
    """A total without reasoning writes no ``thoughtsTokenCount``."""
    out = gemini_usage({"thoughtsTokenCount": 9}, Usage(5, 6))
    assert out == {"promptTokenCount": 5, "candidatesTokenCount": 6, "totalTokenCount": 11}


def test_a_usage_of_the_wrong_type_passes_as_it_came() -> None:
    t, _ = cut(T, 3)
    sp = Splice(t, EP, regenerate=False, base=BASE)
    got = sp.feed(event({"usageMetadata": "x", "responseId": NEW}))
    assert isinstance(got, bytes) and parse(got)[0]["usageMetadata"] == "x"


# --- a cut JSON answer continued: text_answer and merge ------------------------------------

REQUEST = {"contents": [{"role": "user", "parts": [{"text": "Write an essay."}]}]}
POLICY = OutputRecovery(max_continuations=1000, respect_client_max_tokens=False)


def gemini_answer(
    text: str, finish: str | None = "MAX_TOKENS", n: int = 0, thought: str | None = None,
    signature: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    parts: list[dict[str, Any]] = [{"text": thought, "thought": True}] if thought else []
    parts.append({"text": text, **({"thoughtSignature": signature} if signature else {})})
    c: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        c["finishReason"] = finish
    usage = {"promptTokenCount": 100 + n, "candidatesTokenCount": 50, "totalTokenCount": 150 + n}
    return {"candidates": [c], "usageMetadata": usage, "modelVersion": "gemini-2.5-pro",
            "responseId": f"resp-{n}"}  # fmt: skip


def said(entry: dict[str, Any]) -> str:
    """The text of the follow-up request's model turn: Gemini's ``parts``, or the chat
    message (``role: assistant``, ``content``) ``continuation_request`` writes for every
    format so far (read either way, so the tests hold when it writes Gemini's turn)."""
    if "parts" in entry:
        return "".join(p.get("text", "") for p in entry["parts"])
    return str(entry.get("content", ""))


def test_text_answer_is_what_the_stream_sent() -> None:
    """The partial answer of a transcript: its text, ids and model, not finished, not cut."""
    t, _ = cut("Partial answer, then ", 8, chunks=4, vertex=True)
    part = partial_response(t)
    assert GEMINI.answer_text(part) == "Partial answer, then "
    assert (part["responseId"], part["modelVersion"], part["createTime"]) == (
        ORIG, "model-a", VERTEX_TIME)  # fmt: skip
    assert "finishReason" not in candidate(part) and not GEMINI.cut_at_length(part)
    follow = continuation_request(REQUEST, [part], GEMINI, prefill=True)
    assert follow["contents"][0] == REQUEST["contents"][0]
    assert said(follow["contents"][-1]) == "Partial answer, then "


def test_merge_joins_the_text_keeps_thoughts_and_takes_the_last_finish() -> None:
    """The first part's identity and thoughts, one text part (its signature kept) where
    the text was, the last part's finish reason: no longer cut."""
    parts = [
        gemini_answer("Once ", thought="plan", signature="c2ln", n=0),
        gemini_answer("upon a ", n=1),
        gemini_answer("time.", "STOP", n=2),
    ]
    snapshot = copy.deepcopy(parts)
    merged = merge_parts(parts, GEMINI)
    assert parts == snapshot
    assert merged["responseId"] == "resp-0" and merged["modelVersion"] == "gemini-2.5-pro"
    c = merged["candidates"][0]
    assert c["content"]["parts"] == [
        {"text": "plan", "thought": True},
        {"text": "Once upon a time.", "thoughtSignature": "c2ln"},
    ]
    assert c["finishReason"] == "STOP" and c["index"] == 0
    assert GEMINI.answer_text(merged) == "Once upon a time."
    assert not GEMINI.cut_at_length(merged)


def test_merge_of_text_split_over_parts_and_of_odd_answers() -> None:
    """Several text parts (the signature on an empty last one) become one; an answer
    without candidates or content gets one text part; the last part's finish message
    replaces the first's, or goes."""
    first = gemini_answer("a")
    first["candidates"][0]["content"]["parts"].append({"text": "", "thoughtSignature": "s"})
    first["candidates"][0]["finishMessage"] = "cut"
    merged = merge_parts([first, gemini_answer("b", "STOP")], GEMINI)
    assert merged["candidates"][0]["content"]["parts"] == [{"text": "ab", "thoughtSignature": "s"}]
    assert "finishMessage" not in merged["candidates"][0]
    for odd in ({"responseId": "x"}, {"candidates": [None]}, {"candidates": [{"content": 3}]}):
        out = merge_parts([odd, gemini_answer("b", "STOP")], GEMINI)
        assert GEMINI.answer_text(out) == "b" and candidate(out)["finishReason"] == "STOP"


ESSAY = " ".join(f"word{i}" for i in range(120)) + "\n\ndef f():\n    return 1\n"


def fake_model(request: dict[str, Any], chunk: int) -> dict[str, Any]:
    """A model that writes ESSAY ``chunk`` characters at a time, resuming after the text of
    the request's last model turn."""
    turns = [e for e in request["contents"] if e.get("role") in ("model", "assistant")]
    before = said(turns[-1]) if turns else ""
    assert ESSAY.startswith(before)
    text = ESSAY[len(before) : len(before) + chunk]
    return gemini_answer(text, "STOP" if len(before) + chunk >= len(ESSAY) else "MAX_TOKENS")


@pytest.mark.parametrize("prefill", [True, False])
def test_continuing_until_done_gives_back_the_whole_answer(prefill: bool) -> None:
    """Driving the loop as the engine does (the cut read, the follow-up asked, the parts
    merged) reproduces the full answer exactly, at any cut."""
    for chunk in range(6, 130, 7):
        parts = [fake_model(REQUEST, chunk)]
        while True:
            last = parts[-1]
            d = followup.continuation(REQUEST, GEMINI, POLICY, len(parts) - 1,
                                      cut=GEMINI.cut_at_length(last),
                                      text=GEMINI.answer_text(last))  # fmt: skip
            if not isinstance(d, followup.Continue):
                break
            parts.append(fake_model(continuation_request(REQUEST, parts, GEMINI,
                                                         prefill=prefill), chunk))  # fmt: skip
        merged = merge_parts(parts, GEMINI)
        assert GEMINI.answer_text(merged) == ESSAY, chunk
        assert candidate(merged)["finishReason"] == "STOP"


def test_a_capped_request_is_not_continued() -> None:
    """The client's own ``maxOutputTokens`` is respected by default."""
    capped = {**REQUEST, "generationConfig": {"maxOutputTokens": 64}}
    d = followup.continuation(capped, GEMINI, OutputRecovery(), 0, cut=True, text="x")
    assert isinstance(d, followup.Stop) and d.reason == "client_max_tokens"
