"""The gateway's token estimate as ``count_tokens`` answers it: text outside ASCII sized
by its UTF-8 bytes (and a summary's transcript cut in the same units), the corpus of
bench/count_error.py estimated whole."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.formats import CHAT, MESSAGES
from gateway.live.counting import ESTIMATE_HEADER, estimate
from gateway.policy.schema import Compaction
from gateway.resilience.compaction import SNIP_MARKER, summary_request
from gateway.resilience.conversation import estimate_tokens, text_size

pytestmark = pytest.mark.fast

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "count_corpus"
ZH = "请把下面这段话改写得更简洁，保留原意。"
RU = "Привет всем, встреча в пятницу."


def _count(body: dict[str, Any]) -> int:
    out = estimate(body)
    assert out.headers == {ESTIMATE_HEADER: "true"}
    n: int = orjson.loads(out.body)["input_tokens"]
    return n


def test_ascii_text_is_a_token_per_four_characters() -> None:
    """An ASCII message is ceil(characters / 4) plus 4 for the message."""
    text = "What is the difference between a process and a thread?"
    assert _count({"messages": [{"role": "user", "content": text}]}) == math.ceil(len(text) / 4) + 4


def test_text_outside_ascii_sized_by_utf8_bytes() -> None:
    """A Chinese character weighs 3 (its UTF-8 bytes), a Cyrillic one 2, so Chinese is
    no longer counted at a quarter token per character."""
    assert text_size(ZH) == 3 * len(ZH) and text_size(RU) == len(RU.encode())
    body = {"messages": [{"role": "user", "content": ZH}]}
    assert _count(body) == math.ceil(len(ZH.encode()) / 4) + 4 > len(ZH) // 2


def test_tool_json_outside_ascii_sized_by_utf8_bytes() -> None:
    """Tool definitions and tool_use arguments in Chinese are sized by their JSON's bytes
    (compact JSON, as orjson writes it)."""
    tools = [{"name": "搜索", "description": ZH, "input_schema": {"type": "object"}}]
    call = {"type": "tool_use", "id": "toolu_1", "name": "搜索", "input": {"q": ZH}}
    body = {"tools": tools, "messages": [{"role": "assistant", "content": [call]}]}
    size = len(orjson.dumps(tools)) + len("搜索".encode()) + len(orjson.dumps({"q": ZH}))
    assert estimate_tokens(body, MESSAGES) == math.ceil(size / 4) + 4


def test_bench_corpus_is_estimated() -> None:
    """Every request body of the bench corpus is a Messages body the estimate counts."""
    bodies = sorted(CORPUS.glob("*.json"))
    assert len(bodies) >= 15
    for path in bodies:
        body = json.loads(path.read_text(encoding="utf-8"))
        assert body["messages"] and _count(body) > 10, path.name


def test_summary_transcript_sized_as_the_estimate_sizes_it() -> None:
    """A Chinese conversation's summary transcript is cut to the size budget in estimate
    units (a character 3), so it carries a third of the characters an English one would."""
    policy = Compaction(keep_recent=2)
    turns: list[dict[str, Any]] = [{"role": "user", "content": "Start."}]
    for i in range(12):
        turns.append({"role": "assistant", "content": f"{i}" + ZH * 40})
        turns.append({"role": "user", "content": f"{i}" + ZH * 40})
    request = summary_request({"messages": turns}, CHAT, policy, "m", max_input_chars=3_000)
    assert request is not None
    content = request["messages"][1]["content"]
    transcript = content.split("<transcript>\n", 1)[1].rsplit("\n</transcript>", 1)[0]
    assert SNIP_MARKER.split("{")[0] in transcript  # it was cut
    assert 2_500 < text_size(transcript) <= 3_000 and len(transcript) <= 1_100


@pytest.mark.parametrize(
    ("answer", "n"),
    [
        ({"input_tokens": 12}, 12),
        ({"inputTokens": 7}, 7),
        ({"totalTokens": 31, "promptTokensDetails": []}, 31),
        ({"totalTokens": 10**30}, None),  # past 64 bits: no JSON encoder writes it
        ({"totalTokens": -1}, None),
        ({"totalTokens": True}, None),
        ({"totalTokens": "31"}, None),
    ],
)
def test_a_providers_count_is_a_count_or_none(answer: dict[str, Any], n: int | None) -> None:
    """A provider's count (Anthropic, Bedrock, Gemini) reaches the client only when it is a
    whole number the gateway can write back; anything else is a broken provider's answer
    (retried like a server error)."""
    from gateway.live.counting import _input_tokens

    assert _input_tokens(answer) == n
