"""No encode failure of a translated body or answer is a 500: a tool call's arguments too
deep to be carried as an object are sent as ``{}`` and named (as arguments that are not
JSON), and a body that cannot be encoded is the client's 400."""

from __future__ import annotations

import pytest

from gateway.errors import GatewayError
from gateway.formats import CHAT
from gateway.policy.schema import Policy
from gateway.recovery.seams import Request
from gateway.translate.ir import Dropped, ToolCall
from gateway.translate.requests.common import ARGUMENTS_DEPTH, call_input

pytestmark = pytest.mark.fast


def _deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize("levels", [ARGUMENTS_DEPTH + 10, 300, 1000])
def test_arguments_too_deep_for_a_body_are_sent_empty_and_named(levels: int) -> None:
    """A provider's call (its answer translated) nested past what a body can carry."""
    drops = Dropped()
    assert call_input(ToolCall("c", "f", _deep(levels)), drops) == {}
    assert drops.names == ["tool_calls.function.arguments"]


def test_arguments_within_the_depth_are_an_object() -> None:
    drops = Dropped()
    args = call_input(ToolCall("c", "f", _deep(ARGUMENTS_DEPTH - 1)), drops)
    assert isinstance(args, dict) and not drops.names


def test_a_body_that_cannot_be_encoded_is_a_400() -> None:
    body: dict[str, object] = {"messages": []}
    inner: object = 1
    for _ in range(300):
        inner = [inner]
    body["x"] = inner
    req = Request(CHAT, body, "m", "r", "t", Policy(), 0.0)
    with pytest.raises(GatewayError) as e:
        req.encode(body, "m")
    assert e.value.status == 400 and e.value.code == "request_not_encodable"
