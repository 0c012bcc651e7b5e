"""The ``Authorization: Bearer`` token, read one way for every endpoint that takes one:
client keys, ``GATEWAY_ADMIN_KEY`` and ``GATEWAY_METRICS_TOKEN``."""

from __future__ import annotations

import hmac
from collections.abc import Mapping


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer`` header (the scheme in any case, blanks
    around the token dropped; ``""`` when it is empty); None without one."""
    auth = headers.get("authorization")
    if auth is None or auth[:7].lower() != "bearer ":
        return None
    return auth[7:].strip()


def bears(headers: Mapping[str, str], token: str) -> bool:
    """Whether the request's bearer token is ``token``, compared in constant time.

    Header bytes that are not UTF-8 arrive as surrogate escapes (and so may an environment
    variable's): both sides are encoded with ``surrogatepass``, which never fails and
    keeps different strings different.
    """
    given = bearer(headers) or ""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )
