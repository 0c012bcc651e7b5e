"""Request translation: a client's body -> the provider's body, and what was dropped.

Each format has a reader (body -> :class:`~gateway.translate.ir.Conv`) and a writer
(``Conv`` -> body); a translation is one read and one write. Formats: ``openai`` (Chat
Completions), ``responses`` (OpenAI Responses), ``anthropic`` (Messages).

Every field follows one rule: **mapped** (carried, renamed where the formats differ),
**dropped** (not sent; its name goes into :class:`~gateway.translate.ir.Dropped`, which
becomes the ``x-gateway-dropped`` header and the access log field) or **refused** (a 400
in the client's format naming the field: :class:`~gateway.translate.ir.Refused`), refused
only where sending the request without it would silently change what the answer means.
A field not in the table is dropped and named. Formats below: chat, resp (Responses),
anth (Anthropic); "all" means every direction between different formats.

Each line: field (from -> to): RULE, and how.

Instructions
- system / developer messages (chat -> anth): MAPPED to ``system``: one string message
  gives a string, otherwise one text block per part; a system message after the first
  turn is hoisted there too; system vs developer is not kept (comes back ``system``).
- ``system`` string / text blocks (anth -> chat, resp): MAPPED to one system message
  (string or text parts); a string becomes resp ``instructions``, blocks an input item.
  A ``role: system`` turn among anth ``messages`` stays where it is (chat, resp).
- ``instructions`` (resp -> chat, anth): MAPPED to the first system message / ``system``;
  developer / system input items before the first turn follow it.

Content
- text (all): MAPPED. Representation only: towards chat content that is one text part is
  written as a string (every OpenAI-compatible server takes strings), a resp assistant
  message as a string; an anth string comes back a string where the form allows.
- image URL / base64 (chat ``image_url`` incl. data URLs, resp ``input_image``, anth
  ``image`` source url / base64) (all): MAPPED.
- ``detail`` of an image (chat, resp -> anth): DROPPED (``auto`` is the same as absent).
- ``image`` / ``document`` source ``file`` (anth -> chat, resp), ``input_image.file_id``
  (resp -> all), OpenAI ``file_id`` (chat, resp -> anth): REFUSED (a file store the other
  provider cannot read).
- documents: anth ``document`` base64 <-> chat ``file`` (``file_data`` data URL,
  ``title`` <-> ``filename``) <-> resp ``input_file`` (all): MAPPED; a document by URL
  (anth ``url`` / resp ``file_url``) -> chat: REFUSED (chat takes no file URLs); an anth
  plain-text document -> chat, resp: MAPPED to a text part (its ``title`` DROPPED); a
  base64 ``text/plain`` file -> anth: MAPPED to a plain-text document.
- ``input_audio``, anth ``search_result`` and any other unknown content part (all):
  REFUSED (content the model would not see).
- ``cache_control``, ``citations`` (anth -> chat, resp): DROPPED (OpenAI caches by itself).
- ``messages[].name`` (chat -> all): DROPPED.

History
- multi-turn history (all): MAPPED. Towards anth, consecutive turns of one role are
  merged, every tool result of a turn goes into one user message (tool results first),
  empty text blocks and turns left empty are left out; towards chat an assistant turn
  holding only reasoning is left out.
- tool calls and results with their ids: chat assistant ``tool_calls`` + ``role: tool``
  <-> anth ``tool_use`` / ``tool_result`` in a user message <-> resp ``function_call`` /
  ``function_call_output`` (all): MAPPED; ids kept (towards anth, characters outside
  ``[A-Za-z0-9_-]`` become ``_``, for a call and its result alike); arguments
  re-serialised compactly; arguments that are not a JSON object (-> anth): sent as ``{}``
  and DROPPED (``tool_calls.function.arguments``).
- ``is_error`` of a tool result (anth -> chat, resp): DROPPED.
- images / files in a tool result (anth, resp -> chat): DROPPED (chat tool messages take
  text).
- reasoning in history (chat ``reasoning_content``, anth ``thinking``, resp ``reasoning``
  items) (all): anth ``thinking`` goes back to Anthropic with its signature (from a resp
  client via the ``encrypted_content`` the gateway sealed, see ``ir.seal_signature``);
  any other provider's reasoning: DROPPED (``reasoning``); ``redacted_thinking``: DROPPED.
- server / built-in tool records (anth ``server_tool_use``, ``*_tool_result``; resp
  ``web_search_call`` etc.) (all): DROPPED. ``item_reference`` (resp): REFUSED.

Tools
- function tools: chat ``tools[].function`` <-> anth ``tools[]`` with ``input_schema`` <->
  resp flat ``tools[]`` (all): MAPPED, JSON Schema as is (anth gets an empty object schema
  when there is none).
- ``strict`` (all): MAPPED (false and absent are the same outside resp); resp writes it
  always (resp makes a tool without it strict, the others do not); a resp tool without
  it is sent without it.
- resp ``namespace`` tools (a group of the client's own functions, e.g. the Codex CLI's
  ``multi_agent_v1``) (resp -> chat, anth): MAPPED, flattened: each function is offered as
  ``<namespace>__<name>`` (the other formats have no groups), a ``function_call`` item or a
  ``tool_choice`` with a ``namespace`` likewise, and the model's call of one comes back to
  the client as ``name`` + ``namespace`` again (``convert.tool_names``); the namespace's
  ``description``: DROPPED; a custom tool in it: DROPPED; two tools of one name once
  flattened: REFUSED (``tools.namespace``).
- built-in / server tools offered (``tools[].type`` other than function / namespace:
  ``web_search``, ``file_search``, ``code_interpreter``, ``mcp``, resp ``custom`` grammar
  tools, anth ``web_search_*``, ``bash_*``, ``web_fetch_*``; a custom tool in a namespace)
  (resp, anth -> all): DROPPED and named (``tools.<type>``): the model answers without
  them, as a model that does not use an offered tool would; a ``tool_choice`` forcing one:
  REFUSED. Chat ``web_search_options``, anth ``mcp_servers``, ``container`` (asking for
  the search or the server to be used): REFUSED.
- ``tool_choice`` (all): MAPPED auto <-> auto, none <-> none, required <-> any, a named
  function <-> ``tool``; ``allowed_tools`` / hosted-tool / custom choices: REFUSED;
  towards anth without tools, auto / none are left out, required / a named tool REFUSED.
- ``parallel_tool_calls: false`` (chat, resp -> anth): MAPPED to
  ``tool_choice.disable_parallel_tool_use`` (left out with ``tool_choice: none``, where no
  tool is called at all); true is everyone's default, as is ``tool_choice: auto``.

Generation
- ``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens`` (all): MAPPED, one
  cap. Anthropic requires one: the request's, else the model's ``max_output_tokens``, else
  ``DEFAULT_ANTHROPIC_MAX_TOKENS`` (4096). A cap above the model's ``max_output_tokens``
  is lowered to it. Towards chat: the field the client used, else
  ``max_completion_tokens`` when a reasoning effort is sent (reasoning models take only
  that), else ``max_tokens``.
- ``temperature``, ``top_p`` (all): MAPPED; DROPPED for a model without sampling controls
  (``Caps.sampling``: Claude Opus 4.7 and later) and towards anth with thinking on for a
  temperature other than 1 / a top_p under 0.95; a temperature above 1 -> anth: REFUSED
  (Anthropic's range is 0..1).
- ``top_k`` (anth -> chat, resp): DROPPED.
- ``stop`` <-> ``stop_sequences`` (chat <-> anth): MAPPED (a single string comes back a
  one-item list, or a string again for chat).
- ``stop`` / ``stop_sequences`` (chat, anth -> resp): REFUSED (Responses has none; the
  answer would run past the stop).
- ``n`` > 1 (chat): REFUSED. ``logprobs``, ``top_logprobs`` (chat, resp): REFUSED.
  ``logit_bias`` (chat): REFUSED (token ids are tokenizer-specific: a ban would silently
  stop working). ``audio``, ``modalities`` other than text, legacy ``functions`` /
  ``function_call`` (chat): REFUSED.
- ``prediction`` (a latency hint), ``seed``, ``frequency_penalty``, ``presence_penalty``
  (chat): DROPPED (nothing they change is a meaning).
- ``response_format`` <-> ``text.format`` (chat <-> resp): MAPPED (nested
  ``json_schema`` <-> flat), ``verbosity`` <-> ``text.verbosity`` too.
- ``response_format`` / ``text.format`` json_schema (chat, resp -> anth): MAPPED to
  ``output_config.format`` (its ``name``, ``description`` DROPPED); ``json_object``:
  REFUSED (no schemaless JSON mode there: the client would get prose it parses as JSON).
- ``output_config.format`` (anth -> chat, resp): MAPPED to a json_schema named
  ``response``.

Reasoning
- ``reasoning_effort`` / ``reasoning.effort`` (chat, resp -> anth): MAPPED to
  ``thinking.budget_tokens`` (``common.BUDGET_OF_EFFORT``, kept under ``max_tokens``;
  with no cap from the request or the model, ``max_tokens`` becomes the budget plus
  ``DEFAULT_ANTHROPIC_MAX_TOKENS``, at most ``anthropic_write.THINKING_MAX_TOKENS``), or
  with ``Caps.adaptive_thinking`` to ``thinking: adaptive`` + ``output_config.effort``;
  DROPPED with forced tool use (Anthropic refuses thinking there), when the last assistant
  turn has tool calls but no signed thinking (Anthropic requires it back), when there is
  no room under the cap, and for ``Caps.reasoning`` False; ``none`` means no thinking.
- ``thinking`` / ``output_config.effort`` (anth -> chat, resp): MAPPED to an effort
  (``common.effort_of_budget``; ``max`` -> ``xhigh``); adaptive / disabled carry none;
  ``thinking.display``: DROPPED.
- ``reasoning_effort`` <-> ``reasoning.effort`` (chat <-> resp): MAPPED. Any effort for a
  model with ``Caps.reasoning`` False (all): DROPPED (``reasoning_effort``).
- ``reasoning.summary`` (resp -> anth): MAPPED (thinking text comes back as summaries;
  adaptive: ``display: summarized``); (resp -> chat): DROPPED.

Streaming and the rest
- ``stream`` (all): MAPPED. Towards chat ``stream_options.include_usage`` is always true
  (the gateway counts tokens); a chat client's own choice is in ``Conv.include_usage``
  for the stream translator. Other ``stream_options`` (resp ``include_obfuscation``):
  DROPPED.
- ``user`` <-> ``metadata.user_id`` (all): MAPPED; a ``user_id`` over 64 characters
  (anth -> chat, resp): DROPPED (OpenAI's limit).
- ``metadata``, ``store``, ``service_tier``, ``safety_identifier``, ``prompt_cache_key``,
  ``prompt_cache_retention`` (chat <-> resp): MAPPED (same name and meaning); (-> anth):
  DROPPED (``store: false`` silently: Anthropic keeps no answers to fetch).
- ``previous_response_id``, ``conversation``, ``prompt``, ``background`` (resp): REFUSED
  (state held by OpenAI). ``include``, ``truncation: auto``, ``max_tool_calls`` (resp):
  DROPPED.
- ``top_k``, ``service_tier``, ``inference_geo``, ``speed``, ``context_management`` and
  other Anthropic-only fields (anth): DROPPED.

Answers (details in :mod:`gateway.translate.stops`, :mod:`gateway.translate.usage`,
:mod:`gateway.translate.answers`)
- stop reasons: chat ``stop`` <-> anth ``end_turn`` (``stop_sequence``, ``pause_turn`` ->
  ``stop``) <-> resp ``completed``; ``length`` <-> ``max_tokens``
  (``model_context_window_exceeded`` -> ``length``) <-> ``incomplete`` /
  ``max_output_tokens``; ``tool_calls`` <-> ``tool_use`` <-> ``completed`` with
  function calls; ``content_filter`` <-> ``refusal`` <-> ``incomplete`` /
  ``content_filter``. MAPPED.
- usage: ``prompt_tokens`` / ``input_tokens`` (OpenAI, cache reads and writes included)
  = anth ``input_tokens`` + ``cache_read_input_tokens`` + ``cache_creation_input_tokens``;
  ``cached_tokens`` <-> ``cache_read_input_tokens``; ``cache_write_tokens`` <->
  ``cache_creation_input_tokens``; ``completion_tokens`` / ``output_tokens`` alike
  (reasoning included); ``reasoning_tokens`` <-> ``output_tokens_details.thinking_tokens``.
  MAPPED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.translate.ir import DEFAULT_CAPS, Caps, Conv, Dropped, Refused
from gateway.translate.requests import anthropic, chat, responses

READERS: dict[str, Callable[[dict[str, Any], Dropped], Conv]] = {
    "openai": chat.read,
    "responses": responses.read,
    "anthropic": anthropic.read,
}


def write(
    conv: Conv,
    provider: str,
    drops: Dropped,
    max_output_tokens: int | None,
    caps: Caps = DEFAULT_CAPS,
) -> dict[str, Any]:
    """The body for ``provider`` ("openai", "responses" or "anthropic"); ``max_output_tokens``
    is the model's own output cap (None when unknown)."""
    if not conv.tools:  # none offered, or every one dropped (built-in tools)
        conv.tools = None
        if conv.tool_choice in ("auto", "none"):
            conv.tool_choice = None  # the same without tools; providers refuse it alone
    if conv.tool_choice == "tool" and conv.tool_name not in {t.name for t in conv.tools or ()}:
        raise Refused("tool_choice", f"{conv.tool_name!r} is not available on this model")
    if max_output_tokens is not None and conv.max_tokens is not None:
        # a cap above what the model can write means the same as the model's own cap
        conv.max_tokens = min(conv.max_tokens, max_output_tokens)
    if provider == "anthropic":
        return anthropic.write(conv, drops, max_output_tokens, caps)
    if provider == "responses":
        return responses.write(conv, drops, caps)
    return chat.write(conv, drops, caps)


def translate(
    body: dict[str, Any],
    client: str,
    provider: str,
    max_output_tokens: int | None = None,
    caps: Caps = DEFAULT_CAPS,
) -> tuple[dict[str, Any], Conv, Dropped]:
    """One request from the ``client`` format to the ``provider`` format: the new body, the
    neutral form (its ``include_usage`` etc. are for the answer's translation) and the
    names dropped. Raises :class:`~gateway.translate.ir.Refused`."""
    drops = Dropped()
    conv = READERS[client](body, drops)
    return write(conv, provider, drops, max_output_tokens, caps), conv, drops


__all__ = ["READERS", "translate", "write"]
