"""Upstream failures -> :class:`Failure` (docs/recovery.md, Classification).

Pure: no I/O, no clock ("now" is a parameter). Order of evaluation::

    policy classify: rules        all given conditions (status, body_contains, code) hold
    provider code in the body     error.code / error.type / error.status (Zhipu "1302",
                                  vLLM 400, Gemini RESOURCE_EXHAUSTED: a full model, a
                                  per-day or zero quota, else a rate limit), then
                                  Google's details[].reason (API_KEY_INVALID);
                                  a 413 is prompt_too_long whatever its code
    status + message words        a status that says it all (401, 402, 408, 409, 413,
                                  498, 529) wins; 403 and 429 may be refined by a few
                                  keyword categories; other 4xx only by a provider's
                                  opening sentence (LEADS) or to a request-scoped
                                  category; 5xx only to overload or request-scoped
    status alone                  other 4xx -> invalid_request, other 5xx -> server_error

Message words never give a verdict on the provider's health (quota, credentials, rate
limit, overload) where the status says the request is at fault: providers quote the
client's text in those messages. A wait written in the body counts only for a rate
limit, overload or quota that the status or a code declared. A rate limit whose server
hint is an hour or more (Azure "retry after 86400 seconds") is a quota. Nothing here
raises: garbage bodies fall back to the status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import Category
from gateway.policy.schema import ClassifyRule
from gateway.resilience.backoff import server_hint
from gateway.resilience.failure import Failure
from gateway.resilience.keywords import (
    ANTHROPIC_TYPE_STATUS,
    CODES,
    CODES_WHEN_429,
    KEYWORDS,
    LEADS,
    REASONS,
)

MESSAGE_MAX_CHARS = 500
QUOTA_HINT_S = 3600.0
"""A rate limit that asks for a wait this long is a quota (daily limits)."""

_PARSE_MAX_BYTES = 1 << 20  # larger bodies are not JSON-decoded (an error body is small)
_TEXT_MAX_BYTES = 64 * 1024  # what keywords and body hints look at

_STATUS: dict[int, Category] = {
    401: Category.auth,
    402: Category.quota_exhausted,
    403: Category.auth,
    404: Category.invalid_request,
    408: Category.timeout,
    409: Category.conflict,
    413: Category.prompt_too_long,
    429: Category.rate_limit,
    498: Category.server_overload,  # Groq flex capacity
    503: Category.server_overload,  # RFC 9110: temporary overload or maintenance
    529: Category.server_overload,  # Anthropic
}
_FIXED = frozenset({401, 402, 408, 409, 413, 498, 529})
_REFINED_BY: dict[int, frozenset[Category]] = {
    403: frozenset({Category.content_filter, Category.quota_exhausted}),  # OpenRouter moderation
    429: frozenset({Category.quota_exhausted, Category.server_overload}),  # Zhipu 429s
}
#: What message words may say on any other 4xx: the request is at fault, and its own
#: text may be what the message quotes, so only categories whose effect stays with that
#: request (compaction of it; an answer to it).
_REQUEST_SCOPED = frozenset({Category.prompt_too_long, Category.content_filter})
#: On a 5xx (or no usable status): the provider failed; words may only call it an overload.
_SERVER_WORDS = _REQUEST_SCOPED | {Category.server_overload}
#: Categories a wait written in the body applies to (when the status or a code said so).
_HINTED = frozenset({Category.rate_limit, Category.server_overload, Category.quota_exhausted})

_INT = r"(\d[\d,]{0,14})"
_LIMIT_PATTERNS = tuple(
    re.compile(p)
    for p in (
        rf"maximum context length is {_INT}",  # OpenAI, vLLM, OpenRouter, DeepSeek, Groq
        rf"{_INT} maximum context length",  # Mistral
        rf"tokens\s*>\s*{_INT}\s*maximum",  # Anthropic
        rf"maximum number of tokens allowed \(?{_INT}",  # Gemini (Vertex: no parentheses)
        rf"only supports up to {_INT}",  # Vertex AI
        rf"context size \({_INT} tokens\)",  # llama.cpp
        rf"context (?:window|length) (?:of|is) {_INT}",
    )
)
_PROMPT_PATTERNS = tuple(
    re.compile(p)
    for p in (
        rf"for a total of (?:at least )?{_INT} tokens",  # vLLM
        rf"resulted in {_INT} tokens",  # OpenAI
        rf"requested (?:about )?{_INT} tokens",  # OpenAI (older), OpenRouter, DeepSeek
        rf"contains (?:at least )?{_INT} (?:input )?tokens",  # vLLM, Mistral
        rf"too long: {_INT} tokens",  # Anthropic
        rf"input token count \({_INT}\)",  # Gemini
        rf"input token count is {_INT}",  # Vertex AI
        rf"request \({_INT} tokens\)",  # llama.cpp
    )
)


#: "Quota exceeded for metric: ..., limit: 0, model: ...": not "limit: 0.5" nor "limit: 05".
_ZERO_LIMIT = re.compile(r"\blimit: 0(?!\.?\d)")


@dataclass(frozen=True, slots=True)
class _ErrorInfo:
    """What a provider's error object says, whatever its shape."""

    codes: tuple[str, ...] = ()  # lowercased error.code, error.type, error.status
    reasons: tuple[str, ...] = ()  # lowercased details[].reason (google.rpc.ErrorInfo)
    code: str | None = None  # as the provider spelled it, for Failure.code
    int_code: int | None = None  # numeric code that is an HTTP status (vLLM, OpenRouter, Gemini)
    message: str = ""
    details: str = ""  # lowercased Gemini details / OpenRouter metadata


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return ""


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _dump(value)


def _error_info(obj: Any) -> _ErrorInfo:
    """Find the error object: ``{"error": {...}}``, ``[{"error": {...}}]`` or a bare one."""
    if isinstance(obj, list):
        obj = next((item for item in obj if isinstance(item, dict)), None)
    if not isinstance(obj, dict):
        return _ErrorInfo(message=obj if isinstance(obj, str) else "")
    err = obj.get("error")
    e: dict[Any, Any] = err if isinstance(err, dict) else obj
    message = _text(e.get("message")) or (err if isinstance(err, str) else "")
    message = message or (e["detail"] if isinstance(e.get("detail"), str) else "")
    codes: list[str] = []
    code: str | None = None
    int_code: int | None = None
    for key in ("code", "type", "status"):
        value = e.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            if int_code is None and 100 <= value <= 599:
                int_code = value
        elif isinstance(value, str) and (s := value.strip()) and len(s) <= 100 and s != "error":
            codes.append(s.lower())
            code = code or s
            if key != "type" and len(s) == 3 and s.isdigit() and int_code is None:
                int_code = int(s)
    if code is None and int_code is not None:
        code = str(int_code)
    raw_details = e.get("details")
    reasons = tuple(
        d["reason"].lower()
        for d in (raw_details if isinstance(raw_details, list) else ())
        if isinstance(d, dict) and isinstance(d.get("reason"), str)
    )
    details = _dump([raw_details, e.get("metadata")]).lower()
    return _ErrorInfo(tuple(codes), reasons, code, int_code, message, details)


def _by_rules(
    rules: Sequence[ClassifyRule], status: int, text: str, info: _ErrorInfo
) -> Category | None:
    text_lower = text.lower()
    codes = {*info.codes, *((str(info.int_code),) if info.int_code is not None else ())}
    for rule in rules:
        if rule.status is not None and rule.status != status:
            continue
        if rule.body_contains is not None and rule.body_contains.lower() not in text_lower:
            continue
        if rule.code is not None and rule.code.strip().lower() not in codes:
            continue
        return Category(rule.category)
    return None


def _by_code(status: int, info: _ErrorInfo, message: str) -> Category | None:
    if status == 413:  # too large whatever the code (Groq: 413 rate_limit_exceeded for TPM)
        return Category.prompt_too_long
    for code in info.codes:
        if code == "resource_exhausted":
            return _exhausted(info, message)
        if (category := CODES.get(code)) is not None:
            return category
        if status == 429 and (category := CODES_WHEN_429.get(code)) is not None:
            return category
    for reason in info.reasons:
        if (category := REASONS.get(reason)) is not None:
            return category
    return None


def _exhausted(info: _ErrorInfo, message: str) -> Category:
    """Google's RESOURCE_EXHAUSTED: the model out of capacity is an overload; a per-day
    quota (a QuotaFailure's ``quotaId``, an ErrorInfo's ``quota_limit``, the message) or a
    free tier with no quota at all for the model ("limit: 0") is terminal; else a rate
    limit."""
    if any(REASONS.get(r) is Category.server_overload for r in info.reasons):
        return Category.server_overload
    scope = info.details + message
    if any(s in scope for s in ("perday", "per_day", "per day")):
        return Category.quota_exhausted
    if "limit: 0" in message and _ZERO_LIMIT.search(message):
        return Category.quota_exhausted
    return Category.rate_limit


def _by_keywords(message: str, allowed: frozenset[Category]) -> Category | None:
    for category, words in KEYWORDS:
        if category in allowed and any(word in message for word in words):
            return category
    return None


def _by_status(status: int) -> Category | None:
    if status in _STATUS:
        return _STATUS[status]
    if 400 <= status < 500:
        return Category.invalid_request
    if 500 <= status < 600:
        return Category.server_error
    return None


def _by_lead(message: str) -> Category | None:
    opening = " ".join(message[:200].split()).lower()
    for lead, category in LEADS:
        if opening.startswith(lead):
            return category
    return None


def _by_words(status: int, lowered: str, message: str) -> Category | None:
    """What the message says, within what ``status`` lets words decide (None: nothing).

    ``lowered`` is the text searched for keywords, ``message`` the provider's JSON
    message (empty when there is none), which alone may open with a :data:`LEADS` sentence.
    """
    if status in _FIXED:
        return None
    if status in _REFINED_BY:
        allowed = _REFINED_BY[status]
    elif 400 <= status < 500:
        if message and (category := _by_lead(message)) is not None:
            return category
        allowed = _REQUEST_SCOPED
    else:
        allowed = _SERVER_WORDS
    return _by_keywords(lowered, allowed)


def _first_int(patterns: tuple[re.Pattern[str], ...], message: str) -> int | None:
    for pattern in patterns:
        if m := pattern.search(message):
            digits = m.group(1).replace(",", "")
            if digits.isdigit() and 0 < int(digits) < 10**9:
                return int(digits)
    return None


def token_counts(message: str) -> tuple[int | None, int | None]:
    """(tokens the request came to, the model's context limit) from a prompt-too-long message."""
    lowered = message.lower()
    return _first_int(_PROMPT_PATTERNS, lowered), _first_int(_LIMIT_PATTERNS, lowered)


def _plain(text: str) -> str:
    """A non-JSON body as a message: HTML pages and binary garbage say nothing useful."""
    head = text[: MESSAGE_MAX_CHARS * 2].strip()
    if head.startswith("<") or "\ufffd" in head:
        return ""
    return " ".join(head.split())


def _classify(
    status: int,
    info: _ErrorInfo,
    text: str,
    headers: Mapping[str, str],
    rules: Sequence[ClassifyRule],
    now: float,
    *,
    keywords_in_raw_text: bool,
) -> Failure:
    if status < 400 and info.int_code is not None and info.int_code >= 400:
        status = info.int_code  # OpenRouter: HTTP 200, the real status in error.code
    message = info.message or (_plain(text) if keywords_in_raw_text else "")
    lowered = (info.message or (text if keywords_in_raw_text else "")).lower()
    category = _by_rules(rules, status, text, info)
    ruled = category is not None
    worded: Category | None = None
    if category is None:
        category = _by_code(status, info, lowered)
    if category is None:
        worded = _by_words(status, lowered, info.message)
        category = worded or _by_status(status) or Category.server_error
    body = text if category in _HINTED and worded is None else ""
    hint = server_hint(headers, body, now, reset_headers=category is Category.rate_limit)
    if not ruled and category is Category.rate_limit and hint is not None and hint >= QUOTA_HINT_S:
        category = Category.quota_exhausted
    prompt_tokens, context_limit = (
        token_counts(message) if category is Category.prompt_too_long else (None, None)
    )
    return Failure(
        category,
        status=status or None,
        message=message[:MESSAGE_MAX_CHARS],
        code=info.code,
        retry_after=hint,
        prompt_tokens=prompt_tokens,
        context_limit=context_limit,
    )


def classify_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    rules: Sequence[ClassifyRule] = (),
    now: float,
) -> Failure:
    """Classify an upstream error response; never raises.

    ``headers`` are looked up by lowercase name. When a 200 carries the real status in
    its error body (OpenRouter), that status is the one classified and returned.
    """
    fallback = _by_status(status) if isinstance(status, int) else None
    try:
        raw = bytes(body) if isinstance(body, bytes | bytearray | memoryview) else b""
        raw = raw.removeprefix(b"\xef\xbb\xbf")
        parsed: Any = None
        if raw and len(raw) <= _PARSE_MAX_BYTES:
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed = None
        info = _error_info(parsed) if parsed is not None else _ErrorInfo()
        text = raw[:_TEXT_MAX_BYTES].decode("utf-8", "replace")
        return _classify(status, info, text, headers or {}, rules, now, keywords_in_raw_text=True)
    except Exception:  # the safety net: a classifier bug must not take the request down
        return Failure(fallback or Category.server_error, status=status or None)


def _event_status(info: _ErrorInfo) -> int:
    for code in info.codes:
        if code in ANTHROPIC_TYPE_STATUS:
            return ANTHROPIC_TYPE_STATUS[code]
    return info.int_code or 0


def classify_error_event(
    payload: Any, *, rules: Sequence[ClassifyRule] = (), now: float
) -> Failure:
    """Classify an error that arrived inside a 200 stream (payload already JSON-decoded).

    OpenAI chat ``{"error": {...}}``; Anthropic ``{"type": "error", "error": {"type":
    "overloaded_error", ...}}`` (its type stands for a status: 529 here); Responses
    ``{"type": "error", "code", "message"}`` and ``{"type": "response.failed",
    "response": {"error": {...}}}``. Shapes without an error are server errors.
    """
    try:
        if isinstance(payload, dict) and payload.get("type") == "response.failed":
            response = payload.get("response")
            err = response.get("error") if isinstance(response, dict) else None
            info = _error_info({"error": err}) if isinstance(err, dict) else _ErrorInfo()
        elif isinstance(payload, dict | list):
            info = _error_info(payload)
        else:  # a bare string or number is not an error object
            info = _ErrorInfo()
        recognised = bool(info.message or info.codes or info.int_code)
        text = _dump(payload) if recognised else ""  # never read hints from stream content
        return _classify(
            _event_status(info), info, text, {}, rules, now, keywords_in_raw_text=False
        )
    except Exception:  # the safety net, as in classify_response
        return Failure(Category.server_error)


def transport_failure(category: Category, message: str) -> Failure:
    """A failure with no response at all (timeout, refused, reset, DNS, TLS, EOF)."""
    return Failure(category, message=str(message)[:MESSAGE_MAX_CHARS])
