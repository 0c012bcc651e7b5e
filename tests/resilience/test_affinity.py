"""Sessions and their deployments (gateway/resilience/affinity.py, docs/caching.md), on
plain values: which session a request names, the team's scope, the conversation's digest,
and the rendezvous ranking that :func:`gateway.resilience.deployments.choose` follows."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.resilience import affinity
from gateway.resilience import deployments as dep
from gateway.resilience.deployments import DeploymentState, Pick

pytestmark = pytest.mark.fast

UP = DeploymentState()
NAMES = ["anthropic", "bedrock-us", "vertex-eu"]
SYSTEM = [{"role": "system", "content": "You are a coding agent."}]


def choose(states: list[DeploymentState], session: int, weights: list[float] | None = None,
           tried: frozenset[int] = frozenset(), now: float = 100.0) -> Pick | dep.Wait:  # fmt: skip
    return dep.choose(states, weights or [1.0] * len(states), "session", tried, now,
                      random.Random(0), (), session, NAMES[: len(states)])  # fmt: skip


@pytest.mark.parametrize(
    ("headers", "body", "want"),
    [
        ({"x-gateway-session": "g", "x-claude-code-session-id": "c", "session-id": "x"}, {}, "g"),
        ({"x-claude-code-session-id": "c", "session-id": "x"}, {"prompt_cache_key": "k"}, "c"),
        ({"session-id": "x"}, {"prompt_cache_key": "k"}, "x"),
        ({}, {"prompt_cache_key": "k"}, "k"),
        ({"x-gateway-session": ""}, {"prompt_cache_key": 7}, None),  # empty, not a string
        ({}, {}, None),
    ],
)
def test_the_named_session_in_its_order(
    headers: dict[str, str], body: dict[str, object], want: str | None
) -> None:
    assert affinity.named(headers, body) == want


def test_a_named_session_is_cut_at_its_bound() -> None:
    assert affinity.named({"x-gateway-session": "s" * 10_000}, {}) == "s" * affinity.MAX_SESSION


def test_a_session_is_scoped_to_its_team() -> None:
    a, b = affinity.digest("team-a", "same"), affinity.digest("team-b", "same")
    assert a != b and affinity.label(a) != affinity.label(b)
    # over many values the two teams' sessions land independently
    same = sum(
        affinity.ranked(affinity.digest("team-a", f"s{i}"), NAMES, [1, 1, 1])[0]
        == affinity.ranked(affinity.digest("team-b", f"s{i}"), NAMES, [1, 1, 1])[0]
        for i in range(900)
    )
    assert 230 < same < 370  # about a third: chance, not the same choice


def test_the_label_never_shows_the_value() -> None:
    label = affinity.label(affinity.digest("team-a", "my-secret-session"))
    assert len(label) == 8 and "secret" not in label
    int(label, 16)


def test_a_conversation_keeps_its_digest_as_it_grows() -> None:
    first = {"messages": [*SYSTEM, {"role": "user", "content": "fix the bug"}],
             "tools": [{"type": "function", "function": {"name": "read"}}]}  # fmt: skip
    later = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "ok"},
                                   {"role": "user", "content": "now the tests"}]}  # fmt: skip
    other = {**first, "messages": [*SYSTEM, {"role": "user", "content": "write docs"}]}
    assert affinity.conversation(first, "messages") == affinity.conversation(later, "messages")
    assert affinity.conversation(first, "messages") != affinity.conversation(other, "messages")


def test_a_responses_conversation_reads_its_instructions_and_input() -> None:
    a = {"instructions": "be brief", "input": [{"role": "user", "content": "hi"}]}
    b = {"instructions": "be long", "input": [{"role": "user", "content": "hi"}]}
    assert affinity.conversation(a, "input") != affinity.conversation(b, "input")
    assert affinity.conversation({"input": "hi"}, "input") != affinity.conversation(
        {"input": "bye"}, "input"
    )


def test_the_ranking_is_the_same_everywhere() -> None:
    """No randomness, no process state: the salts come from the names alone."""
    s = affinity.digest("team-a", "session-1")
    assert affinity.ranked(s, NAMES, [1, 1, 1]) == affinity.ranked(s, NAMES, [1, 1, 1])
    assert affinity.salt("bedrock-us") == int.from_bytes(
        __import__("hashlib").blake2b(b"bedrock-us", digest_size=8).digest(), "big"
    )


def test_sessions_follow_the_weights() -> None:
    weights = [1.0, 1.0, 2.0]
    firsts = Counter(
        affinity.ranked(affinity.digest("team-a", f"session-{i}"), NAMES, weights)[0]
        for i in range(8000)
    )
    for i, w in enumerate(weights):
        assert abs(firsts[i] / 8000 - w / 4) < 0.03, firsts


def test_a_zero_weight_deployment_wins_no_session() -> None:
    firsts = {affinity.ranked(affinity.digest("t", f"s{i}"), NAMES, [1, 0, 1])[0]
              for i in range(500)}  # fmt: skip
    assert firsts == {0, 2}


def test_a_session_keeps_its_deployment_turn_after_turn() -> None:
    s = affinity.digest("team-a", "agent-session")
    first = affinity.ranked(s, NAMES, [1, 1, 1])[0]
    assert {choose([UP, UP, UP], s) for _ in range(20)} == {Pick(first)}


def test_a_cooling_deployment_sends_the_session_to_its_next_and_back() -> None:
    """A 429 cools the session's first deployment: the session goes to its second
    (not a random one), and returns to its first once that serves again."""
    s = affinity.digest("team-a", "agent-session")
    order = affinity.ranked(s, NAMES, [1, 1, 1])
    states = [UP, UP, UP]
    states[order[0]] = DeploymentState(until=130.0, state=dep.COOLDOWN, why="rate_limit")
    assert choose(states, s, now=100.0) == Pick(order[1])
    states[order[1]] = DeploymentState(until=130.0, state=dep.OUT, why="quota_exhausted")
    assert choose(states, s, now=100.0) == Pick(order[2])
    assert choose(states, s, now=131.0) == Pick(order[0])  # back where its cache is


def test_a_retry_within_the_request_goes_to_the_next_ranked() -> None:
    s = affinity.digest("team-a", "agent-session")
    order = affinity.ranked(s, NAMES, [1, 1, 1])
    assert choose([UP, UP, UP], s, tried=frozenset({order[0]})) == Pick(order[1])


def test_short_of_headroom_is_skipped_like_out() -> None:
    s = affinity.digest("team-a", "agent-session")
    order = affinity.ranked(s, NAMES, [1, 1, 1])
    states = [UP, UP, UP]
    states[order[0]] = DeploymentState(short_until=150.0)
    assert choose(states, s) == Pick(order[1])


def test_without_a_session_the_rule_draws_by_weight() -> None:
    got = dep.choose([UP, UP], [1.0, 1.0], "session", frozenset(), 0.0, random.Random(3))
    assert isinstance(got, Pick)


def test_the_rankings_kept_are_bounded() -> None:
    """Reloads that change a model's deployments make new sets of rankings: only the
    newest ``MAX_TABLES`` are kept."""
    for n in range(affinity.MAX_TABLES + 5):
        affinity.ranked(1, [f"d{n}", "e"], [1.0, 1.0])
    assert len(affinity._tables) == affinity.MAX_TABLES
