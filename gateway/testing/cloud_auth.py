"""Which credentials a cloud fake accepts: a test gives a set of valid values, or a
predicate (e.g. "issued by my fake token endpoint and not yet expired"), or nothing
(any non-empty value passes). Shared by :class:`~gateway.testing.FakeVertex` and
:class:`~gateway.testing.FakeAzure`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TypeAlias

#: The valid values of a credential: a collection, a predicate, or ``None`` (any).
Accept: TypeAlias = "Collection[str] | Callable[[str], bool] | None"


def accepts(accept: Accept, value: str | None) -> bool:
    """Whether ``value`` is a valid credential under ``accept`` (never an empty one)."""
    if not value:
        return False
    if accept is None:
        return True
    if callable(accept):
        return bool(accept(value))
    return value in accept


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer`` header (lower-cased names), or ``None``."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() != "bearer ":
        return None
    return auth[7:].strip() or None
