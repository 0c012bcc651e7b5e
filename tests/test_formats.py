"""One Format object per wire format: nothing outside gateway/formats and the translators
branches on a format's name, and a new format is one object, asked by everything else."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway import formats
from gateway.errors import GatewayError
from gateway.formats import CHAT, CONVERSE, MESSAGES, RESPONSES, Format
from gateway.formats.endpoints import Endpoint
from gateway.policy.schema import Compaction, OutputRecovery
from gateway.resilience import compaction, continuation, conversation, followup
from gateway.routing.policyset import formats_of

pytestmark = pytest.mark.fast

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"
NAMES = frozenset({"openai", "anthropic", "responses", "converse"})
# Where a format's name may be read: the formats themselves, the translators (keyed by
# name inside), and the scripted fake provider, which plays the providers' side and
# renders each API's bodies on its own, so that the tests check the gateway against an
# independent rendering.
ALLOWED = ("formats", "translate", "testing")


def _format_names_compared(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Comparisons with a format name (``== "anthropic"``, ``in ("openai", ...)``), and
    dicts keyed by one (a table standing in for a branch)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                for v in values:
                    if isinstance(v, ast.Constant) and v.value in NAMES:
                        yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Dict):
            for k in node.keys:
                if isinstance(k, ast.Constant) and k.value in NAMES:
                    yield node.lineno, f"a dict keyed by {k.value!r}"
        elif isinstance(node, ast.MatchValue):
            v = node.value
            if isinstance(v, ast.Constant) and v.value in NAMES:
                yield node.lineno, f"case {v.value!r}"


#: Where an endpoint of a conversation format may be named (``Endpoint.messages``,
#: ``Endpoint.responses``): besides :data:`ALLOWED`, the providers (which define them), and
#: the two shape checks at the edge, a per-endpoint check by nature (the request shapes
#: the client edge bounds, and those the simulator answers with).
ENDPOINT_ALLOWED = (*ALLOWED, "providers", "simulate/shaped.py", "web/shapes.py")
ENDPOINTS_OF_A_FORMAT = frozenset({"messages", "responses"})


def _format_endpoints_named(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``Endpoint.messages`` / ``Endpoint.responses`` anywhere (compared, in a set, a
    dict's key): what stands in for asking the endpoint's format."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Endpoint"
            and node.attr in ENDPOINTS_OF_A_FORMAT
        ):
            yield node.lineno, ast.unparse(node)


def _allowed(path: Path, allowed: tuple[str, ...]) -> bool:
    rel = path.relative_to(GATEWAY)
    return rel.parts[0] in allowed or rel.as_posix() in allowed


def test_no_module_outside_formats_branches_on_an_endpoints_format() -> None:
    """Only gateway/formats, the translators, the providers and the edge's shape checks
    name the Messages or Responses endpoint: everything else asks ``endpoint.fmt``."""
    found = [
        f"{p.relative_to(GATEWAY)}:{line}: {what}"
        for p in sorted(GATEWAY.rglob("*.py"))
        if not _allowed(p, ENDPOINT_ALLOWED)
        for line, what in _format_endpoints_named(ast.parse(p.read_text()))
    ]
    assert not found, "\n".join(found)


def test_the_guard_finds_an_endpoint_of_a_format_named() -> None:
    """The check above sees the ways the streams branched on an endpoint before."""
    code = (
        "a = ep is Endpoint.messages\nb = ep in (Endpoint.chat, Endpoint.responses)\n"
        "c = {Endpoint.messages: 1}\nd = ep is Endpoint.chat\n"
    )
    assert len(list(_format_endpoints_named(ast.parse(code)))) == 3


def test_no_module_outside_formats_branches_on_a_format_name() -> None:
    """Only gateway/formats (and the translators) compare a format's name: everything
    else asks the Format object."""
    found = [
        f"{p.relative_to(GATEWAY)}:{line}: {what}"
        for p in sorted(GATEWAY.rglob("*.py"))
        if p.relative_to(GATEWAY).parts[0] not in ALLOWED
        for line, what in _format_names_compared(ast.parse(p.read_text()))
    ]
    assert not found, "\n".join(found)


def test_the_guard_finds_a_format_name_compared() -> None:
    """The check above sees the ways a format name was branched on before."""
    code = 'x == "anthropic"\ny in ("openai", "responses")\nz = {"openai": 1}\n'
    assert len(list(_format_names_compared(ast.parse(code)))) == 4


def test_every_endpoint_has_its_format() -> None:
    """Each client endpoint carries its format; legacy completions and embeddings are chat's."""
    assert {ep: ep.fmt for ep in Endpoint} == {
        Endpoint.chat: CHAT,
        Endpoint.completions: CHAT,
        Endpoint.embeddings: CHAT,
        Endpoint.messages: MESSAGES,
        Endpoint.responses: RESPONSES,
    }
    assert formats.of_path("/v1/messages/count_tokens") is MESSAGES
    assert formats.of_path("/v1/models") is formats.DEFAULT is CHAT


def test_error_bodies_follow_the_format() -> None:
    """A gateway error reads as the format's own error body (Responses: OpenAI's)."""
    err = GatewayError(429, "slow down")
    assert b'"type":"error"' in err.body_bytes(MESSAGES)
    assert err.body_bytes(RESPONSES) == err.body_bytes(CHAT)
    assert b'"rate_limit_error"' in err.body_bytes(CHAT)


# ---- a new format is one object -----------------------------------------------------


class Toy(Format):
    """A format made up for the test: ``turns`` of ``{"role", "content"}`` messages, a call
    opened by an assistant turn with ``call`` and closed by a ``result`` turn with the same
    ``call``; an answer is ``{"text", "stop"}``, cut when ``stop`` is ``"cap"``."""

    name = "toy"
    label = "toy"
    provider_api = "toy"
    paths = ("/toy/v1/talk",)
    entries_key = "turns"
    output_caps = ("cap",)

    def opened_calls(self, entry: Any) -> list[str]:
        return [entry["call"]] if entry.get("role") == "assistant" and "call" in entry else []

    def closed_calls(self, entry: Any) -> list[str]:
        return [entry["call"]] if entry.get("role") == "result" else []

    def problems(self, items: Sequence[Any]) -> list[str]:
        opened = {i for e in items for i in self.opened_calls(e)}
        closed = {i for e in items for i in self.closed_calls(e)}
        return [f"call {c!r} has no result" for c in sorted(opened - closed)]

    def transcript_lines(self, entry: Any) -> list[str]:
        return [f"{entry.get('role')}: {entry.get('content', '')}"]

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        if entry.get("role") == "result":
            return {**entry, "content": snip(entry["content"])}
        return entry

    def answer_text(self, response: Mapping[str, Any]) -> str:
        text = response.get("text")
        return text if isinstance(text, str) else ""

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        return response.get("stop") == "cap"

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        merged["text"] = text
        merged["stop"] = parts[-1].get("stop")


@pytest.fixture
def toy() -> Iterator[Format]:
    fmt = formats.register(Toy())
    try:
        yield fmt
    finally:
        del formats.FORMATS[fmt.name]


def test_a_registered_format_is_found_everywhere(toy: Format) -> None:
    """Registering one Format object makes it known by name, path and provider kind,
    and to the simulated provider, with no other edit."""
    assert formats.by_name("toy") is toy
    assert formats.of_path("/toy/v1/talk") is toy
    assert formats.of_provider("toy") == (toy,)
    assert formats_of("toy") == (toy,)
    assert toy in formats_of("sim")
    with pytest.raises(ValueError, match="registered already"):
        formats.register(Toy())


def test_recovery_works_on_a_new_format_as_it_is(toy: Format) -> None:
    """Compaction, continuation and their decisions read a new format through its object."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": "task " * 50}]
    for n in range(8):
        turns += [{"role": "assistant", "call": f"c{n}", "content": "grep"}]
        turns += [{"role": "result", "call": f"c{n}", "content": "x" * 4000}]
    turns += [{"role": "user", "content": "go on"}]
    body = {"turns": turns, "cap": 100}
    assert conversation.is_valid_conversation(body, toy)
    before = conversation.estimate_tokens(body, toy)
    c = compaction.compact(body, toy, "drop_middle", Compaction(keep_recent=2))
    assert c is not None and c.tokens_after < before
    assert conversation.is_valid_conversation(c.body, toy)  # no call left without its result
    summary = compaction.summary_request(body, toy, Compaction(), "m", summary_fmt=MESSAGES)
    assert summary is not None and "grep" in summary["messages"][0]["content"]

    part = {"text": "Once upon", "stop": "cap"}
    assert toy.cut_at_length(part)
    assert toy.capped(body)
    decision = followup.continuation(
        body, toy, OutputRecovery(respect_client_max_tokens=False), 0, cut=True, text="Once"
    )
    assert isinstance(decision, followup.Continue)
    follow = continuation.continuation_request(body, [part], toy, prefill=True)
    assert follow["turns"][-1] == {"role": "assistant", "content": "Once upon"}
    merged = continuation.merge_parts([part, {"text": " a time", "stop": "end"}], toy)
    assert merged == {"text": "Once upon a time", "stop": "end"}


@pytest.mark.parametrize(
    ("fmt", "body", "requested"),
    [
        (CHAT, {"max_completion_tokens": 300, "max_tokens": 100}, 300),
        (CHAT, {"max_tokens": 100}, 100),
        (CHAT, {"max_output_tokens": 100}, None),
        (MESSAGES, {"max_tokens": 200}, 200),
        (RESPONSES, {"max_output_tokens": 50, "max_tokens": 7}, 50),
        (RESPONSES, {"max_output_tokens": "50"}, None),
        (CONVERSE, {"inferenceConfig": {"maxTokens": 128}, "max_tokens": 5}, 128),
        (CONVERSE, {"max_tokens": 5}, None),
    ],
)
def test_the_requested_output_is_read_from_the_formats_own_cap_fields(
    fmt: Format, body: dict[str, Any], requested: int | None
) -> None:
    """A request's output cap is read from its format's cap fields only, first one first."""
    assert fmt.requested_output(body) == requested
