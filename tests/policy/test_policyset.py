"""The compiled PolicySet: keys -> teams, routing, model globs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from gateway.policy.schema import Policy
from gateway.routing import policyset
from gateway.routing.load import load_policy_texts
from gateway.routing.policyset import PolicySet, ResolvedRoute, hash_key

pytestmark = pytest.mark.fast

SET = """
providers:
  sim: {api: sim}
models:
  glm-4.7: {provider: sim}
  glm-4-flash: {provider: sim}
  gpt-4o: {provider: sim}
  claude-x: {provider: sim}
policies:
  standard: {}
  quick: {retry: {max_retries: 1}}
teams:
  search:
    keys: ["%s", "env:SEARCH_KEY"]
    models: ["glm-*", "gpt-4o"]
    routes:
      - name: chat-glm
        match: {model: "glm-4.7", path: /v1/chat/completions}
        policy: standard
        override: {fallback: {chain: [glm-4-flash]}}
      - match: {model: "glm-*"}
        policy: quick
      - match: {model: "*"}
  ads:
    models: ["claude-*"]
    routes:
      - match: {model: "gpt-?o"}
        policy: quick
"""


@pytest.fixture
def ps() -> PolicySet:
    """A set with two teams and a few routes."""
    return load_policy_texts(
        {"a.yaml": SET % hash_key("search-key")}, env={"SEARCH_KEY": "from-env"}
    )


def test_hash_key_form() -> None:
    """hash_key gives the sha256: form of the key's UTF-8 bytes."""
    assert hash_key("demo-key") == "sha256:" + hashlib.sha256(b"demo-key").hexdigest()
    assert hash_key("ключ") == "sha256:" + hashlib.sha256("ключ".encode()).hexdigest()


def test_team_for_key(ps: PolicySet) -> None:
    """sha256 and env keys select their team; unknown or empty keys select none."""
    assert ps.team_for_key("search-key") == "search"
    assert ps.team_for_key("from-env") == "search"
    assert ps.team_for_key("nope") is None
    assert ps.team_for_key("") is None
    assert ps.team_for_key(hash_key("search-key")) is None  # the hash is not the key


def test_keys_are_held_as_keyed_digests(ps: PolicySet) -> None:
    """The set keeps no key and no SHA-256 digest of one: the team table holds keyed digests
    of the files' digests, the teams a placeholder for them, ``env:`` names as written."""
    assert ps.team_for_key("search-key") == "search"
    sha = hashlib.sha256(b"search-key")
    held = [*ps._key_to_team, *ps._known]
    assert len(ps._key_to_team) == 2 and len(ps._known) == 1
    assert all(isinstance(k, bytes) and len(k) == 16 for k in held)
    assert sha.digest()[:16] not in held and sha.hexdigest() not in repr(held)
    assert ps.teams["search"].keys == (policyset.HELD_KEY, "env:SEARCH_KEY")
    assert "search-key" not in repr(dict(ps.teams)) + repr(ps.describe())


def test_key_digests_depend_on_the_process_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process key (another process) gives other digests for the same team files
    and keys: nothing held can be computed in advance."""
    text = {"a.yaml": SET % hash_key("search-key")}
    first = load_policy_texts(text, env={"SEARCH_KEY": "from-env"})
    assert first.team_for_key("search-key") == "search"
    key = b"another-process-key-of-32-bytes!"
    for name, person in (("_OF_SHA256", b"sha256"), ("_OF_KEY", b"key")):
        state = hashlib.blake2s(key=key, digest_size=16, person=person)
        monkeypatch.setattr(policyset, name, state)
    second = load_policy_texts(text, env={"SEARCH_KEY": "from-env"})
    assert second.team_for_key("search-key") == "search"
    assert len(first._key_to_team) == len(second._key_to_team) == 2
    assert not set(first._key_to_team) & set(second._key_to_team)
    assert len(first._known) == len(second._known) == 1
    assert not set(first._known) & set(second._known)


def test_known_keys_cache_is_bounded_and_only_holds_found_keys(
    ps: PolicySet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only keys that matched a team are cached, and never more than the bound."""
    monkeypatch.setattr(policyset, "_KNOWN_KEYS_MAX", 1)
    for i in range(50):
        assert ps.team_for_key(f"unknown-{i}") is None
    assert ps._known == {}
    assert ps.team_for_key("search-key") == "search"
    assert ps.team_for_key("from-env") == "search"
    assert len(ps._known) == 1
    for _ in range(3):  # cached or not, the answer is the same
        assert ps.team_for_key("search-key") == ps.team_for_key("from-env") == "search"
        assert ps.team_for_key("search-keY") is None
    assert len(ps._known) == 1


def test_first_matching_route_wins(ps: PolicySet) -> None:
    """Routes are tried in order; path-specific routes only match their path."""
    chat = ps.route("search", "glm-4.7", "/v1/chat/completions")
    assert chat is not None
    assert chat.id == "chat-glm"
    assert chat.policy.fallback.chain == ("glm-4-flash",)
    other_path = ps.route("search", "glm-4.7", "/v1/messages")
    assert other_path is not None
    assert other_path.id == "search/1"
    assert other_path.policy.retry.max_retries == 1
    rest = ps.route("search", "gpt-4o", "/v1/chat/completions")
    assert rest == ResolvedRoute(
        id="search/2", team="search", policy=Policy(), policy_name="default"
    )


def test_no_route(ps: PolicySet) -> None:
    """A model no route matches, or an unknown team, has no route."""
    assert ps.route("ads", "claude-x", "/v1/messages") is None
    assert ps.route("nobody", "glm-4.7", "/v1/chat/completions") is None
    gpt = ps.route("ads", "gpt-4o", "/v1/messages")
    assert gpt is not None
    assert gpt.id == "ads/0"


def test_route_lookups_are_memoised_and_bounded(
    ps: PolicySet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated lookups return the same object; the memo never grows past its bound."""
    monkeypatch.setattr(policyset, "ROUTE_MEMO_SIZE", 3)
    first = ps.route("search", "glm-4.7", "/v1/chat/completions")
    assert ps.route("search", "glm-4.7", "/v1/chat/completions") is first
    for i in range(10):
        ps.route("search", f"random-{i}", "/v1/chat/completions")
    assert len(ps._memo) == 3
    assert ps.route("search", "glm-4.7", "/v1/chat/completions") == first


def test_model_globs(ps: PolicySet) -> None:
    """Team model globs are fnmatch patterns, matched case-sensitively against the whole name."""
    assert ps.model_allowed("search", "glm-4.7")
    assert ps.model_allowed("search", "gpt-4o")
    assert not ps.model_allowed("search", "gpt-4o-mini")
    assert not ps.model_allowed("search", "GLM-4.7")
    assert not ps.model_allowed("search", "claude-x")
    assert ps.model_allowed("ads", "claude-x")
    assert not ps.model_allowed("nobody", "glm-4.7")


def test_team_models(ps: PolicySet) -> None:
    """team_models lists the defined public models the team may call, sorted."""
    assert ps.team_models("search") == ["glm-4-flash", "glm-4.7", "gpt-4o"]
    assert ps.team_models("ads") == ["claude-x"]
    assert ps.team_models("nobody") == []


def test_default_team_and_routes(ps: PolicySet) -> None:
    """default_team is the first team by name; routes() lists a team's routes in order."""
    assert ps.default_team == "ads"
    assert [r.id for r in ps.routes("search")] == ["chat-glm", "search/1", "search/2"]
    assert PolicySet.empty().default_team is None


def test_set_is_read_only(ps: PolicySet) -> None:
    """The mappings of a set cannot be changed in place."""
    with pytest.raises(TypeError):
        ps.teams["x"] = ps.teams["ads"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        ps.extra = 1  # type: ignore[attr-defined]


def test_empty_set() -> None:
    """The empty set knows only the built-in default policy."""
    empty = PolicySet.empty()
    assert dict(empty.policies) == {"default": Policy()}
    assert empty.team_for_key("x") is None
    assert empty.route("t", "m", "/v1/chat/completions") is None


def test_describe_has_no_keys(ps: PolicySet) -> None:
    """describe() is JSON-able and shows key counts, never keys or hashes."""
    import json

    text = json.dumps(ps.describe())
    assert "sha256" not in text
    assert "SEARCH_KEY" not in text
    assert ps.describe()["teams"]["search"]["keys"] == 2


def test_version_follows_file_contents() -> None:
    """The set version changes when a file's content changes, not otherwise."""
    a: Callable[[str], PolicySet] = lambda t: load_policy_texts({"a.yaml": t})  # noqa: E731
    assert a("models: {}\n").version == a("models: {}\n").version
    assert a("models: {}\n").version != a("models: {}\n# changed\n").version
