"""Failure categories and the gateway's own errors.

Every upstream failure is classified into exactly one :class:`Category`; the
category knows whether it may be retried and whether it counts toward a
fallback. Errors the gateway answers itself are :class:`GatewayError` values
rendered in the format of the endpoint that was called::

    GatewayError                      status  OpenAI type / Anthropic type
    ├── bad request (JSON, schema)    400     invalid_request_error
    ├── unknown key                   401     authentication_error
    ├── model not allowed             403     permission_error
    ├── unknown model / path          404     not_found_error
    ├── body too large                413     request_too_large
    ├── team limit                    429     rate_limit_error
    └── upstream exhausted            by category (:func:`exhausted`)

The JSON bodies of those errors are built here. A stream that has already started
ends with an error event instead (the format's ``stream_error``, gateway/formats), and a
provider's error shown to a client of the other format is translated by
gateway/translate/errors.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

import orjson


class ErrorFormat(Protocol):
    """A wire format as it writes the gateway's own errors (a :class:`gateway.formats.Format`):
    declared here, so that the lowest layer imports no format."""

    def error_body(self, err: GatewayError) -> dict[str, object]: ...


class Category(enum.StrEnum):
    """What went wrong upstream, in the gateway's words (docs/recovery.md, Classification)."""

    rate_limit = "rate_limit"
    quota_exhausted = "quota_exhausted"
    server_overload = "server_overload"
    server_error = "server_error"
    timeout = "timeout"
    connection = "connection"
    conflict = "conflict"
    prompt_too_long = "prompt_too_long"
    content_filter = "content_filter"
    auth = "auth"
    invalid_request = "invalid_request"

    @property
    def counts_toward_fallback(self) -> bool:
        """Consecutive failures of these move a route to its fallback model."""
        return self in _SERVER_SIDE

    @property
    def never_retried(self) -> bool:
        """Retrying the same request cannot help, whatever the policy says."""
        return self in _NEVER_RETRIED


_SERVER_SIDE = frozenset(
    {Category.server_error, Category.server_overload, Category.timeout, Category.connection}
)
_NEVER_RETRIED = frozenset(
    {
        Category.quota_exhausted,
        Category.prompt_too_long,
        Category.content_filter,
        Category.auth,
        Category.invalid_request,
    }
)

#: How a failure that recovery could not get past looks to the client, by its category:
#: the gateway's status (when it words the error itself, or the provider answered a 5xx)
#: and the error type, of that JSON error and of the in-stream error event alike.
EXHAUSTED: dict[Category, tuple[int, str]] = {
    Category.rate_limit: (429, "rate_limit_error"),
    Category.server_overload: (503, "overloaded_error"),
    Category.timeout: (504, "timeout_error"),
}
_EXHAUSTED_OTHERWISE = (502, "api_error")


def exhausted(category: Category) -> tuple[int, str]:
    """The status and error type of a failure of ``category`` that recovery could not get
    past (:data:`EXHAUSTED`; any other category: 502 ``api_error``)."""
    return EXHAUSTED.get(category, _EXHAUSTED_OTHERWISE)


#: Anthropic's error.type for a given HTTP status (their documented table).
ANTHROPIC_TYPE_OF_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


@dataclass(slots=True)
class GatewayError(Exception):
    """An error the gateway answers itself, in the caller's API format."""

    status: int
    message: str
    type: str | None = None  # OpenAI error.type; derived from status when None
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False  # close the connection after the answer (a body left unread)

    def __str__(self) -> str:
        return self.message

    def openai_body(self) -> dict[str, object]:
        etype = self.type or _OPENAI_TYPES.get(self.status, "upstream_error")
        return {
            "error": {
                "message": self.message,
                "type": etype,
                "param": self.param,
                "code": self.code,
            }
        }

    def anthropic_body(self) -> dict[str, object]:
        etype = self.type if self.type in ANTHROPIC_TYPE_OF_STATUS.values() else None
        etype = etype or ANTHROPIC_TYPE_OF_STATUS.get(self.status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": self.message}}

    def body_bytes(self, fmt: ErrorFormat) -> bytes:
        """The error as the body of ``fmt``'s errors (:meth:`Format.error_body`)."""
        return orjson.dumps(fmt.error_body(self))


def bad_request(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, code="invalid_request", param=param)


def wrong_type(path: str, expected: str, value: object) -> GatewayError:
    """A 400 naming a request field (``path``, as ``messages[2].content``) whose JSON type
    is wrong: ``'path' must be <expected>, got <what it is>``."""
    if huge_integer(value):
        expected = "an integer of at most 64 bits"
    return bad_request(f"'{path}' must be {expected}, got {describe(value)}", path)


def huge_integer(value: object) -> bool:
    """orjson reads an integer literal beyond 64 bits as a float: one that re-encoded
    would reach the provider as another number."""
    return type(value) is float and value.is_integer() and not -(2**63) <= value < 2**64


def describe(value: object) -> str:
    """The JSON type of ``value``, with the value itself when it is a short scalar."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if huge_integer(value):
        return "a larger integer"
    if isinstance(value, int | float):
        return f"the number {value}" if len(str(value)) <= 20 else "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
