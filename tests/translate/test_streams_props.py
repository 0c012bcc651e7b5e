"""Properties of stream translation: byte slicing changes nothing; translating to another
format and back keeps the answer; nothing an upstream sends makes the translator raise."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.formats.sse import Splitter
from gateway.formats.usage import Usage
from gateway.translate.streams import WRITERS
from tests.translate.test_streams import (
    CHECK,
    CREATED,
    EXPECT,
    FORMATS,
    MODEL,
    events,
    fixture,
    parse,
    summarize,
    translate,
    translator,
)

pytestmark = pytest.mark.fast

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sliced(raw: bytes, cuts: list[int], source: str, target: str) -> list[bytes]:
    """Feed ``raw`` to a Splitter in the pieces ``cuts`` makes, each event to a translator."""
    t = translator(source, target)
    splitter = Splitter()
    out: list[bytes] = []
    bounds = [0, *sorted(set(cuts)), len(raw)]
    for a, b in itertools.pairwise(bounds):
        for ev in splitter.feed(raw[a:b]):
            out += t.feed(ev)
    assert splitter.pending == b""
    return out + t.finish()


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_every_byte_boundary_gives_the_same_events(name: str, target: str) -> None:
    """Fed one byte at a time, a stream translates to exactly the events it gives whole."""
    raw = fixture(name)
    whole, _ = translate(raw, EXPECT[name]["format"], target)
    assert sliced(raw, list(range(1, len(raw))), EXPECT[name]["format"], target) == whole


@FAST
@given(
    name=st.sampled_from(sorted(EXPECT)),
    target=st.sampled_from(FORMATS),
    data=st.data(),
)
def test_any_slicing_gives_the_same_events(name: str, target: str, data: st.DataObject) -> None:
    """Cut anywhere, in any number of pieces, a stream translates to the same events."""
    raw = fixture(name)
    cuts = data.draw(st.lists(st.integers(1, len(raw) - 1), max_size=60))
    whole, _ = translate(raw, EXPECT[name]["format"], target)
    assert sliced(raw, cuts, EXPECT[name]["format"], target) == whole


# ---------------------------------------------------------------- round trips

IDS = st.from_regex(r"(call|toolu)_[A-Za-z0-9]{1,16}", fullmatch=True)
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
JSON_VALUES = st.one_of(
    st.integers(-(10**6), 10**6), st.text(max_size=12), st.booleans(), st.none()
)
ARGS = st.dictionaries(st.text(min_size=1, max_size=6), JSON_VALUES, min_size=1, max_size=3)


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """A neutral answer: parts in order (text, reasoning, tool calls with argument JSON in
    pieces), its stop reason and usage."""
    parts: list[tuple[Any, ...]] = []
    for kind in draw(st.lists(st.sampled_from(["text", "reasoning", "call"]), max_size=6)):
        if kind == "call":
            args = orjson.dumps(draw(ARGS)).decode()
            cuts = sorted(set(draw(st.lists(st.integers(1, len(args) - 1), max_size=3))))
            bounds = [0, *cuts, len(args)]
            pieces = [args[a:b] for a, b in itertools.pairwise(bounds)]
            parts.append(("call", draw(IDS), draw(NAMES), pieces))
        else:
            parts.append(
                (kind, draw(st.lists(st.text(min_size=1, max_size=15), min_size=1, max_size=3)))
            )
    ids = [p[1] for p in parts if p[0] == "call"]
    if len(set(ids)) != len(ids):
        parts = [p for p in parts if p[0] != "call"]
    calls = any(p[0] == "call" for p in parts)
    stop = draw(
        st.sampled_from(
            ["tool_use", "max_tokens"] if calls else ["end_turn", "max_tokens", "refusal"]
        )
    )
    total = draw(st.integers(0, 10**6))
    usage = Usage(total, draw(st.integers(0, 10**5)), draw(st.integers(0, total)))
    return {
        "parts": parts,
        "stop": stop,
        "usage": usage,
        "id": draw(st.from_regex(r"[A-Za-z0-9]{1,20}", fullmatch=True)),
    }


def render(answer: dict[str, Any], fmt: str) -> bytes:
    """The answer as an upstream of ``fmt`` would stream it (through that format's writer)."""
    w = WRITERS[fmt](MODEL, True, CREATED)
    w.start({"chat": "chatcmpl-", "messages": "msg_", "responses": "resp_"}[fmt] + answer["id"])
    for part in answer["parts"]:
        if part[0] == "text":
            for t in part[1]:
                w.text(t)
        elif part[0] == "reasoning":
            for t in part[1]:
                w.reasoning(t)
        else:
            _, call_id, name, pieces = part
            w.tool_start(call_id, call_id, name)
            for p in pieces:
                w.tool_args(call_id, p)
    w.usage = answer["usage"]
    w.stop = answer["stop"]
    w.end()
    return b"".join(w.out)


def neutral(answer: dict[str, Any]) -> dict[str, Any]:
    parts = answer["parts"]
    return {
        "text": "".join(t for p in parts if p[0] == "text" for t in p[1]),
        "reasoning": "".join(t for p in parts if p[0] == "reasoning" for t in p[1]),
        "calls": [(p[1], p[2], orjson.loads("".join(p[3]))) for p in parts if p[0] == "call"],
        "stop": answer["stop"],
        "usage": (answer["usage"].input, answer["usage"].output),
    }


def said(fmt: str, out: list[bytes]) -> dict[str, Any]:
    got = summarize(fmt, out)
    got.pop("signature", None)
    if got["usage"] is None:
        got["usage"] = (0, 0)
    return got


PAIRS = [(a, b) for a in FORMATS for b in FORMATS if a != b]


@FAST
@given(answer=answers(), pair=st.sampled_from(PAIRS))
def test_there_and_back_keeps_the_answer(answer: dict[str, Any], pair: tuple[str, str]) -> None:
    """A -> B -> A keeps text, reasoning, tool calls (ids, names, argument JSON), stop reason
    and usage (cached tokens included); B says the same in its own valid stream."""
    a, b = pair
    raw = render(answer, a)
    want = neutral(answer)
    assert said(a, events(raw)) == want
    there, t1 = translate(raw, a, b)
    CHECK[b](there)
    assert said(b, there) == want
    back, t2 = translate(b"".join(there), b, a)
    CHECK[a](back)
    assert said(a, back) == want
    for t in (t1, t2):
        assert t.usage is not None
        assert (t.usage.input, t.usage.output, t.usage.cache_read) == (
            answer["usage"].input, answer["usage"].output, answer["usage"].cache_read)  # fmt: skip
        assert t.malformed == 0


@FAST
@given(answer=answers(), order=st.permutations(FORMATS))
def test_a_round_of_all_three_formats_keeps_the_answer(
    answer: dict[str, Any], order: list[str]
) -> None:
    """Through all three formats in any order and back to the first, the answer is kept."""
    a, b, c = order
    raw = render(answer, a)
    out, _ = translate(raw, a, b)
    out, _ = translate(b"".join(out), b, c)
    out, _ = translate(b"".join(out), c, a)
    assert said(a, out) == neutral(answer)


# ---------------------------------------------------------------- robustness

SSE_PIECES = st.sampled_from(
    [b"data: ", b"event: ", b"{", b"}", b'"type":', b'"choices":', b'"delta":', b'"index":0',
     b'"content_block_delta"', b'"response.output_text.delta"', b'"message_stop"', b"[", b"]",
     b",", b"null", b"1", b'"x"', b"\n", b":", b"[DONE]", b'"error"', b'"response.completed"']
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    source=st.sampled_from(FORMATS),
    target=st.sampled_from(FORMATS),
    junk=st.lists(
        st.one_of(st.binary(max_size=40), st.lists(SSE_PIECES, max_size=12).map(b"".join)),
        max_size=12,
    ),
)
def test_nothing_upstream_makes_it_raise(source: str, target: str, junk: list[bytes]) -> None:
    """Whatever bytes come, the translator never raises and only ever emits whole events."""
    t = translator(source, target)
    splitter = Splitter()
    out: list[bytes] = []
    for piece in junk:
        for ev in splitter.feed(piece + b"\n\n"):
            out += t.feed(ev)
    out += t.finish()
    for ev in out:
        assert ev.endswith(b"\n\n") and b"\n\n" not in ev[:-2]


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


TEXT_KEYS = frozenset(
    {"text", "thinking", "partial_json", "signature", "arguments", "call_id", "name", "id",
     "reasoning_content", "refusal", "item_id", "model", "type"}
)  # fmt: skip


def _typed(obj: Any) -> None:
    """Every field a client reads as text is text."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in TEXT_KEYS:
                assert isinstance(v, str), (k, v)
            elif k == "delta":
                assert isinstance(v, str | dict), (k, v)
            elif k == "content":
                assert v is None or isinstance(v, str | list), (k, v)
            _typed(v)
    elif isinstance(obj, list):
        for v in obj:
            _typed(v)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(EXPECT)),
    target=st.sampled_from(FORMATS),
    data=st.data(),
    value=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4)),
        lambda c: st.one_of(
            st.lists(c, max_size=2), st.dictionaries(st.text(max_size=3), c, max_size=2)
        ),
        max_leaves=4,
    ),
)
def test_a_field_of_any_type_never_breaks_the_output(
    name: str, target: str, data: st.DataObject, value: Any
) -> None:
    """One field of a real stream replaced by a value of any type: the translator does not
    raise, and what it emits is whole events whose text fields are text."""
    evs = events(fixture(name))
    i = data.draw(st.integers(0, len(evs) - 1))
    raw = evs[i]
    head, _, payload = raw.partition(b"data: ")
    if payload.strip() == b"[DONE]":
        return
    obj = orjson.loads(payload)
    path = data.draw(st.sampled_from(_leaves(obj)))
    evs[i] = head + b"data: " + orjson.dumps(_set(obj, path, value)) + b"\n\n"
    t = translator(EXPECT[name]["format"], target)
    out = [b for ev in evs for b in t.feed(ev)] + t.finish()
    for ev in out:
        assert ev.endswith(b"\n\n") and b"\n\n" not in ev[:-2]
    for _, d in parse(out):
        if d != "[DONE]":
            _typed(d)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_every_field_of_the_wrong_type_never_breaks_the_output(name: str) -> None:
    """Each field of each kind of event of a real stream, in turn, replaced by a number, an
    object and a bool (an int to Python, not to JSON): no raise, whole events, text fields
    text, for every client format."""
    evs = events(fixture(name))
    seen: set[tuple[Any, ...]] = set()
    for i, raw in enumerate(evs):
        head, _, payload = raw.partition(b"data: ")
        if payload.strip() == b"[DONE]":
            continue
        obj = orjson.loads(payload)
        for path in _leaves(obj):
            shape = (obj.get("type"), *(p for p in path if not isinstance(p, int)))
            if shape in seen:
                continue
            seen.add(shape)
            for value in (7, {"a": 1}, True):
                mutated = [*evs]
                mutated[i] = (
                    head
                    + b"data: "
                    + orjson.dumps(_set(orjson.loads(payload), path, value))
                    + b"\n\n"
                )
                for target in FORMATS:
                    t = translator(EXPECT[name]["format"], target)
                    out = [b for ev in mutated for b in t.feed(ev)] + t.finish()
                    for _, d in parse(out):
                        if d != "[DONE]":
                            _typed(d)
