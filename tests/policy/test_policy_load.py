"""Loading a policy directory: merging, references, and every problem as file:line: message."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.errors import PolicyError, Problem
from gateway.policy.schema import Policy, PolicyFile
from gateway.routing.load import SECTIONS, load_policy_dir, load_policy_texts, parse_yaml
from gateway.routing.policyset import PolicySet

pytestmark = pytest.mark.fast

Load = Callable[..., PolicySet]
Problems = Callable[..., list[str]]

SIM = """
providers:
  sim: {api: sim}
models:
  m-ok: {provider: sim}
  m-big: {provider: sim, context_window: 200000}
"""
KEY_A = "sha256:" + hashlib.sha256(b"key-a").hexdigest()
KEY_B = "sha256:" + hashlib.sha256(b"key-b").hexdigest()


# ---- good sets ------------------------------------------------------------------


def test_files_in_subfolders_merge_into_one_set(load: Load) -> None:
    """Providers, models, policies and teams from files in any folder form one set."""
    ps = load(
        {
            "base.yaml": SIM,
            "policies/p.yml": "policies:\n  fast: {retry: {max_retries: 1}}\n",
            "teams/a/team.yaml": f"teams:\n  a: {{keys: ['{KEY_A}']}}\n",
        }
    )
    assert set(ps.providers) == {"sim"}
    assert set(ps.models) == {"m-ok", "m-big"}
    assert set(ps.policies) == {"fast", "default"}
    assert set(ps.teams) == {"a"}
    assert ps.policies["fast"].retry.max_retries == 1
    assert sorted(ps.files) == ["base.yaml", "policies/p.yml", "teams/a/team.yaml"]
    assert ps.files["base.yaml"] == hashlib.sha256(Path("p/base.yaml").read_bytes()).hexdigest()


def test_hidden_files_and_folders_are_skipped(load: Load) -> None:
    """Dot folders (Kubernetes ConfigMap ..data) and non-YAML files are not read twice."""
    ps = load({"a.yaml": SIM, "..data/a.yaml": SIM, ".hidden.yaml": SIM, "notes.txt": "x: ["})
    assert list(ps.files) == ["a.yaml"]


def test_empty_files_are_fine(load: Load) -> None:
    """An empty file, a comment-only file and an empty section are accepted."""
    ps = load({"a.yaml": SIM, "b.yaml": "", "c.yaml": "# nothing yet\n", "d.yaml": "teams:\n"})
    assert set(ps.files) == {"a.yaml", "b.yaml", "c.yaml", "d.yaml"}
    assert ps.teams == {}


def test_builtin_default_policy_is_spec_numbers(load: Load) -> None:
    """Without a `default` in the files, the built-in one is Policy() and routes use it."""
    ps = load({"a.yaml": SIM + "teams:\n  t: {}\n"})
    assert ps.policies["default"] == Policy()
    route = ps.route("t", "m-ok", "/v1/chat/completions")
    assert route is not None
    assert route.policy == Policy()
    assert route.policy_name == "default"
    assert route.id == "t/0"


def test_a_file_may_define_default(load: Load) -> None:
    """A `default` policy in a file replaces the built-in one."""
    ps = load({"a.yaml": SIM + "policies:\n  default: {retry: {max_retries: 2}}\n"})
    assert ps.policies["default"].retry.max_retries == 2


def test_route_override_is_deep_merged(load: Load) -> None:
    """The override merges into the named policy: mappings merge, lists replace."""
    ps = load(
        {
            "a.yaml": SIM,
            "p.yaml": """
                policies:
                  base:
                    retry: {max_retries: 5, transient: {base: 2s, cap: 10s}}
                    fallback: {chain: [m-ok], cooldown: 5m}
            """,
            "t.yaml": """
                teams:
                  t:
                    routes:
                      - name: r1
                        match: {model: m-big}
                        policy: base
                        override:
                          retry: {transient: {cap: 20s}}
                          fallback: {chain: [m-big, m-ok]}
            """,
        }
    )
    route = ps.route("t", "m-big", "/v1/chat/completions")
    assert route is not None
    assert route.id == "r1"
    p = route.policy
    assert p.retry.max_retries == 5
    assert (p.retry.transient.base, p.retry.transient.cap) == (2.0, 20.0)
    assert p.fallback.chain == ("m-big", "m-ok")
    assert p.fallback.cooldown == 300.0
    assert ps.policies["base"].retry.transient.cap == 10.0  # the named policy is untouched


def test_on_key_is_not_a_boolean(load: Load) -> None:
    """`on:` is a key (YAML 1.2 booleans), not True as YAML 1.1 would read it."""
    ps = load({"a.yaml": "policies:\n  p: {retry: {on: [timeout]}, turn_retry: {on: []}}\n"})
    assert ps.policies["p"].retry.on == ("timeout",)
    assert ps.policies["p"].turn_retry.on == ()
    assert parse_yaml("on: yes\nx: true\n") == {"on": "yes", "x": True}


def test_sha256_keys_are_case_insensitive(load: Load) -> None:
    """An upper-case sha256 hex key is stored lower-case and matches."""
    upper = "sha256:" + KEY_A.removeprefix("sha256:").upper()
    ps = load({"a.yaml": f"teams:\n  t: {{keys: ['{upper}']}}\n"})
    assert ps.team_for_key("key-a") == "t"


def test_env_keys_are_read_and_hashed(load: Load) -> None:
    """An `env:NAME` key is read from the given environment at load and held hashed."""
    ps = load(
        {"a.yaml": f"teams:\n  t: {{keys: ['env:T_KEY', '{KEY_B}']}}\n"},
        env={"T_KEY": "secret-t"},
    )
    assert ps.team_for_key("secret-t") == "t"
    assert ps.team_for_key("key-b") == "t"
    assert ps.team_for_key("env:T_KEY") is None
    assert "secret-t" not in repr(ps.describe())


def test_provider_api_key_env_is_not_required(load: Load) -> None:
    """Provider key variables are read at request time, so loading works without them."""
    ps = load(
        {
            "a.yaml": """
                providers:
                  oa: {api: openai, base_url: https://api.openai.com/v1, api_key_env: OA_KEY}
                models:
                  gpt: {provider: oa}
            """
        }
    )
    assert ps.missing_provider_env({}) == ["OA_KEY"]
    assert ps.missing_provider_env({"OA_KEY": "x"}) == []


def test_single_file_path(tmp_path: Path) -> None:
    """`check` may also be pointed at one file."""
    f = tmp_path / "one.yaml"
    f.write_text(SIM)
    assert set(load_policy_dir(f).models) == {"m-ok", "m-big"}


def test_load_policy_texts_in_memory() -> None:
    """In-memory files load like a directory (for other modules' tests)."""
    ps = load_policy_texts({"a.yaml": SIM, "t.yaml": "teams:\n  t: {}\n"})
    assert ps.team_models("t") == ["m-big", "m-ok"]


def test_sections_match_policy_file() -> None:
    """The loader checks exactly the sections the PolicyFile model declares."""
    assert list(SECTIONS) == list(PolicyFile.model_fields)


def test_problem_and_error_text() -> None:
    """A Problem prints as file:line: message; a PolicyError one problem per line."""
    err = PolicyError([Problem("a.yaml", 3, "x: bad"), Problem("dir", 0, "gone")])
    assert str(err) == "a.yaml:3: x: bad\ndir: gone"


# ---- problems -------------------------------------------------------------------


def test_yaml_syntax_error_has_line(problems: Problems) -> None:
    """A YAML syntax error is reported at the parser's line."""
    assert problems({"a.yaml": "models:\n  a:\n    provider: x\n   bad: 1\n"}) == [
        "p/a.yaml:4: YAML syntax error: expected <block end>, but found '<block mapping start>'"
        " (while parsing a block mapping)"
    ]


def test_tab_indent_is_a_syntax_error(problems: Problems) -> None:
    """Tabs are reported like any syntax error."""
    assert problems({"a.yaml": "models:\n\ta: 1\n"}) == [
        "p/a.yaml:2: YAML syntax error: found character '\\t' that cannot start any token"
        " (while scanning for the next token)"
    ]


def test_two_documents_are_an_error(problems: Problems) -> None:
    """A file holds one YAML document."""
    assert problems({"a.yaml": "models: {}\n---\nteams: {}\n"}) == [
        "p/a.yaml:2: YAML syntax error: expected a single document in the stream"
        " but found another document"
    ]


def test_duplicate_yaml_key_in_one_file(problems: Problems) -> None:
    """The same key twice in one mapping is an error at the second, naming the first line."""
    text = "providers:\n  sim: {api: sim}\nmodels:\n  a: {provider: sim}\n  a: {provider: sim}\n"
    assert problems({"a.yaml": text}) == ["p/a.yaml:5: models.a: duplicate key (first at line 4)"]


def test_unknown_key_names_its_path(problems: Problems) -> None:
    """An unknown key is an error at its own line, naming the full key path."""
    text = """
        policies:
          standard:
            retry:
              max_retrise: 3
    """
    assert problems({"base.yaml": text}) == [
        "p/base.yaml:4: policies.standard.retry.max_retrise: unknown key"
    ]


def test_unknown_top_level_section(problems: Problems) -> None:
    """A top-level key other than the four sections is an error."""
    assert problems({"a.yaml": "modles: {}\n"}) == [
        "p/a.yaml:1: modles: unknown key (expected providers, models, policies, teams)"
    ]


def test_file_that_is_not_a_mapping(problems: Problems) -> None:
    """A file whose top level is a list is an error."""
    assert problems({"a.yaml": "- a\n"}) == [
        "p/a.yaml:1: (top level): a policy file is a mapping with any of"
        " providers:, models:, policies:, teams:"
    ]


def test_section_that_is_not_a_mapping(problems: Problems) -> None:
    """A section must map names to settings."""
    assert problems({"a.yaml": "teams: [a]\n"}) == [
        "p/a.yaml:1: teams: must be a mapping of team names"
    ]


def test_bad_duration(problems: Problems) -> None:
    """A duration that is not a number or 250ms/8s/5m/1h is an error naming the value."""
    text = "policies:\n  p:\n    timeouts:\n      total: fast\n"
    assert problems({"a.yaml": text}) == [
        "p/a.yaml:4: policies.p.timeouts.total: invalid duration 'fast':"
        " use a number of seconds or 250ms, 8s, 5m, 1h"
    ]


def test_negative_duration(problems: Problems) -> None:
    """Negative durations are rejected."""
    assert problems({"a.yaml": "policies:\n  p: {stream: {keepalive: -1}}\n"}) == [
        "p/a.yaml:2: policies.p.stream.keepalive: invalid duration -1: must be >= 0"
    ]


def test_wrong_type(problems: Problems) -> None:
    """A wrong type names the path, pydantic's reason and the value."""
    assert problems({"a.yaml": "policies:\n  p:\n    retry:\n      max_retries: many\n"}) == [
        "p/a.yaml:4: policies.p.retry.max_retries: Input should be a valid integer,"
        " unable to parse string as an integer, got 'many'"
    ]


def test_wrong_literal_in_list(problems: Problems) -> None:
    """A bad list item is located at the item's line."""
    text = "policies:\n  p:\n    retry:\n      on:\n        - timeout\n        - rate_limt\n"
    (problem,) = problems({"a.yaml": text})
    assert problem.startswith("p/a.yaml:6: policies.p.retry.on[1]: Input should be 'rate_limit',")
    assert problem.endswith(", got 'rate_limt'")


def test_missing_required_key(problems: Problems) -> None:
    """A provider without `api` names the missing key at the provider's line."""
    assert problems({"a.yaml": "providers:\n  x:\n    base_url: http://h\n"}) == [
        "p/a.yaml:2: providers.x.api: missing required key"
    ]


def test_cross_field_rule(problems: Problems) -> None:
    """Rules over several fields (cap below base) are reported at their mapping."""
    text = "policies:\n  p:\n    retry:\n      transient: {base: 10s, cap: 1s}\n"
    assert problems({"a.yaml": text}) == [
        "p/a.yaml:4: policies.p.retry.transient: cap (1s) must not be below base (10s)"
    ]


def test_real_provider_needs_base_url(problems: Problems) -> None:
    """openai and anthropic providers need a base_url."""
    assert problems({"a.yaml": "providers:\n  oa: {api: openai}\n"}) == [
        "p/a.yaml:2: providers.oa: base_url is required for api openai"
    ]


def test_name_defined_in_two_files_names_both(problems: Problems) -> None:
    """The same model (or team, ...) in two files is an error naming both files and lines."""
    assert problems(
        {
            "a.yaml": SIM,
            "teams/x.yaml": "teams:\n  t: {}\n",
            "teams/y.yaml": "# y\nteams:\n  t: {}\nmodels:\n  m-ok: {provider: sim}\n",
        }
    ) == [
        "p/teams/y.yaml:3: teams.t: team 't' is already defined in p/teams/x.yaml:2",
        "p/teams/y.yaml:5: models.m-ok: model 'm-ok' is already defined in p/a.yaml:4",
    ]


def test_unknown_provider_reference(problems: Problems) -> None:
    """A model naming an unknown provider is an error, with a suggestion when close."""
    assert problems({"a.yaml": SIM + "  m3: {provider: simm}\n"}) == [
        "p/a.yaml:6: models.m3.provider: unknown provider 'simm' (did you mean 'sim'?)"
    ]


def test_unknown_model_references_in_policy(problems: Problems) -> None:
    """Fallback chain, on_prompt_too_long and summarize_model must name defined models."""
    text = """
        policies:
          p:
            fallback:
              chain: [m-ok, nope]
              on_prompt_too_long: [huge]
            compaction: {summarize_model: tiny}
    """
    assert problems({"a.yaml": SIM, "p.yaml": text}) == [
        "p/p.yaml:4: policies.p.fallback.chain[1]: unknown model 'nope'",
        "p/p.yaml:5: policies.p.fallback.on_prompt_too_long[0]: unknown model 'huge'",
        "p/p.yaml:6: policies.p.compaction.summarize_model: unknown model 'tiny'",
    ]


def test_unknown_policy_reference(problems: Problems) -> None:
    """A route naming an unknown policy is an error at the route's `policy:` line."""
    text = """
        policies:
          standard: {}
        teams:
          t:
            routes:
              - match: {model: "*"}
                policy: standrd
    """
    assert problems({"a.yaml": text}) == [
        "p/a.yaml:7: teams.t.routes[0].policy: unknown policy 'standrd' (did you mean 'standard'?)"
    ]


def test_override_that_does_not_validate(problems: Problems) -> None:
    """An override is validated merged over its policy; errors point into the override."""
    text = """
        teams:
          t:
            routes:
              - override:
                  retry: {max_retries: -1}
                  stream:
                    bogus: 1
    """
    assert problems({"a.yaml": text}) == [
        "p/a.yaml:5: teams.t.routes[0].override.retry.max_retries:"
        " Input should be greater than or equal to 0, got -1",
        "p/a.yaml:7: teams.t.routes[0].override.stream.bogus: unknown key",
    ]


def test_override_with_unknown_model(problems: Problems) -> None:
    """A model named by an override must exist; the base policy's models are checked once."""
    text = """
        teams:
          t:
            routes:
              - override: {fallback: {chain: [m-ok, ghost]}}
    """
    assert problems({"a.yaml": SIM, "t.yaml": text}) == [
        "p/t.yaml:4: teams.t.routes[0].override.fallback.chain[1]: unknown model 'ghost'"
    ]


def test_env_key_missing_or_empty(problems: Problems) -> None:
    """An `env:NAME` team key whose variable is missing or empty fails the set."""
    text = "teams:\n  t:\n    keys:\n      - env:T_ONE\n      - env:T_TWO\n"
    assert problems({"a.yaml": text}, env={"T_TWO": ""}) == [
        "p/a.yaml:4: teams.t.keys[0]: environment variable T_ONE is not set or empty",
        "p/a.yaml:5: teams.t.keys[1]: environment variable T_TWO is not set or empty",
    ]


def test_plain_key_is_rejected_without_echoing_it(problems: Problems) -> None:
    """A key that is neither sha256:<hex> nor env:NAME is an error that does not print it."""
    text = "teams:\n  t:\n    keys: [sk-live-123, 'sha256:abc']\n"
    msg = (
        "a key must be 'sha256:<64 hex digits>' (see `llm-gateway hash-key`) or 'env:NAME';"
        " plain keys are not accepted"
    )
    assert problems({"a.yaml": text}) == [
        f"p/a.yaml:3: teams.t.keys[0]: {msg}",
        f"p/a.yaml:3: teams.t.keys[1]: {msg}",
    ]


def test_same_key_for_two_teams(problems: Problems) -> None:
    """One key may select only one team."""
    assert problems(
        {
            "a.yaml": f"teams:\n  a: {{keys: ['{KEY_A}']}}\n",
            "b.yaml": "teams:\n  b:\n    keys: [env:B_KEY]\n",
        },
        env={"B_KEY": "key-a"},
    ) == ["p/b.yaml:3: teams.b.keys[0]: the same key is already used by team 'a'"]


def test_duplicate_route_names(problems: Problems) -> None:
    """Route names are unique within a team (they are metric labels)."""
    text = "teams:\n  t:\n    routes:\n      - name: r\n      - name: r\n"
    assert problems({"a.yaml": text}) == [
        "p/a.yaml:5: teams.t.routes[1].name: route name 'r' is already used by routes[0]"
    ]


def test_all_problems_of_a_set_are_reported(problems: Problems) -> None:
    """Problems in several files and kinds are reported together, sorted by file and line."""
    assert problems(
        {
            "a.yaml": SIM + "  m3: {provider: nope}\n",
            "b.yaml": "policies:\n  p: {retry: {typo: 1}}\n",
            "c.yaml": "teams:\n  t: {routes: [{policy: q}]}\n",
        }
    ) == [
        "p/a.yaml:6: models.m3.provider: unknown provider 'nope'",
        "p/b.yaml:2: policies.p.retry.typo: unknown key",
        "p/c.yaml:2: teams.t.routes[0].policy: unknown policy 'q'",
    ]


def test_no_reference_noise_after_a_syntax_error(problems: Problems) -> None:
    """When a file cannot be parsed, names it would define are not reported as unknown."""
    assert problems(
        {
            "a.yaml": "providers:\n  sim: {api: sim\n",
            "b.yaml": "models:\n  m: {provider: sim}\n",
        }
    ) == [
        "p/a.yaml:3: YAML syntax error: expected ',' or '}', but got '<stream end>'"
        " (while parsing a flow mapping)"
    ]


def test_invalid_entry_is_not_reported_as_unknown(problems: Problems) -> None:
    """A reference to a defined-but-invalid name reports only the invalid definition."""
    assert problems(
        {
            "a.yaml": "providers:\n  sim: {api: grpc}\nmodels:\n  m: {provider: sim}\n",
        }
    ) == [
        "p/a.yaml:2: providers.sim.api: Input should be 'openai', 'anthropic', 'sim',"
        " 'bedrock', 'vertex', 'azure' or 'gemini', got 'grpc'"
    ]


def test_not_utf8(problems: Problems, tmp_path: Path) -> None:
    """A file that is not UTF-8 is an error at the line of the first bad byte."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.yaml").write_bytes(b"models:\n  a: \xff\n")
    assert problems({}) == ["p/a.yaml:2: not valid UTF-8"]


def test_missing_or_empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing directory, or one without YAML files, is an error."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PolicyError) as info:
        load_policy_dir(Path("nope"))
    assert str(info.value) == "nope: no such policy directory"
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyError) as info:
        load_policy_dir(Path("empty"))
    assert str(info.value) == "empty: no policy files (*.yaml, *.yml) found"
