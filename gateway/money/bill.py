"""What one request was billed (:class:`Bill`): the tokens of its answer and of its
recovery, and what they cost.

Billing (:mod:`gateway.recovery.billing`) adds each billed part to the request's bill. The
request's handler charges the team's budget and its ``tokens_per_minute`` from it once the
request is over, and the access log, the metrics, the trace and ``x-gateway-cost-usd``
report it. Nothing decides from the access-log record: the handler keeps the bill it made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.formats.usage import Usage
    from gateway.money.pricing import Price


class Bill:
    """The tokens and USD of one request's billed parts: the answer's, and the
    recovery's (attempts whose output the client never got: a failed stream the provider
    had counted, a compaction's summary). ``cache_read`` and ``cache_write`` count, over
    every part, the prompt tokens the provider read from its prompt cache and wrote to it
    (they are part of the prompt tokens, and priced at their own rates).

    A plain class whose counts start as class attributes: made on every request, it runs
    no ``__init__``; a part billed writes the instance's own."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    recovery_prompt_tokens: int = 0
    recovery_completion_tokens: int = 0
    cache_read: int = 0  # of every part's prompt tokens, those read from the prompt cache
    cache_write: int = 0  # and those written to it
    cost_usd: float = 0.0  # of the answer's priced parts
    recovery_cost_usd: float = 0.0
    unpriced: str | None = None  # a model billed with no price: the costs leave it out
    estimated: bool = False  # a part's tokens were estimated (no usage from the provider)

    def add(
        self, u: Usage, price: Price | None, model: str, recovery: bool, estimated: bool
    ) -> None:
        """Count one billed part of ``model``: a part of the answer, or (``recovery``) an
        attempt whose output the client never got; priced by ``price`` (None: tokens only,
        and the model is named :attr:`unpriced`). Called by position (keywords would build a
        dict of them)."""
        if recovery:
            self.recovery_prompt_tokens += u.input
            self.recovery_completion_tokens += u.output
        else:
            self.prompt_tokens += u.input
            self.completion_tokens += u.output
        if u.cache_read:
            self.cache_read += u.cache_read
        if u.cache_creation:
            self.cache_write += u.cache_creation
        if estimated:
            self.estimated = True
        if price is None:
            self.unpriced = model
        elif recovery:
            self.recovery_cost_usd += price.cost(u)
        else:
            self.cost_usd += price.cost(u)

    def cost(self) -> float:
        """USD of every priced part, the recovery's included."""
        return self.cost_usd + self.recovery_cost_usd

    def tokens(self) -> int:
        """Every token billed, prompt and output, the recovery's included."""
        return (
            self.prompt_tokens
            + self.completion_tokens
            + self.recovery_prompt_tokens
            + self.recovery_completion_tokens
        )


#: The bill of a request that billed nothing (answered before any attempt: a refusal, a
#: model list): read by the access log, never added to.
NO_BILL = Bill()
