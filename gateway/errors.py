"""Failure categories and every exception of the gateway: the one exceptions module.

Every upstream failure is classified into exactly one :class:`Category`; the category
knows whether it may be retried and whether it counts toward a fallback. Errors the
gateway answers itself are :class:`GatewayError` values rendered in the format of the
endpoint that was called::

    GatewayError                      status  OpenAI type / Anthropic type
    ├── bad request (JSON, schema)    400     invalid_request_error
    ├── unknown key                   401     authentication_error
    ├── model not allowed             403     permission_error
    ├── unknown model / path          404     not_found_error
    ├── body too large                413     request_too_large
    ├── team limit                    429     rate_limit_error
    └── upstream exhausted            by category (:func:`exhausted`)

The JSON bodies of those errors are built here. A stream that has already started ends
with an error event instead (the format's ``stream_error``, gateway/formats), and a
provider's error shown to a client of the other format is translated by
gateway/translate/errors.py.

The exceptions, what each means, who raises it and who catches it::

    Exception
    ├── GatewayError           a request the gateway answers itself (status, type, code,
    │   │                      param), in the client's format. Raised by web/ (body, key,
    │   │                      route, size checks), recovery/admission (limits, budgets,
    │   │                      deadline) and recovery/seams (a body that cannot be
    │   │                      encoded); caught by web/routes (the answer), live/attempter
    │   │                      and simulate.
    │   └── Refused            a request field with no equivalent in the provider's format
    │                          whose loss would change the request: a 400 naming the field.
    │                          Raised by translate/requests; caught by live/attempter (the
    │                          attempt's answer to the client).
    ├── PolicyError            a policy set rejected, with every :class:`Problem`. Raised by
    │                          routing/build and routing/load (and web/policy_env for the
    │                          environment's egress); caught by the ``check`` command, serve's
    │                          start and reload (the old set keeps serving), and simulate.
    ├── UpstreamFailure        a provider not reached or not read (category, stage).
    │                          Raised by upstream/client (aiohttp's and the OS's errors, one
    │                          mapping) and live/ (a stream's head or body); caught by
    │                          live/exchange and live/stream_head, which make it a failure
    │                          for the engine.
    ├── ClientStalled          (a ConnectionError) the client stopped reading: a write to it
    │                          made no progress for ``client_write_timeout_s``. Raised by
    │                          live/pump and live/relay (and web/routes for a JSON
    │                          answer); caught by the relay, which lets the upstream go and
    │                          aborts the connection.
    ├── CredentialUnavailable  no usable cloud credential for a provider (a token service
    │                          down or refusing, keys expired); the message never holds a
    │                          secret. Raised by upstream/credentials; caught by
    │                          providers/cloud_target (a failed attempt, so a sibling or
    │                          fallback deployment takes over).
    ├── KeyNeedsPassword       a policy's client key asked for a password (raised from the
    │                          password callback of policy/cert_files; caught there: a policy
    │                          problem saying the key is encrypted).
    └── ValueError
        ├── EgressError        the environment or a certificate file does not let the
        │                      gateway reach a provider. Raised by upstream/egress_proxy and
        │                      egress_tls; caught by web/policy_env (a policy problem).
        ├── CorruptFrame       a Bedrock event-stream frame that cannot be read (its CRC, its
        │                      prelude, its headers). Raised and caught by
        │                      formats/eventstream, which ends the stream with an error event
        │                      in the client's format.
        ├── Malformed          a provider's JSON answer of a shape its format does not have.
        │                      Raised by translate/convert and live/exchange (not JSON at
        │                      all); caught by live/exchange (retried like a server error).
        ├── WrongType          a field of a provider's JSON answer of a type its format does
        │                      not have. Raised by translate/fields; caught by
        │                      translate/convert (a malformed answer: retried like a server
        │                      error).
        └── BadStateValue      a value read from Redis that the gateway did not write.
                               Raised by state/redis_values and state/deployment_sync;
                               caught by state/ (the value is ignored and logged).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal, Protocol

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


# ---- the exceptions of the gateway (the tree is in this module's docstring) -----------


class Refused(GatewayError):
    """A request field with no equivalent in the provider's format whose loss would change
    the meaning of the request: a 400 in the client's format naming the field."""

    def __init__(self, fieldname: str, reason: str) -> None:
        super().__init__(
            400,
            f"{fieldname}: {reason}",
            code="unsupported_by_model_format",
            param=fieldname,
        )
        self.field = fieldname


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a policy set, located at a file and line (1-based; 0 = whole file)."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.message}"
            if self.line
            else f"{self.file}: {self.message}"
        )


class PolicyError(Exception):
    """A policy set was rejected; ``problems`` lists every reason, ``str()`` one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


Stage = Literal["connect", "first_byte", "body", "stream"]
"""Where an upstream call failed: connecting, waiting for the first byte, reading the body,
reading a stream."""


class UpstreamFailure(Exception):
    def __init__(self, category: Category, message: str, stage: Stage) -> None:
        super().__init__(message)
        self.category = category
        self.message = message
        self.stage = stage


class EgressError(ValueError):
    """The environment or a certificate file does not allow reaching a provider.

    The message never holds a proxy's credentials.
    """


class ClientStalled(ConnectionError):
    """The client stopped reading: a write made no progress for ``client_write_timeout_s``."""


class CredentialUnavailable(Exception):
    """No usable credential for a provider; the message says why, never a secret."""


class CorruptFrame(ValueError):
    """A Bedrock event-stream frame that cannot be read; its argument says why, in words
    that carry nothing of the stream's content."""


class KeyNeedsPassword(Exception):
    """A client key asked for a password while the policy's certificate files were checked."""


class Malformed(ValueError):
    """A provider's JSON answer of a shape its format does not have (a broken provider)."""


class WrongType(ValueError):
    """A field of a JSON answer whose type its format does not have; the argument names
    the field and the type, never its value (it may be anything)."""


class BadStateValue(ValueError):
    """A value read back from Redis that the gateway did not write; the message says what
    is wrong with it, never what it holds."""
