"""What is read or told one way everywhere: the bearer token, a JSON answer, the client's
error for a failure recovery could not get past."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from gateway.errors import EXHAUSTED, Category, exhausted
from gateway.recovery.seams import Outcome, json_object
from gateway.web.bearer import bearer, bears

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("authorization", "token"),
    [
        ("Bearer sk-1", "sk-1"),
        ("bearer sk-1", "sk-1"),
        ("BEARER   sk-1  ", "sk-1"),
        ("Bearer ", ""),
        ("Bearer", None),
        ("Basic c2stMQ==", None),
        ("sk-1", None),
        (None, None),
    ],
)
def test_the_bearer_token(authorization: str | None, token: str | None) -> None:
    """The scheme in any case, blanks around the token dropped; no Bearer scheme: None."""
    headers = CIMultiDict({"Authorization": authorization} if authorization else {})
    assert bearer(headers) == token


def test_a_bearer_is_compared_as_it_was_sent() -> None:
    """The exact token matches; another, a prefix or none does not; header bytes that are
    not UTF-8 (surrogate escapes) match only the same bytes, and never raise."""
    assert bears({"authorization": "Bearer s3cret"}, "s3cret")
    for other in ("Bearer s3cre", "Bearer s3cretx", "s3cret", "Bearer "):
        assert not bears({"authorization": other}, "s3cret")
    assert not bears({}, "s3cret")
    raw = b"k\xff\xfe".decode("utf-8", "surrogateescape")
    assert bears({"authorization": f"Bearer {raw}"}, raw)
    assert not bears({"authorization": f"Bearer {raw}"}, "k\\udcff\\udcfe")
    assert not bears({"authorization": "Bearer \ud800"}, "s3cret")  # a lone surrogate


def test_a_json_answer_is_an_object_or_none() -> None:
    """Only a JSON object is an answer; the attempter's decoded one is taken as it is."""
    assert json_object(b'{"a": 1}') == {"a": 1}
    for body in (b"", b"[1]", b'"text"', b"{not json", b"null"):
        assert json_object(body) is None
    decoded = {"id": "x"}
    assert Outcome(body=b"{}", data=decoded).json() is decoded
    assert Outcome(body=b'{"b": 2}').json() == {"b": 2}


def test_the_client_error_of_each_category() -> None:
    """Rate limit 429, overload 503, timeout 504 with their types; anything else 502
    api_error (a server error, a reset, a failure the gateway cannot name better)."""
    assert exhausted(Category.rate_limit) == (429, "rate_limit_error")
    assert exhausted(Category.server_overload) == (503, "overloaded_error")
    assert exhausted(Category.timeout) == (504, "timeout_error")
    for category in set(Category) - set(EXHAUSTED):
        assert exhausted(category) == (502, "api_error")
