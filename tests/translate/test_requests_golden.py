"""Golden tables: the providers' own documented request examples (each fixture names its
source), translated to both other formats, checked field by field, against the official
SDKs' request types, and translated back."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import Refused
from gateway.translate.requests import translate
from tests.translate.test_requests_helpers import (
    ANTHROPIC_SAMPLING,
    NORMAL,
    Mismatch,
    check_request,
    fixture,
    fixtures,
)

pytestmark = pytest.mark.fast

FORMAT = {"chat": "chat", "responses": "responses", "anthropic": "messages"}  # by fixture prefix
NAMES = fixtures("requests")
CASES = [
    (name, target)
    for name in NAMES
    for target in ("chat", "responses", "messages")
    if target != FORMAT[name.split("_")[0]]
]


def source_format(name: str) -> str:
    return FORMAT[name.split("_")[0]]


def extra_keys(fmt: str) -> frozenset[str]:
    return ANTHROPIC_SAMPLING if fmt == "messages" else frozenset()


def test_every_fixture_names_its_source() -> None:
    """Each fixture records the documentation page it was taken from."""
    for name in NAMES:
        source = fixture("requests", name)["source"]
        assert (
            "https://platform.openai.com/docs/" in source or "https://docs.anthropic.com/" in source
        )


#: Where the documented example leaves out a key that the SDK's TypedDict requires (the
#: API defaults it): the key, put in. The translation's own output always has it.
SDK_STRICTER: dict[str, Any] = {
    "responses_functions": lambda b: b["tools"][0].update(strict=None),
    "responses_image_input": lambda b: b["input"][0]["content"][1].update(detail="auto"),
}


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_a_valid_request(name: str) -> None:
    """The documented example itself is valid per the SDK's request type."""
    fmt = source_format(name)
    body = fixture("requests", name)["body"]
    if name in SDK_STRICTER:
        with pytest.raises(Mismatch):
            check_request(fmt, body, extra_keys(fmt))
        SDK_STRICTER[name](body)
    check_request(fmt, body, extra_keys(fmt))


@pytest.mark.parametrize(("name", "target"), CASES)
def test_translation_matches_the_golden_body(name: str, target: str) -> None:
    """The translated body, field by field, and the dropped names are the recorded ones."""
    data = fixture("requests", name)
    expect = data["expect"][target]
    if "refused" in expect:
        with pytest.raises(Refused) as info:
            translate(data["body"], source_format(name), target)
        assert info.value.field == expect["refused"]
        assert info.value.status == 400
        return
    body, _, drops = translate(data["body"], source_format(name), target)
    assert body == expect["body"]
    assert drops.names == expect["dropped"]


TRANSLATED = [c for c in CASES if "refused" not in fixture("requests", c[0])["expect"][c[1]]]


@pytest.mark.parametrize(("name", "target"), TRANSLATED)
def test_translation_is_valid_per_sdk(name: str, target: str) -> None:
    """What is sent is a valid request of the provider's format per its official SDK."""
    body, _, _ = translate(fixture("requests", name)["body"], source_format(name), target)
    check_request(target, body, extra_keys(target))


def _cap(field: str, value: int) -> Any:
    def patch(b: dict[str, Any]) -> None:
        b.setdefault(field, value)

    return patch


#: What a round trip documentedly changes (the rule table), per fixture or per
#: (fixture, format passed through): applied to the original before comparing.
LOSSES: dict[Any, Any] = {
    "anthropic_stop_sequences": lambda b: b.pop("top_k"),  # dropped
    "anthropic_system_cache": lambda b: b["system"][1].pop("cache_control"),  # dropped
    # a budget of 10000 is effort medium, which is a budget of 8192
    "anthropic_thinking": lambda b: b.update(thinking={"type": "enabled", "budget_tokens": 8192}),
    # OpenAI's own item ids and statuses are not carried
    "responses_function_output": lambda b: [b["input"][1].pop(k) for k in ("id", "status")],
    # no cap given: Anthropic gets room for the thinking budget (16384) and an answer
    ("responses_reasoning", "messages"): _cap("max_output_tokens", 20480),
    # the hosted search tool is dropped (offered, not forced): no tools come back
    "responses_web_search": lambda b: b.pop("tools"),
}
for _name in NAMES:  # Anthropic requires a cap: the default comes back
    if (_name, "messages") not in LOSSES and not _name.startswith("messages"):
        LOSSES[_name, "messages"] = _cap(
            "max_tokens" if _name.startswith("chat") else "max_output_tokens", 4096
        )


@pytest.mark.parametrize(("name", "target"), TRANSLATED)
def test_translation_round_trips(name: str, target: str) -> None:
    """Translated there and back, the request is the original, up to the documented
    representation choices (the NORMAL forms) and losses (LOSSES)."""
    data = fixture("requests", name)
    src = source_format(name)
    there, _, _ = translate(data["body"], src, target)
    back, _, _ = translate(there, target, src)
    original = NORMAL[src](data["body"])
    for key in (name, (name, target)):
        if key in LOSSES:
            LOSSES[key](original)
    assert NORMAL[src](back) == original


# ---------------------------------------------------------------- key fields, spelled out


def go(name: str, target: str) -> dict[str, Any]:
    body, _, _ = translate(fixture("requests", name)["body"], source_format(name), target)
    return body


def test_chat_system_message_becomes_anthropic_system_and_responses_instructions() -> None:
    """A chat system message is Anthropic's ``system`` and the Responses ``instructions``."""
    assert go("chat_default", "messages")["system"] == "You are a helpful assistant."
    assert go("chat_default", "messages")["messages"] == [{"role": "user", "content": "Hello!"}]
    assert go("chat_default", "responses")["instructions"] == "You are a helpful assistant."


def test_anthropic_system_blocks_become_one_system_message() -> None:
    """Anthropic system text blocks become one chat system message with one part each."""
    body = go("anthropic_system_cache", "chat")
    assert body["messages"][0]["role"] == "system"
    assert [p["text"] for p in body["messages"][0]["content"]][1].startswith("<the entire")


def test_chat_tools_become_anthropic_input_schema_and_flat_responses_tools() -> None:
    """``function.parameters`` is Anthropic's ``input_schema`` and Responses' ``parameters``."""
    params = fixture("requests", "chat_functions")["body"]["tools"][0]["function"]["parameters"]
    ant = go("chat_functions", "messages")["tools"][0]
    assert ant["name"] == "get_current_weather"
    assert ant["input_schema"] == params
    resp = go("chat_functions", "responses")["tools"][0]
    assert (resp["type"], resp["name"], resp["parameters"]) == ("function", ant["name"], params)
    assert resp["strict"] is False  # explicit: Responses would make it strict


def test_tool_call_and_result_keep_their_ids() -> None:
    """A chat tool call and its ``role: tool`` result become a tool_use and a tool_result
    with the same id in a user message, and a function_call / function_call_output pair."""
    ant = go("chat_tool_result", "messages")["messages"]
    assert ant[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
             "input": {"location": "Boston, MA"}},
        ],
    }  # fmt: skip
    assert ant[2]["role"] == "user"
    assert ant[2]["content"][0]["tool_use_id"] == "call_abc123"
    resp = go("chat_tool_result", "responses")["input"]
    assert [i["type"] for i in resp] == ["message", "function_call", "function_call_output"]
    assert resp[1]["call_id"] == resp[2]["call_id"] == "call_abc123"


def test_parallel_tool_results_share_one_user_message_before_the_text() -> None:
    """All tool results of one assistant turn come back in one user message, first."""
    chat = go("anthropic_parallel_tools", "chat")["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in chat[1]["tool_calls"]] == ["toolu_01", "toolu_02"]
    ant = go("chat_tool_result", "messages")["messages"]
    assert [m["role"] for m in ant] == ["user", "assistant", "user"]


def test_images_and_documents_change_shape_not_content() -> None:
    """Base64 images are data URLs for OpenAI; URLs stay URLs; PDFs become file parts."""
    data = fixture("requests", "anthropic_image_base64")["body"]["messages"][0]["content"][0]
    url = go("anthropic_image_base64", "chat")["messages"][0]["content"][0]["image_url"]["url"]
    assert url == f"data:image/png;base64,{data['source']['data']}"
    img = go("chat_image_input", "messages")["messages"][0]["content"][1]
    assert img["source"]["type"] == "url"
    pdf = go("anthropic_pdf_base64", "chat")["messages"][0]["content"][0]
    assert pdf["type"] == "file"
    assert pdf["file"]["file_data"].startswith("data:application/pdf;base64,")
    doc = go("responses_file_input", "messages")["messages"][0]["content"][1]
    assert doc == {"type": "document", "source": {"type": "url",
                   "url": "https://www.berkshirehathaway.com/letters/2024ltr.pdf"}}  # fmt: skip


def test_max_tokens_is_required_by_anthropic() -> None:
    """Without a cap, Anthropic gets the model's ``max_output_tokens``, else the default."""
    body = fixture("requests", "chat_default")["body"]
    assert translate(body, "chat", "messages")[0]["max_tokens"] == 4096
    assert translate(body, "chat", "messages", 8192)[0]["max_tokens"] == 8192
    capped = {**body, "max_tokens": 100000}
    assert translate(capped, "chat", "messages", 8192)[0]["max_tokens"] == 8192
    assert go("chat_image_input", "messages")["max_tokens"] == 300  # max_completion_tokens


def test_reasoning_effort_becomes_a_thinking_budget_and_back() -> None:
    """Responses ``reasoning.effort`` is an Anthropic thinking budget, which maps back."""
    assert go("responses_reasoning", "messages")["thinking"] == {
        "type": "enabled",
        "budget_tokens": 16384,
    }
    assert go("anthropic_thinking", "chat")["reasoning_effort"] == "medium"
    assert go("anthropic_thinking", "chat")["max_completion_tokens"] == 16000
    assert go("anthropic_thinking", "responses")["reasoning"] == {"effort": "medium"}


def test_stop_sequences_and_sampling() -> None:
    """``stop_sequences`` is chat ``stop``; temperature and user carry over; top_k drops."""
    body, _, drops = translate(
        fixture("requests", "anthropic_stop_sequences")["body"], "messages", "chat"
    )
    assert body["stop"] == ["\n\nHuman:"]
    assert body["temperature"] == 0.5
    assert body["user"] == "13803d75-b4b5-4c3e-b2a2-6f21399b021b"
    assert drops.names == ["top_k"]


def test_stream_asks_chat_for_usage_and_keeps_the_clients_wish() -> None:
    """Towards chat a stream always asks for usage; the client's choice stays in Conv."""
    body, conv, _ = translate(fixture("requests", "responses_streaming")["body"], "responses",
                              "chat")  # fmt: skip
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert conv.include_usage is None
    chat = fixture("requests", "chat_streaming")["body"]
    _, conv, _ = translate({**chat, "stream_options": {"include_usage": False}}, "chat",
                           "messages")  # fmt: skip
    assert conv.include_usage is False
