"""The request's deadline is final after the first byte: a stream it ended is not resumed."""

from __future__ import annotations

import pytest

from gateway.policy.schema import StreamPolicy
from gateway.resilience.followup import Stop, after_break

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "policy", [StreamPolicy(), StreamPolicy(on_midstream_failure="continue", max_resumes=5)]
)
@pytest.mark.parametrize("prefill", [False, True])
def test_a_stream_ended_by_the_deadline_is_not_resumed(policy: StreamPolicy, prefill: bool) -> None:
    """Whatever the policy and the model, the decision is the error event (``deadline``)."""
    got = after_break(
        policy, 0, resumable=True, diverged=False, prefill=prefill, deadline_passed=True
    )
    assert got == Stop("deadline")
