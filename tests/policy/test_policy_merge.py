"""deep_merge: how a route override lays over its named policy."""

from __future__ import annotations

import copy

import pytest

from gateway.policy.merge import deep_merge

pytestmark = pytest.mark.fast


def test_mappings_merge_recursively() -> None:
    """Nested mappings merge key by key; untouched keys keep the base value."""
    base = {"retry": {"max_retries": 8, "transient": {"base": 1, "cap": 32}}, "x": 1}
    over = {"retry": {"transient": {"cap": 10}}}
    assert deep_merge(base, over) == {
        "retry": {"max_retries": 8, "transient": {"base": 1, "cap": 10}},
        "x": 1,
    }


def test_lists_and_scalars_replace() -> None:
    """Lists are replaced, not concatenated; scalars and None replace too."""
    base = {"chain": ["a", "b"], "n": 1, "m": {"k": 1}}
    assert deep_merge(base, {"chain": ["c"], "n": None, "m": 5}) == {
        "chain": ["c"],
        "n": None,
        "m": 5,
    }


def test_new_keys_are_added() -> None:
    """Keys only in the override are added (validation decides if they are allowed)."""
    assert deep_merge({"a": 1}, {"b": {"c": 2}}) == {"a": 1, "b": {"c": 2}}


def test_inputs_are_not_mutated() -> None:
    """Neither input changes, and the result shares no mutable parts with them."""
    base = {"a": {"b": [1, 2]}, "c": {"d": 1}}
    over = {"a": {"e": [3]}, "f": {"g": 1}}
    base_copy, over_copy = copy.deepcopy(base), copy.deepcopy(over)
    merged = deep_merge(base, over)
    merged["a"]["b"].append(9)
    merged["f"]["g"] = 2
    merged["c"]["d"] = 5
    assert base == base_copy
    assert over == over_copy


def test_empty_override_is_a_copy() -> None:
    """Merging nothing gives an equal, separate dict."""
    base = {"a": {"b": 1}}
    merged = deep_merge(base, {})
    assert merged == base
    assert merged is not base
    assert merged["a"] is not base["a"]
