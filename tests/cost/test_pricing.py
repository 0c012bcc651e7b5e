"""Prices (gateway/money/pricing.py): held to genai-prices' own calculation over its whole
table, found by provider kind or base_url (never by the model's name alone), and the
policy's ``price:`` over the table, a deployment's over its model's."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price
from genai_prices.data_snapshot import get_snapshot

from gateway.formats.usage import Usage
from gateway.money import pricing
from gateway.policy.schema import Provider
from gateway.routing.policyset import PolicySet

Load = Callable[..., PolicySet]

#: Plain, cache reads, cache writes, both over a 200k / 272k tier's start, a long prompt.
USAGES = [
    Usage(1000, 200),
    Usage(5000, 300, cache_read=3000),
    Usage(5000, 300, cache_creation=2000),
    Usage(300_000, 1000, cache_read=100_000, cache_creation=50_000),
    Usage(250_000, 10),
    Usage(0, 0),
]
#: Providers the comparison must reach (each with at least one priced model).
MUST = {"openai", "anthropic", "google", "aws", "azure", "deepseek", "mistral", "x-ai", "groq"}


def table_usage(u: Usage) -> TableUsage:
    return TableUsage(
        input_tokens=u.input,
        output_tokens=u.output,
        cache_read_tokens=u.cache_read,
        cache_write_tokens=u.cache_creation,
    )


def test_cost_is_genai_prices_own_over_the_whole_table() -> None:
    """Price.cost equals calc_price(...).total_price within 1e-9 (relative) for every model
    of every provider of the table it prices, on every usage (tiers, cache reads/writes)."""
    compared: Counter[str] = Counter()
    for provider in get_snapshot().providers:
        for model in provider.models:
            price = pricing.table_price(model.id, provider_id=provider.id)
            for u in USAGES:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # keys the table has no unit for
                        want = calc_price(table_usage(u), model.id, provider_id=provider.id)
                except LookupError:  # an id the model's own match rules do not take
                    break
                if price is None:  # no token price: only per character, second, page
                    assert not model_has_token_price(want.model_price), (provider.id, model.id)
                    break
                got = price.cost(u)
                total = float(want.total_price)
                assert got == pytest.approx(total, rel=1e-9, abs=1e-15), (provider.id, model.id, u)
                compared[provider.id] += 1
    assert set(compared) >= MUST, MUST - set(compared)
    assert sum(compared.values()) > 8000


def model_has_token_price(mp: object) -> bool:
    return any(getattr(mp, k, None) is not None for k in ("input_mtok", "output_mtok"))


def test_a_cache_rate_the_table_leaves_out_follows_the_input_tiers() -> None:
    """gpt-5.4's table entry has no cache write price: writes are billed at the input rate,
    the long-context tier's once the prompt is over it (as genai-prices bills them)."""
    price = pricing.table_price("gpt-5.4", provider_id="openai")
    assert price is not None and price.tiers
    start, tier = price.tiers[0]
    long = Usage(start + 1, 0, cache_creation=1000)
    assert price.cost(long) == pytest.approx(
        (start + 1 - 1000) * tier.input + 1000 * tier.input, rel=1e-12
    )
    assert tier.cache_write == tier.input > price.rates.input


def test_a_per_request_fee_is_added_to_every_part() -> None:
    """A table price per thousand requests (requests_kcount) is added to each part."""
    for provider in get_snapshot().providers:
        for model in provider.models:
            mp = getattr(model.prices, "requests_kcount", None)
            if isinstance(mp, Decimal) and model_has_token_price(model.prices):
                price = pricing.table_price(model.id, provider_id=provider.id)
                assert price is not None
                assert price.per_call == pytest.approx(float(mp) / 1000)
                assert price.cost(Usage()) == price.per_call
                return
    pytest.fail("no model with a per-request fee in the table")


def test_lookup_by_cloud_kind() -> None:
    """bedrock finds aws's prices, vertex google's, azure azure's (the name upstream)."""
    cases = [
        (Provider(api="bedrock", region="us-east-1"), "anthropic.claude-3-5-haiku-20241022-v1:0",
         "aws"),
        (Provider(api="vertex", project="p", region="europe-west1"), "gemini-2.5-flash",
         "google"),
        (Provider(api="azure", base_url="https://x.openai.azure.com"), "gpt-4o-mini", "azure"),
    ]  # fmt: skip
    for provider, model, table_id in cases:
        price = pricing.from_table(provider, model)
        assert price is not None and price.source == "genai-prices", (provider.api, model)
        assert price == pricing.table_price(model, provider_id=table_id)


def test_lookup_by_base_url() -> None:
    """An OpenAI- or Anthropic-format provider is found by its base_url."""
    openai = Provider(api="openai", base_url="https://api.openai.com/v1")
    anthropic = Provider(api="anthropic", base_url="https://api.anthropic.com")
    deepseek = Provider(api="openai", base_url="https://api.deepseek.com/v1")
    for provider, model, table_id in [
        (openai, "gpt-4o-mini", "openai"),
        (anthropic, "claude-sonnet-4-5", "anthropic"),
        (deepseek, "deepseek-chat", "deepseek"),
    ]:
        found = pricing.from_table(provider, model)
        assert found is not None and found == pricing.table_price(model, provider_id=table_id)
    gpt = pricing.from_table(openai, "gpt-4o-mini")
    assert gpt is not None and gpt.describe()["input"] == 0.15  # USD per million


def test_self_hosted_and_simulated_and_unknown_are_unpriced() -> None:
    """A base_url the table does not know (a self-hosted vLLM) is unpriced even for a model
    name the table prices elsewhere (no guessing by name); so are api: sim and a model
    the provider's table does not list."""
    vllm = Provider(api="openai", base_url="http://127.0.0.1:8000/v1")
    assert pricing.from_table(vllm, "gpt-4o-mini") is None
    assert pricing.from_table(vllm, "meta-llama/Llama-3.1-8B-Instruct") is None
    assert pricing.from_table(Provider(api="sim"), "gpt-4o-mini") is None
    openai = Provider(api="openai", base_url="https://api.openai.com/v1")
    assert pricing.from_table(openai, "no-such-model-anywhere") is None


def test_policy_price_cost_is_arithmetic() -> None:
    """price: is USD per million; cache kinds default to input; cached tokens are part of
    input and billed at their own rate."""
    from gateway.policy.schema import PolicyPrice as PolicyPrice

    p = pricing.from_policy(PolicyPrice(input=2, output=10, cache_read=0.5))
    assert p.cost(Usage(1_000_000, 0)) == pytest.approx(2.0)
    assert p.cost(Usage(1000, 100, cache_read=400, cache_creation=100)) == pytest.approx(
        (500 * 2 + 400 * 0.5 + 100 * 2 + 100 * 10) / 1e6
    )
    assert p.describe() == {"input": 2.0, "output": 10.0, "cache_read": 0.5,
                            "cache_write": 2.0, "source": "policy"}  # fmt: skip


POLICY = """
providers:
  openai: {api: openai, base_url: https://api.openai.com/v1}
  vllm: {api: openai, base_url: http://127.0.0.1:8000/v1}
  sim: {api: sim}
models:
  table: {provider: openai, upstream_model: gpt-4o-mini}
  mine: {provider: openai, upstream_model: gpt-4o-mini, price: {input: 1, output: 2}}
  local: {provider: vllm, upstream_model: gpt-4o-mini}
  demo: {provider: sim}
  mixed:
    price: {input: 5, output: 6}
    deployments:
      - {provider: openai, upstream_model: gpt-4o-mini, price: {input: 7, output: 8}}
      - {provider: vllm, upstream_model: llama}
      - {provider: openai, upstream_model: gpt-4o-mini, name: plain}
"""


def test_policy_prices_over_the_table(load: Load) -> None:
    """price: on a model replaces the table's; a deployment's price: replaces its model's;
    a deployment without one takes the model's."""
    ps = load({"a.yaml": POLICY})
    table = ps.price_of("table", "openai")
    assert table is not None and table.source == "genai-prices"
    mine = ps.price_of("mine", "openai")
    assert mine is not None and mine.source == "policy"
    assert mine.describe()["input"] == 1.0 and mine.rates.output == 2 / 1e6
    assert ps.price_of("local", "vllm") is None and ps.price_of("demo", "sim") is None
    assert [ps.price_of("mixed", d.name).describe()["input"]  # type: ignore[union-attr]
            for d in ps.deployments["mixed"]] == [7.0, 5.0, 5.0]  # fmt: skip
    shown = pricing.shown(ps.prices)
    assert shown["local"] == {"vllm": {"source": "none"}}
    assert shown["table"]["openai"]["source"] == "genai-prices"
    assert shown["mixed"]["plain"]["source"] == "policy"


def test_check_warns_once_per_unpriced_model_at_its_line(load: Load) -> None:
    """check: one warning per model with an unpriced deployment, at the model's line."""
    from gateway.routing.load import check_policy_dir

    load({"a.yaml": POLICY})  # written to ./p
    _, found = check_policy_dir(Path("p"), env={})
    priced = [w for w in found if "no price" in w.message]
    assert [(w.file, w.line) for w in priced] == [("p/a.yaml", 8), ("p/a.yaml", 9)]
    assert priced[0].message.startswith("models.local: no price: neither price: nor")
    assert "counted in tokens only" in priced[0].message
    assert "models.demo" in priced[1].message
    # mixed: priced by its price: on every deployment (the vllm one takes the model's)
    assert not [w for w in priced if "mixed" in w.message]


def test_check_names_the_unpriced_deployments_of_a_model_with_several(load: Load) -> None:
    """A model with several deployments: the warning names the unpriced ones; check
    --strict fails on it."""
    from gateway.cli import main

    text = POLICY.replace("    price: {input: 5, output: 6}\n", "")
    load({"a.yaml": text})
    from gateway.routing.load import check_policy_dir

    _, found = check_policy_dir(Path("p"), env={})
    (mixed,) = [w for w in found if w.message.startswith("models.mixed")]
    assert "no price on deployment vllm:" in mixed.message
    assert main(["check", "p"]) == 0
    assert main(["check", "--strict", "p"]) == 1


def test_local_providers_do_not_read_the_table(tmp_path: Path) -> None:
    """A set whose providers are all local (an IP address, a dotless host) loads without
    importing genai-prices (its table holds 5 MB in every process): they are unpriced."""
    (tmp_path / "a.yaml").write_text(
        "providers:\n"
        "  a: {api: openai, base_url: http://127.0.0.1:8000/v1}\n"
        "  b: {api: anthropic, base_url: http://vllm:8000}\n"
        "models:\n  m: {provider: a}\n  n: {provider: b}\n"
    )
    code = (
        "import sys; from pathlib import Path; from gateway.routing.load import load_policy_dir;"
        f"ps = load_policy_dir(Path({str(tmp_path)!r}), env={{}});"
        "assert ps.price_of('m', 'a') is None and ps.price_of('n', 'b') is None;"
        "assert 'genai_prices' not in sys.modules, 'the table was read'"
    )
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True)
