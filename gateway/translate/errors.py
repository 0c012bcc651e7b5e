"""Error answers between the formats: an upstream error in one API's shape -> the same error
in the client's API shape, the HTTP status kept.

OpenAI (chat completions and Responses) ``{"error": {"message", "type", "param", "code"}}``;
Anthropic ``{"type": "error", "error": {"type", "message"}}``. The provider's message text is
always kept, so that the gateway's classifier and a person reading it see the same thing.
The neutral kind is Anthropic's ``error.type`` (one per status, like the stop reasons'
neutral set); OpenAI's ``type`` and ``code`` are derived from it and back::

    Anthropic type          status  OpenAI type / code
    invalid_request_error   400     invalid_request_error / None
      prompt too long       400     invalid_request_error / context_length_exceeded
    authentication_error    401     authentication_error / invalid_api_key
    billing_error           402     insufficient_quota / insufficient_quota
    permission_error        403     permission_error / None
    not_found_error         404     not_found_error / model_not_found (a model named)
    request_too_large       413     invalid_request_error / request_too_large
    rate_limit_error        429     requests / rate_limit_exceeded
    api_error               500     server_error / None
    timeout_error           504     server_error / timeout_error
    overloaded_error        529     server_error / server_is_overloaded

Reading OpenAI errors, ``code`` decides before ``type`` and both before the status
(``insufficient_quota`` under a 429 is a ``billing_error``, not a rate limit). A prompt too
long for the model stays recognisable both ways: OpenAI's ``context_length_exceeded`` becomes
an Anthropic ``invalid_request_error`` whose message starts ``prompt is too long:`` (what
Anthropic says and what its clients look for) followed by the provider's own text with its
token counts; Anthropic's "prompt is too long" becomes ``code: context_length_exceeded``.
A body that is not a recognisable error becomes a generic error of the status, its text as
message when it is plain text.

Bedrock Converse errors reach the translators in Anthropic's shape with the AWS exception
as ``error.type`` (``{"type": "error", "error": {"type": "ThrottlingException", "message"}}``,
the gateway's rewriting of Bedrock's ``x-amzn-errortype`` header and ``{"message"}`` body;
a bare ``{"message"}`` is read too, by its status). The exception names the kind
(:data:`ANTHROPIC_OF_AWS`, matched lowercased, ``Exception`` left off, so that a stream's
``throttlingException`` reads as ``ThrottlingException``); an unknown one is kept as the
OpenAI ``code`` and the status decides. No client speaks Converse: its errors are only read.

Gemini errors are Google's (``{"error": {"code", "message", "status", "details"}}``, at
times inside a one-element list): the canonical status names the kind
(:data:`ANTHROPIC_OF_GOOGLE`); an OpenAI client sees it as the ``code`` where the kind
gives none.

References: https://platform.openai.com/docs/guides/error-codes,
https://docs.anthropic.com/en/api/errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import ANTHROPIC_TYPE_OF_STATUS, Category
from gateway.resilience.keywords import KEYWORDS

_ANTHROPIC_OF_STATUS = ANTHROPIC_TYPE_OF_STATUS  # the one table (gateway/errors.py)
_ANTHROPIC_TYPES = frozenset(_ANTHROPIC_OF_STATUS.values())

# OpenAI error.code or error.type (lowercased) -> the Anthropic type it means.
_ANTHROPIC_OF_OPENAI = {
    "context_length_exceeded": "invalid_request_error",
    "model_context_window_exceeded": "invalid_request_error",
    "invalid_request_error": "invalid_request_error",
    "insufficient_quota": "billing_error",
    "billing_hard_limit_reached": "billing_error",
    "rate_limit_exceeded": "rate_limit_error",
    "requests": "rate_limit_error",
    "tokens": "rate_limit_error",
    "invalid_api_key": "authentication_error",
    "invalid_authentication": "authentication_error",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "permission_denied": "permission_error",
    "unsupported_country_region_territory": "permission_error",
    "model_not_found": "not_found_error",
    "not_found_error": "not_found_error",
    "request_too_large": "request_too_large",
    "server_is_overloaded": "overloaded_error",
    "engine_overloaded": "overloaded_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
    "timeout_error": "timeout_error",
    "server_error": "api_error",
    "api_error": "api_error",
}
#: An AWS exception (lowercased, without ``Exception``) -> the Anthropic type it means.
ANTHROPIC_OF_AWS = {
    "throttling": "rate_limit_error",
    "servicequotaexceeded": "rate_limit_error",
    "toomanyrequests": "rate_limit_error",
    "serviceunavailable": "overloaded_error",
    "modelnotready": "overloaded_error",
    "internalserver": "api_error",
    "internalfailure": "api_error",
    "modelerror": "api_error",
    "modelstreamerror": "api_error",
    "modeltimeout": "timeout_error",
    "validation": "invalid_request_error",
    "accessdenied": "permission_error",
    "unrecognizedclient": "authentication_error",
    "expiredtoken": "authentication_error",
    "invalidsignature": "authentication_error",
    "incompletesignature": "authentication_error",
    "missingauthenticationtoken": "authentication_error",
    "signaturedoesnotmatch": "authentication_error",
    "resourcenotfound": "not_found_error",
}

# Codes that decide on their own; a bare ``type`` such as invalid_request_error only when
# the status says nothing more precise.
_GENERIC_TYPES = frozenset({"invalid_request_error", "server_error", "api_error"})

_OPENAI_OF_ANTHROPIC: dict[str, tuple[str, str | None]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("authentication_error", "invalid_api_key"),
    "billing_error": ("insufficient_quota", "insufficient_quota"),
    "permission_error": ("permission_error", None),
    "not_found_error": ("not_found_error", None),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "api_error": ("server_error", None),
    "timeout_error": ("server_error", "timeout_error"),
    "overloaded_error": ("server_error", "server_is_overloaded"),
}

_TOO_LONG_WORDS = next(words for cat, words in KEYWORDS if cat is Category.prompt_too_long)
_TOO_LONG_CODES = frozenset({"context_length_exceeded", "model_context_window_exceeded"})
PROMPT_TOO_LONG = "prompt is too long"
MESSAGE_MAX_CHARS = 2000


def _too_long(message: str) -> bool:
    lowered = message.lower()
    return any(w in lowered for w in _TOO_LONG_WORDS)


@dataclass(slots=True)
class UpstreamError:
    """One error, both ways: what a client of either format is told."""

    message: str
    anthropic_type: str
    openai_type: str
    code: str | None = None
    param: str | None = None
    too_long: bool = False  # the prompt is too long for the model
    shape: str = "chat"  # the shape it was read from

    def openai(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "type": self.openai_type,
            "param": self.param,
            "code": self.code,
        }

    def anthropic(self) -> dict[str, Any]:
        message = self.message
        if self.too_long and PROMPT_TOO_LONG not in message.lower():
            message = f"{PROMPT_TOO_LONG}: {message}"
        return {"type": self.anthropic_type, "message": message}

    def body(self, target: str) -> bytes:
        if target == "messages":
            return orjson.dumps({"type": "error", "error": self.anthropic()})
        return orjson.dumps({"error": self.openai()})


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _by_status(status: int | None) -> str:
    if status is None:
        return "api_error"
    if status in _ANTHROPIC_OF_STATUS:
        return _ANTHROPIC_OF_STATUS[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def from_anthropic(err: Any, status: int | None = None) -> UpstreamError:
    """An Anthropic ``error`` object (``{"type", "message"}``)."""
    e = err if isinstance(err, dict) else {}
    message = _str(e.get("message")) or f"upstream error (HTTP {status or 500})"
    kind = _str(e.get("type")) or _by_status(status)
    if kind in _OPENAI_OF_ANTHROPIC:
        otype, code = _OPENAI_OF_ANTHROPIC[kind]
    else:  # a type newer than this table: kept as the code
        otype = "server_error" if status is None or status >= 500 else "invalid_request_error"
        code = kind
        kind = _by_status(status) if kind not in _ANTHROPIC_TYPES else kind
    param = None
    too_long = kind == "invalid_request_error" and _too_long(message)
    if too_long:
        code, param = "context_length_exceeded", "messages"
    elif kind == "not_found_error" and "model" in message.lower():
        code = "model_not_found"
    return UpstreamError(message, kind, otype, code, param, too_long, "messages")


def from_openai(err: Any, status: int | None = None) -> UpstreamError:
    """An OpenAI ``error`` object (``{"message", "type", "param", "code"}``; Responses
    stream errors carry the same fields at the top of the event)."""
    e = err if isinstance(err, dict) else {}
    message = _str(e.get("message")) or f"upstream error (HTTP {status or 500})"
    code_v = e.get("code")
    code = str(code_v) if isinstance(code_v, str | int) and not isinstance(code_v, bool) else None
    server = status is None or status >= 500
    otype = _str(e.get("type")) or ("server_error" if server else "invalid_request_error")
    kind: str | None = None
    for key in (code, otype):
        k = key.lower() if key is not None else ""
        if k in _TOO_LONG_CODES:
            kind = "request_too_large" if status == 413 else "invalid_request_error"
        elif k in _GENERIC_TYPES and status in _ANTHROPIC_OF_STATUS:
            continue  # the status says more than a generic type
        else:
            kind = _ANTHROPIC_OF_OPENAI.get(k)
        if kind is not None:
            break
    if kind is None:
        kind = _by_status(status)
    too_long = (code or "").lower() in _TOO_LONG_CODES or (
        kind in ("invalid_request_error", "request_too_large") and _too_long(message)
    )
    return UpstreamError(message, kind, otype, code, _str(e.get("param")), too_long)


def from_aws(err: Any, status: int | None = None) -> UpstreamError:
    """A Bedrock error (``{"type": <AWS exception>, "message"}``, or a bare ``{"message"}``):
    the exception's kind (:data:`ANTHROPIC_OF_AWS`), else the status's."""
    e = err if isinstance(err, dict) else {}
    message = _str(e.get("message")) or _str(e.get("Message"))
    exception = (_str(e.get("type")) or "").rpartition("#")[2]  # com.amazon...#Name
    kind = ANTHROPIC_OF_AWS.get(exception.lower().removesuffix("exception"))
    return from_anthropic({"type": kind or exception or None, "message": message}, status)


#: Google's canonical status (``error.status``) -> the Anthropic type it means.
ANTHROPIC_OF_GOOGLE = {
    "INVALID_ARGUMENT": "invalid_request_error",
    "FAILED_PRECONDITION": "invalid_request_error",
    "OUT_OF_RANGE": "invalid_request_error",
    "UNAUTHENTICATED": "authentication_error",
    "PERMISSION_DENIED": "permission_error",
    "NOT_FOUND": "not_found_error",
    "RESOURCE_EXHAUSTED": "rate_limit_error",
    "UNAVAILABLE": "overloaded_error",
    "INTERNAL": "api_error",
    "UNKNOWN": "api_error",
    "DATA_LOSS": "api_error",
    "DEADLINE_EXCEEDED": "timeout_error",
}


def from_google(err: Any, status: int | None = None) -> UpstreamError:
    """A Google error object (``{"code", "message", "status", "details"}``): its status
    name's kind (:data:`ANTHROPIC_OF_GOOGLE`), else the HTTP status's (``code``)."""
    e = err if isinstance(err, dict) else {}
    code = e.get("code")
    if status is None and type(code) is int:
        status = code
    name = _str(e.get("status"))
    kind = ANTHROPIC_OF_GOOGLE.get(name or "") or _by_status(status)
    out = from_anthropic({"type": kind, "message": _str(e.get("message"))}, status)
    if name and out.code is None:
        out.code = name  # an OpenAI client's code, where the kind gives none
    return out


def read_error(obj: Any, source: str, status: int | None = None) -> UpstreamError | None:
    """The error in a decoded body of ``source`` format (its shape decides when it is
    clearly the other format's); None when the body holds no error object."""
    if isinstance(obj, list):
        obj = next((o for o in obj if isinstance(o, dict)), None)
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if source == "gemini":
        return from_google(err, status) if isinstance(err, dict) else None
    if source == "converse":
        if isinstance(err, dict):
            return from_aws(err, status)
        if _str(obj.get("message")) or _str(obj.get("Message")):
            return from_aws(obj, status)
        return None
    if isinstance(err, dict):
        # Anthropic's error objects have no ``code``; OpenAI's always do (maybe null)
        anthropic_shape = "code" not in err and (
            source == "messages" or _str(err.get("type")) in _ANTHROPIC_TYPES
        )
        return from_anthropic(err, status) if anthropic_shape else from_openai(err, status)
    if isinstance(err, str) and err:
        return from_openai({"message": err}, status)
    if isinstance(obj.get("detail"), str) and obj["detail"]:  # FastAPI-style servers
        return from_openai({"message": obj["detail"]}, status)
    if _str(obj.get("message")) and (obj.get("type") == "error" or "code" in obj):
        # a Responses stream ``error`` event: the fields at the top, ``type`` the event's
        fields = {"message": obj["message"], "code": obj.get("code"), "param": obj.get("param")}
        return from_openai(fields, status)
    return None


def _plain(body: bytes) -> str | None:
    text = body[: MESSAGE_MAX_CHARS * 2].decode("utf-8", "replace").strip()
    if not text or text.startswith("<") or "\ufffd" in text:
        return None
    return " ".join(text.split())[:MESSAGE_MAX_CHARS]


def generic(status: int, body: bytes = b"") -> UpstreamError:
    """The error of a body that holds none: its status, and its text if it is plain text."""
    message = _plain(body) or f"upstream error (HTTP {status})"
    return from_anthropic({"type": _by_status(status), "message": message}, status)


def translate_error(status: int, body: bytes, source: str, target: str) -> bytes:
    """An upstream error answer of ``source`` format -> the body of ``target`` format (the
    status is kept by the caller). Between chat and Responses (one error shape) a well-formed
    body is passed on unchanged."""
    try:
        obj = orjson.loads(body) if body else None
        text = b""  # JSON without an error object says nothing a person can act on
    except orjson.JSONDecodeError:
        obj, text = None, body
    err = read_error(obj, source, status) if obj is not None else None
    if err is None:
        return generic(status, text).body(target)
    one_shape = err.shape == "chat" and "messages" not in (source, target)
    if one_shape and _well_formed(obj):
        return body
    return err.body(target)


def _well_formed(obj: Any) -> bool:
    err = obj.get("error") if isinstance(obj, dict) else None
    return isinstance(err, dict) and bool(_str(err.get("message")))
