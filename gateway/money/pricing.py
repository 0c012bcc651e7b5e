"""What an attempt costs: a price per token kind, found once per policy load.

A model's price is the policy's ``price:`` (on the deployment, else on the model), else
the ``genai-prices`` package's table, looked up by the provider (its kind, or for an
OpenAI- or Anthropic-format provider its ``base_url``) and the model's name upstream.
A ``base_url`` the table does not know (a self-hosted server, a proxy) leaves the model
unpriced: the table is never searched by the model's name alone, as a model served on
one's own hardware is not billed at a public rate; one whose host is an IP address or a
name without a dot is not even looked up (a gateway whose providers are all local never
reads the table). The built-in simulated provider
(``api: sim``) is never in the table.

The table is read when policies load, never on a request: pricing a part of an answer is
:meth:`Price.cost`, a few multiplications. genai-prices' own calculation takes 0.2 ms a
call; ``tests/cost/test_pricing.py`` holds :meth:`Price.cost` to it over every model of
the table it prices.

Token counts are neutral (:class:`~gateway.formats.usage.Usage`): ``input`` counts every
prompt token, the cached ones (read or written) included, as OpenAI and genai-prices do.
A tiered price (long-context rates) applies the tier to every token of a part once its
prompt is over the tier's start, as the providers bill it; a cache rate the table does
not give is the input rate, its tiers included. A per-request fee (``requests_kcount``)
is added to every part. What the usage does not tell apart is priced as text tokens:
audio and image tokens at the input and output rates, every cache write at the table's
``cache_write_mtok`` (its 5-minute rate, not the 1-hour one). Not priced: web searches
and other tool fees, and models the table prices only by the character, the second or
the page (they are unpriced, as is a table entry with no token price).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from gateway.formats.usage import Usage
    from gateway.policy.schema import PolicyPrice, Provider

PER_MILLION = 1_000_000

#: The genai-prices provider of each cloud kind (the others are found by ``base_url``).
_CLOUD_PROVIDER = {"bedrock": "aws", "vertex": "google", "azure": "azure", "gemini": "google"}


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price on one deployment; ``tiers``: (prompt tokens over which, rates);
    ``per_call``: USD added to every part (a provider's per-request fee)."""

    rates: Rates
    tiers: tuple[tuple[int, Rates], ...] = ()
    source: str = "policy"  # or "genai-prices"
    per_call: float = 0.0

    def cost(self, u: Usage) -> float:
        """USD for one part of an answer (or one recovery call)."""
        r = self.rates
        if self.tiers:
            for start, tier in reversed(self.tiers):
                if u.input > start:
                    r = tier
                    break
        uncached = u.input - u.cache_read - u.cache_creation
        if uncached < 0:
            uncached = 0
        return (
            uncached * r.input
            + u.cache_read * r.cache_read
            + u.cache_creation * r.cache_write
            + u.output * r.output
            + self.per_call
        )

    def describe(self) -> dict[str, Any]:
        """USD per million tokens (the base rates: tiers are not shown), as ``/admin``
        shows it, and where the price comes from."""
        r = self.rates
        shown: dict[str, Any] = {
            "input": round(r.input * PER_MILLION, 6),
            "output": round(r.output * PER_MILLION, 6),
            "cache_read": round(r.cache_read * PER_MILLION, 6),
            "cache_write": round(r.cache_write * PER_MILLION, 6),
        }
        if self.tiers:
            shown["tiers_over_prompt_tokens"] = [start for start, _ in self.tiers]
        if self.per_call:
            shown["per_call"] = self.per_call
        shown["source"] = self.source
        return shown


def from_policy(p: PolicyPrice) -> Price:
    """A policy's ``price:`` (USD per million tokens; cache kinds default to ``input``)."""
    read = p.input if p.cache_read is None else p.cache_read
    write = p.input if p.cache_write is None else p.cache_write
    return Price(Rates(*(v / PER_MILLION for v in (p.input, p.output, read, write))))


def from_table(provider: Provider, upstream_model: str) -> Price | None:
    """genai-prices' price of ``upstream_model`` on ``provider``, or None (not in the table,
    a ``base_url`` the table does not know, or the built-in simulated provider)."""
    if provider.api == "sim":
        return None
    if provider.api in _CLOUD_PROVIDER:
        return table_price(upstream_model, provider_id=_CLOUD_PROVIDER[provider.api])
    if not provider.base_url or _private_host(provider.base_url):
        return None  # never found by the model's name alone; a local server is in no table
    return table_price(upstream_model, provider_api_url=provider.base_url)


def _private_host(url: str) -> bool:
    """Whether ``url``'s host is an IP address or a name without a dot (``localhost``, a
    cluster service): no provider of the table is reached there, so the table (5 MB once
    read) is not read for it."""
    host = urlsplit(url).hostname or ""
    if "." not in host:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def table_price(
    upstream_model: str, *, provider_id: str | None = None, provider_api_url: str | None = None
) -> Price | None:
    """genai-prices' price of ``upstream_model`` at the provider ``provider_id`` (the
    table's id) or the one whose API is at ``provider_api_url``, or None. Each is looked up
    once per process (0.2-0.8 ms a lookup): a reload, a worker's own load and the keys of
    one provider find it again at no cost."""
    try:
        from genai_prices import Usage as TableUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - a core dependency
        return None
    one = TableUsage(input_tokens=1, output_tokens=1)
    try:
        if provider_id is not None:
            found = calc_price(one, upstream_model, provider_id=provider_id)
        else:
            found = calc_price(one, upstream_model, provider_api_url=provider_api_url)
    except LookupError:
        return None
    return _from_model_price(found.model_price)


#: One genai-prices price field: (base, [(tier start, price)]), USD per million (or thousand).
_Field = tuple[Decimal, list[tuple[int, Decimal]]]


def _rate(value: Any, fallback: _Field) -> _Field:
    """One genai-prices price field, ``fallback`` when the table gives none."""
    if value is None:
        return fallback
    if isinstance(value, Decimal):
        return value, []
    return value.base, [(int(t.start), t.price) for t in value.tiers]


def _from_model_price(mp: Any) -> Price | None:
    inp = getattr(mp, "input_mtok", None)
    out = getattr(mp, "output_mtok", None)
    if inp is None and out is None:
        return None
    zero: _Field = (Decimal(0), [])
    in_rate = _rate(inp, zero)
    fields = [
        in_rate,
        _rate(out, zero),
        _rate(getattr(mp, "cache_read_mtok", None), in_rate),
        _rate(getattr(mp, "cache_write_mtok", None), in_rate),
    ]
    starts = sorted({s for _, tiers in fields for s, _ in tiers})

    def at(start: int | None) -> Rates:
        values = []
        for base, tiers in fields:
            price = base
            for s, p in tiers:
                if start is not None and s <= start:
                    price = p
            values.append(float(price) / PER_MILLION)
        return Rates(*values)

    per_call, _ = _rate(getattr(mp, "requests_kcount", None), zero)
    return Price(
        at(None), tuple((s, at(s)) for s in starts), "genai-prices", float(per_call) / 1000
    )


def shown(prices: Mapping[tuple[str, str], Price | None]) -> dict[str, dict[str, Any]]:
    """Per model, per deployment, its price as ``GET /admin/policies`` shows it
    (:meth:`Price.describe`; ``{"source": "none"}``: not priced)."""
    found: dict[str, dict[str, Any]] = {}
    for (model, deployment), price in prices.items():
        found.setdefault(model, {})[deployment] = (
            {"source": "none"} if price is None else price.describe()
        )
    return found


def prices_of(
    models: dict[str, Any], deployments: dict[str, Any], providers: dict[str, Any]
) -> dict[tuple[str, str], Price | None]:
    """Every (model, deployment name) of a policy set and its price (None: unpriced)."""
    return dict(_prices(models, deployments, providers))


def _prices(
    models: dict[str, Any], deployments: dict[str, Any], providers: dict[str, Any]
) -> Iterator[tuple[tuple[str, str], Price | None]]:
    for name, model in models.items():
        given = {d.name or d.provider: d.price for d in model.deployments}
        for d in deployments.get(name, ()):
            base = d.name.split("#", 1)[0]
            policy_price = given.get(base) or model.price
            if policy_price is not None:
                yield (name, d.name), from_policy(policy_price)
                continue
            provider = providers.get(d.provider)
            yield (
                (name, d.name),
                None if provider is None else from_table(provider, d.upstream_model),
            )
