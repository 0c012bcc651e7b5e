"""The fake providers' prompt cache (gateway/testing/prompt_cache.py) on a virtual clock:
explicit and automatic modes, the minimum, expiry and refresh, scopes, bounds."""

from __future__ import annotations

import pytest

from gateway.testing.prompt_cache import Block, PromptCache, prefixes

pytestmark = pytest.mark.fast


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def block(name: str, tokens: int, marked: bool = False) -> Block:
    """A block of ``tokens`` tokens (4 characters each)."""
    return Block(name, tokens * 4, marked)


def transcript(turns: int, tokens: int = 600) -> list[Block]:
    """A system block and ``turns`` messages, the last one marked (as an agent sends them)."""
    blocks = [block("system", 500)]
    blocks += [block(f"turn {i}", tokens) for i in range(turns)]
    blocks[-1] = Block(blocks[-1].key, blocks[-1].chars, True)
    return blocks


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> PromptCache:
    return PromptCache(clock=clock)


def test_prefix_tokens_follow_the_fakes_rule() -> None:
    """A prefix's tokens are ceil(cumulative characters / 4); its digest depends on every
    key before it, in order."""
    chain = prefixes([Block("a", 5), Block("b", 2), Block("c", 0)])
    assert [p.tokens for p in chain] == [2, 2, 2]
    assert len({p.digest for p in chain}) == 3
    assert prefixes([Block("b", 2), Block("a", 5)])[1].digest != chain[1].digest


def test_explicit_write_then_read_as_the_transcript_grows(cache: PromptCache) -> None:
    """The marker moves forward each turn: the next turn reads the previous marked prefix
    and writes only what was added since."""
    assert cache.use("s", transcript(1), explicit=True) == (0, 1100)
    assert cache.use("s", transcript(2), explicit=True) == (1100, 600)
    assert cache.use("s", transcript(3), explicit=True) == (1700, 600)
    # the same request again: all read, nothing written
    assert cache.use("s", transcript(3), explicit=True) == (2300, 0)


def test_explicit_without_marker_neither_reads_nor_writes(cache: PromptCache) -> None:
    cache.use("s", transcript(2), explicit=True)
    unmarked = [Block(b.key, b.chars) for b in transcript(2)]
    assert cache.use("s", unmarked, explicit=True) == (0, 0)


def test_explicit_reads_only_up_to_the_last_marker(cache: PromptCache) -> None:
    """A read looks back over the block boundaries before the last marker, never after it."""
    cache.use("s", transcript(3), explicit=True)
    # the same blocks, marked on the first turn only: the longer cached prefix is past it
    blocks = transcript(3)
    blocks = [Block(b.key, b.chars, i == 1) for i, b in enumerate(blocks)]
    assert cache.use("s", blocks, explicit=True) == (0, 1100)
    assert cache.use("s", blocks, explicit=True) == (1100, 0)


def test_explicit_reads_at_an_unmarked_boundary(cache: PromptCache) -> None:
    """A prefix written at a marker is read back by a request that marks a later block
    (Anthropic's lookback finds it at a boundary with no marker of its own)."""
    cache.use("s", [block("sys", 1200, True), block("u1", 10)], explicit=True)
    read, write = cache.use("s", [block("sys", 1200), block("u1", 10, True)], explicit=True)
    assert (read, write) == (1200, 10)


def test_every_marked_prefix_is_written(cache: PromptCache) -> None:
    """Two markers: both prefixes are stored, so a request diverging after the first
    still reads it."""
    first = [block("tools", 1100, True), block("a", 200), block("b", 100, True)]
    assert cache.use("s", first, explicit=True) == (0, 1400)
    other = [block("tools", 1100), block("x", 300, True)]
    assert cache.use("s", other, explicit=True) == (1100, 300)


def test_minimum(clock: Clock) -> None:
    """A marked prefix under the minimum is neither written nor read."""
    cache = PromptCache(clock=clock, minimum=1024)
    short = [block("sys", 1000, True)]
    assert cache.use("s", short, explicit=True) == (0, 0)
    assert cache.use("s", short, explicit=True) == (0, 0)
    assert len(cache) == 0
    assert cache.use("s", [block("sys", 1024, True)], explicit=True) == (0, 1024)
    low = PromptCache(clock=clock, minimum=0)
    assert low.use("s", short, explicit=True) == (0, 1000)
    assert low.use("s", short, explicit=True) == (1000, 0)


def test_entries_expire_after_the_ttl(clock: Clock, cache: PromptCache) -> None:
    cache.use("s", transcript(1), explicit=True)
    clock.now += 299.9
    assert cache.use("s", transcript(1), explicit=True) == (1100, 0)
    clock.now += 300.0
    assert cache.use("s", transcript(1), explicit=True) == (0, 1100)
    assert len(cache) == 1  # the expired entry was dropped, the new one kept


def test_a_read_refreshes_the_entry(clock: Clock, cache: PromptCache) -> None:
    """Read every 4 minutes, a 5-minute entry lives on; left alone 5 minutes, it is gone."""
    cache.use("s", [block("sys", 2000, True)], explicit=True)
    for i in range(5):
        clock.now += 240
        asked = [block("sys", 2000), block(f"question {i}", 10, True)]
        assert cache.use("s", asked, explicit=True) == (2000, 10)
    clock.now += 300
    assert cache.use("s", [block("sys", 2000, True)], explicit=True) == (0, 2000)


def test_ttl_is_a_setting(clock: Clock) -> None:
    cache = PromptCache(clock=clock, ttl=3600)
    cache.use("s", transcript(1), explicit=True)
    clock.now += 3000
    assert cache.use("s", transcript(1), explicit=True) == (1100, 0)


def test_scopes_are_independent(cache: PromptCache) -> None:
    """One deployment's cache is not another's: the same prompt is written again."""
    assert cache.use(("key-a", "m"), transcript(2), explicit=True) == (0, 1700)
    assert cache.use(("key-b", "m"), transcript(2), explicit=True) == (0, 1700)
    assert cache.use(("key-a", "m2"), transcript(2), explicit=True) == (0, 1700)
    assert cache.use(("key-a", "m"), transcript(2), explicit=True) == (1700, 0)


def test_automatic_mode_reads_the_longest_cached_prefix_and_writes_none(
    cache: PromptCache,
) -> None:
    """OpenAI's: every prefix of at least the minimum is stored, without markers; the
    next turn reads the longest, and no write is ever reported."""
    turn1 = [block("tools", 0), block("sys", 800), block("u1", 300)]
    assert cache.use("s", turn1, explicit=False) == (0, 0)
    turn2 = [*turn1, block("a1", 50), block("u2", 40)]
    assert cache.use("s", turn2, explicit=False) == (1100, 0)
    assert cache.use("s", turn2, explicit=False) == (1190, 0)
    # a prefix under the minimum is never stored
    assert cache.use("t", [block("short", 1000)], explicit=False) == (0, 0)
    assert cache.use("t", [block("short", 1000)], explicit=False) == (0, 0)


def test_a_changed_early_block_is_a_miss(cache: PromptCache) -> None:
    """Prefix identity covers every block before: a changed system prompt reads nothing."""
    cache.use("s", transcript(2), explicit=True)
    changed = transcript(2)
    changed[0] = block("another system", 500)
    assert cache.use("s", changed, explicit=True) == (0, 1700)


@pytest.mark.parametrize("explicit", [True, False])
def test_read_and_write_never_exceed_the_prompt(explicit: bool, clock: Clock) -> None:
    """Whatever the history, read + write is at most the request's prompt tokens."""
    cache = PromptCache(clock=clock, minimum=50)
    seen = []
    for n in range(1, 12):
        blocks = [
            Block(f"b{i % 5}", 37 * (i + 1), marked=(i % 3 == 2 or i == n - 1)) for i in range(n)
        ]
        prompt = prefixes(blocks)[-1].tokens
        read, write = cache.use("s", blocks, explicit=explicit)
        assert min(read, write) >= 0 and read + write <= prompt
        seen.append(read)
        clock.now += 100
    assert any(seen)


def test_entries_per_scope_are_bounded(clock: Clock) -> None:
    """At most max_entries per scope, the oldest dropped first."""
    cache = PromptCache(clock=clock, minimum=0, max_entries=3)
    for i in range(5):
        cache.use("s", [block(f"p{i}", 10, True)], explicit=True)
    assert len(cache) == 3
    assert cache.use("s", [block("p0", 10, True)], explicit=True) == (0, 10)
    assert cache.use("s", [block("p4", 10, True)], explicit=True) == (10, 0)


def test_scopes_are_bounded(clock: Clock) -> None:
    cache = PromptCache(clock=clock, minimum=0, max_scopes=2)
    for scope in ("a", "b", "c"):
        cache.use(scope, [block("p", 10, True)], explicit=True)
    assert cache.use("a", [block("p", 10, True)], explicit=True) == (0, 10)
    assert cache.use("c", [block("p", 10, True)], explicit=True) == (10, 0)


def test_a_marker_looks_back_twenty_blocks_and_no_further(cache: PromptCache) -> None:
    """Anthropic finds a cached prefix only at the 20 block boundaries up to a marker: a
    session that comes back after 20 new blocks rewrites its whole prompt."""
    scope = ("key", "m")
    first = transcript(3)
    written = cache.use(scope, first, explicit=True)[1]
    assert written == prefixes(first)[-1].tokens
    near = transcript(3 + 19)  # the old marker's boundary is the 20th before the new one
    assert cache.use(scope, near, explicit=True)[0] == written
    cache.clear()
    cache.use(scope, first, explicit=True)
    far = transcript(3 + 20)  # one block further: out of reach
    read, write = cache.use(scope, far, explicit=True)
    assert read == 0
    assert write == prefixes(far)[-1].tokens
