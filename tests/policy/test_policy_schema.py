"""The policy models: durations, defaults, and the JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from gateway.formats import CHAT, MESSAGES, RESPONSES
from gateway.policy.schema import Policy, Timeouts, parse_duration, policy_json_schema
from gateway.routing.load import bundled_policy_dir, load_policy_dir, parse_yaml

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("250ms", 0.25),
        ("8s", 8.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        (" 10 s ", 10.0),
        ("30", 30.0),
        (8, 8.0),
        (2.5, 2.5),
        (0, 0.0),
    ],
)
def test_duration_forms(value: Any, seconds: float) -> None:
    """Durations accept ms/s/m/h suffixes and plain seconds."""
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["fast", "5 minutes", "-1s", "1d", "", True, None, [1], -3])
def test_bad_durations(value: Any) -> None:
    """Anything else, negative values and booleans are rejected."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_durations_in_models() -> None:
    """Duration fields parse strings into float seconds."""
    t = Timeouts.model_validate({"connect": "250ms", "total": "10m", "first_byte": 3})
    assert (t.connect, t.total, t.first_byte, t.stream_idle) == (0.25, 600.0, 3.0, 60.0)


def test_default_policy_numbers() -> None:
    """The built-in defaults are the numbers docs/policies.md gives."""
    p = Policy()
    assert p.retry.max_retries == 8
    assert p.retry.on == ("rate_limit", "server_overload", "server_error", "timeout", "connection")
    rl = p.retry.rate_limit
    assert (rl.retry_after_cap, rl.retry_after_jitter, rl.base, rl.cap, rl.jitter) == (
        300.0, 0.10, 8.0, 60.0, 5.0,
    )  # fmt: skip
    assert (p.retry.transient.base, p.retry.transient.cap, p.retry.transient.jitter) == (
        1.0, 32.0, 0.25,
    )  # fmt: skip
    assert (p.retry.allowance.ratio, p.retry.allowance.min_per_second) == (0.2, 5.0)
    assert (p.turn_retry.on, p.turn_retry.wait, p.turn_retry.max) == (
        ("timeout", "connection", "server_error"), 10.0, 1,
    )  # fmt: skip
    assert (p.fallback.after_consecutive_server_errors, p.fallback.cooldown) == (2, 60.0)
    assert p.compaction.strategies == ("snip_tool_results", "drop_middle")
    assert (p.compaction.keep_recent, p.compaction.tool_result_max_chars) == (6, 4000)
    assert (p.output_recovery.max_continuations, p.output_recovery.respect_client_max_tokens) == (
        3, True,
    )  # fmt: skip
    assert (p.stream.keepalive, p.stream.on_midstream_failure) == (15.0, "error")
    t = p.timeouts
    assert (t.connect, t.first_byte, t.stream_idle, t.total) == (10.0, 120.0, 60.0, 600.0)


def test_models_are_frozen() -> None:
    """Policies cannot be changed after load."""
    with pytest.raises(ValidationError):
        Policy().retry.max_retries = 3


def test_json_schema_is_valid_draft_2020_12() -> None:
    """The schema is a valid draft 2020-12 JSON Schema with a title."""
    schema = policy_json_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"]


def test_json_schema_accepts_bundled_files() -> None:
    """Every bundled policy file validates against the JSON Schema."""
    validator = Draft202012Validator(policy_json_schema())
    files = sorted(bundled_policy_dir().rglob("*.yaml"))
    assert files
    for path in files:
        errors = [e.message for e in validator.iter_errors(parse_yaml(path.read_text()))]
        assert errors == [], path


@pytest.mark.parametrize(
    "doc",
    [
        {"policies": {"p": {"retry": {"max_retrise": 1}}}},
        {"policies": {"p": {"timeouts": {"total": "fast"}}}},
        {"teams": {"t": {"keys": ["plain-key"]}}},
        {"providers": {"x": {"api": "grpc"}}},
        {"modles": {}},
    ],
)
def test_json_schema_rejects_bad_files(doc: dict[str, Any]) -> None:
    """The schema catches unknown keys, bad durations, plain keys and bad enums, like check."""
    assert list(Draft202012Validator(policy_json_schema()).iter_errors(doc))


def test_bundled_standard_policy_is_the_default() -> None:
    """The bundled `standard` policy writes out exactly the built-in defaults."""
    ps = load_policy_dir(bundled_policy_dir())
    assert ps.policies["standard"] == Policy()
    assert ps.policies["default"] == Policy()


def test_bundled_demo_set() -> None:
    """The bundled demo team routes sim-down to sim-ok, sim-small to sim-large and the
    Anthropic-format sim-claude to the OpenAI-format sim-gpt."""
    ps = load_policy_dir(bundled_policy_dir(), env={})
    assert ps.team_for_key("demo-key") == "demo"
    assert ps.default_team == "demo"
    assert {p.api for p in ps.providers.values()} == {"sim"}
    assert ps.providers["sim-anthropic"].speaks == "anthropic"
    assert ps.deployments["sim-claude"][0].fmts == (MESSAGES,)
    assert ps.deployments["sim-gpt"][0].fmts == (CHAT,)  # chat: Responses translated
    cross = ps.route("demo", "sim-claude", "/v1/messages")
    assert cross is not None and cross.policy.fallback.chain == ("sim-gpt",)
    assert ps.models["sim-small"].context_window == 2048
    down = ps.route("demo", "sim-down", "/v1/chat/completions")
    assert down is not None
    assert down.policy.fallback.chain == ("sim-ok",)
    small = ps.route("demo", "sim-small", "/v1/messages")
    assert small is not None
    assert small.policy.fallback.on_prompt_too_long == ("sim-large",)
    flaky = ps.route("demo", "sim-flaky", "/v1/chat/completions")
    assert flaky is not None
    assert flaky.policy_name == "demo"
    assert flaky.policy.retry.transient.base == 0.25
    assert flaky.policy.retry.rate_limit.base == 0.5
    assert flaky.policy.fallback.cooldown == 30.0
    assert ps.team_models("demo") == sorted(ps.models)


def test_speaks_is_for_the_sim_provider_only() -> None:
    """`speaks` picks the one format the built-in sim provider answers in; another
    provider's format is its `api`, so `speaks` there is an error."""
    import pydantic

    from gateway.policy.schema import Provider
    from gateway.routing.policyset import formats_of

    assert formats_of("sim", "chat", Provider(api="sim", speaks="anthropic").speaks) == (MESSAGES,)
    assert formats_of("sim", "chat", None) == (CHAT, RESPONSES, MESSAGES)
    assert formats_of("openai", ("responses", "chat")) == (RESPONSES, CHAT)
    assert formats_of("openai", "responses") == (RESPONSES,)
    with pytest.raises(pydantic.ValidationError, match="speaks is for api sim"):
        Provider(api="openai", base_url="https://x/v1", speaks="anthropic")
