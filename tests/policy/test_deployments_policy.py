"""The deployments policy format (docs/policies.md, Deployments): names, keys per
deployment, and problems."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.routing.load import check_policy_dir
from gateway.routing.policyset import Deployed, PolicySet

pytestmark = pytest.mark.fast

Load = Callable[..., PolicySet]
Problems = Callable[..., list[str]]

PROVIDERS = """
providers:
  openai: {api: openai, base_url: https://a.example/v1, api_key_env: [KEY_A, KEY_B]}
  eu: {api: openai, base_url: https://eu.example/v1, api_key_env: EU_KEY}
  claude: {api: anthropic, base_url: https://c.example, api_key_env: C_KEY}
"""


def test_a_key_list_and_deployments_resolve_to_named_deployments(load: Load) -> None:
    ps = load({"a.yaml": PROVIDERS + """
models:
  gpt: {provider: openai, upstream_model: gpt-4o}
  mixed:
    deployments:
      - {provider: openai}
      - {provider: eu, upstream_model: gpt-4o-eu, weight: 2, name: azure-eu}
    balance: least_busy
  single: {provider: eu}
"""})  # fmt: skip
    assert ps.deployments["gpt"] == (
        Deployed("openai#1", "openai", "KEY_A", "gpt-4o"),
        Deployed("openai#2", "openai", "KEY_B", "gpt-4o"),
    )
    assert ps.deployments["mixed"] == (
        Deployed("openai#1", "openai", "KEY_A", "mixed"),
        Deployed("openai#2", "openai", "KEY_B", "mixed"),
        Deployed("azure-eu", "eu", "EU_KEY", "gpt-4o-eu", 2.0),
    )
    assert ps.models["mixed"].balance == "least_busy"
    assert ps.deployments["single"] == (Deployed("eu", "eu", "EU_KEY", "single"),)
    assert ps.missing_provider_env({"KEY_A": "x"}) == ["EU_KEY", "KEY_B"]


def test_deployment_problems_are_located(problems: Problems) -> None:
    found = problems({"a.yaml": PROVIDERS + """
models:
  both: {provider: eu, deployments: [{provider: eu}]}
  neither: {upstream_model: x}
  unknown:
    deployments: [{provider: eu}, {provider: nope}]
  formats:
    deployments: [{provider: eu}, {provider: claude}]
    upstream_api: responses
  twice:
    deployments: [{provider: eu}, {provider: eu}]
"""})  # fmt: skip
    assert found == [
        "p/a.yaml:7: models.both: give provider (one upstream) or deployments (several), not both",
        "p/a.yaml:8: models.neither: provider is required (or deployments)",
        "p/a.yaml:10: models.unknown.deployments[1].provider: unknown provider 'nope'"
        " (did you mean 'openai'?)",
        "p/a.yaml:13: models.formats.upstream_api: upstream_api chooses between OpenAI's chat"
        " completions and Responses APIs; this model is served by anthropic-format providers",
        "p/a.yaml:15: models.twice.deployments: two deployments are named 'eu': give each a"
        " distinct name",
    ]


def test_check_warns_about_each_unset_key_of_a_list(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.yaml").write_text(
        PROVIDERS + "models:\n  gpt: {provider: openai, price: {input: 1, output: 2}}\n"
    )
    _, warnings = check_policy_dir(tmp_path, env={"KEY_A": "x"})
    assert [(w.line, w.message.split()[3]) for w in warnings] == [(3, "KEY_B")]
