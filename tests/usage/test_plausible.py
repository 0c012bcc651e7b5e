"""What the gateway bills of a provider's usage (gateway/formats/usage.py, ``plausible`` and the
readers): pure, no sockets."""

from __future__ import annotations

import pytest

from gateway.formats.usage import (
    DEFAULT_WINDOW,
    WINDOWS,
    Usage,
    count,
    from_anthropic,
    from_chat,
    from_converse,
    from_responses,
    limit,
    plausible,
    update_anthropic,
)

pytestmark = pytest.mark.fast

MOST = limit(None)
GUESS = Usage(40, 25)


def guessed() -> Usage:
    return GUESS


def never() -> Usage:
    raise AssertionError("a plausible usage is not estimated")


def test_the_limit_is_windows_of_the_model_or_the_default() -> None:
    """16 windows of the model, or of 2**21 tokens when its window is not known."""
    assert limit(None) == WINDOWS * DEFAULT_WINDOW == 16 * 2**21
    assert limit(200_000) == 3_200_000


@pytest.mark.parametrize(
    "u",
    [
        Usage(1, 0),
        Usage(MOST, MOST),  # at the limit
        Usage(300_000, 1000, cache_read=100_000, cache_creation=50_000, reasoning=900),
        Usage(5000, 300, cache_read=5000),  # all of it cached
        Usage(10_000_000, 64_000, reasoning=64_000),  # a 10M window, every output reasoning
    ],
)
def test_a_plausible_usage_is_billed_as_it_came(u: Usage) -> None:
    """Legitimate counts never trip it: nothing estimated, nothing said, no copy."""
    billed, estimated, wrong = plausible(u, MOST, never)
    assert billed is u and not estimated and wrong == ()


@pytest.mark.parametrize(
    ("u", "want", "fields"),
    [
        (Usage(2**63 - 1, 2**63 - 1), Usage(40, 25), ("input", "output")),
        (Usage(MOST + 1, 7), Usage(40, 7), ("input",)),
        (Usage(12, MOST + 1, reasoning=MOST + 1), Usage(12, 25), ("output",)),
        # a prompt over the limit takes its cache counts with it
        (Usage(2**62, 5, cache_read=2**62 - 10), Usage(40, 5), ("input",)),
        (Usage(10, 5, cache_read=10**15), Usage(10, 5, cache_read=10), ("cache_read",)),
        (
            Usage(10, 5, cache_read=6, cache_creation=9),
            Usage(10, 5, cache_read=6, cache_creation=4),
            ("cache_creation",),
        ),
        (Usage(10, 5, reasoning=8), Usage(10, 5, reasoning=5), ()),  # clamped, not said
        (Usage(0, 5, invalid=("input",)), Usage(40, 5), ("input",)),
        (Usage(12, 0, invalid=("output",)), Usage(12, 25), ("output",)),
        (Usage(12, 3, invalid=("cache_read",)), Usage(12, 3), ("cache_read",)),
        (Usage(12, 3, reasoning=None, invalid=("reasoning",)), Usage(12, 3), ()),
    ],
)
def test_counts_no_request_could_have_produced_are_estimated(
    u: Usage, want: Usage, fields: tuple[str, ...]
) -> None:
    """Each count the provider cannot have meant is the estimate's (or clamped), named."""
    billed, estimated, wrong = plausible(u, MOST, guessed)
    assert billed == want
    assert wrong == fields
    assert estimated is bool(fields)  # reasoning is not priced: its clamp is no estimate


def test_a_prompt_of_zero_tokens_is_estimated_without_being_said() -> None:
    """A translated answer says 0 for a count the provider did not give: estimated, not a
    provider error; with no output count either, both are estimated."""
    assert plausible(Usage(0, 9), MOST, guessed) == (Usage(40, 9), True, ())
    assert plausible(Usage(0, 0), MOST, guessed) == (Usage(40, 25), True, ())


def test_the_estimate_is_made_only_when_needed() -> None:
    """A clamp alone asks for no estimate."""
    billed, estimated, _ = plausible(Usage(10, 5, cache_read=11), MOST, never)
    assert billed == Usage(10, 5, cache_read=10) and estimated


@pytest.mark.parametrize(
    ("value", "want"),
    [(0, 0), (7, 7), (7.0, 7), (2**63 - 1, 2**63 - 1), (2**63, None), (-5, None),
     (-1.0, None), (1.5, None), (float("nan"), None), (float("inf"), None), (True, None),
     (False, None), ("12", None), ("NaN", None), ([], None), ({}, None), (1e19, None)],
)  # fmt: skip
def test_a_count_is_a_whole_number_of_64_bits(value: object, want: int | None) -> None:
    assert count(value) == want


def test_the_readers_name_the_counts_that_are_not_counts() -> None:
    """Every format's reader: an invalid count is 0 and named; an absent or null one is 0
    and not named."""
    u = from_chat(
        {"prompt_tokens": "NaN", "completion_tokens": 4.0,
         "prompt_tokens_details": {"cached_tokens": -1, "cache_write_tokens": None},
         "completion_tokens_details": {"reasoning_tokens": 1.5}}
    )  # fmt: skip
    assert u == Usage(0, 4, 0, 0, None, ("input", "cache_read", "reasoning"))
    assert from_chat({"prompt_tokens": 3, "completion_tokens": None}) == Usage(3, 0)
    assert from_chat({"prompt_tokens": 3, "prompt_cache_hit_tokens": 2}) == Usage(3, 0, 2)
    u = from_anthropic({"input_tokens": True, "output_tokens": 2, "cache_read_input_tokens": 5})
    assert u == Usage(5, 2, 5, invalid=("input",))
    u = from_responses({"input_tokens": 9, "output_tokens": -5})
    assert u == Usage(9, 0, reasoning=None, invalid=("output",))
    assert from_converse({"inputTokens": 3, "outputTokens": "4"}) == Usage(
        3, 0, invalid=("output",)
    )


def test_a_message_delta_count_that_is_not_one_stands_and_is_named() -> None:
    """Anthropic's message_delta: an invalid output count leaves message_start's and names
    it (billing estimates it); a valid one replaces it."""
    u = from_anthropic({"input_tokens": 10, "output_tokens": 1})
    update_anthropic(u, {"output_tokens": "NaN"})
    assert (u.output, u.invalid) == (1, ("output",))
    v = from_anthropic({"input_tokens": 10, "output_tokens": 1})
    update_anthropic(v, {"output_tokens": 30})
    assert v == Usage(10, 30)


def test_parts_add_their_invalid_names_once() -> None:
    u = Usage(1, 1, invalid=("input",))
    u.add(Usage(2, 2, invalid=("input", "output")))
    assert u == Usage(3, 3, invalid=("input", "output"))


def test_an_invalid_output_count_keeps_at_least_the_count_before_it() -> None:
    """message_start said 3 and message_delta's count is not one: the estimate, but never
    under 3 (a stream whose text is not kept estimates 0); a count over the bound is not a
    floor."""
    u = Usage(10, 3, invalid=("output",))
    assert plausible(u, MOST, lambda: Usage(40, 0))[0] == Usage(10, 3)
    assert plausible(u, MOST, guessed)[0] == Usage(10, 25)
    assert plausible(Usage(10, MOST + 1), MOST, lambda: Usage(40, 0))[0] == Usage(10, 0)
