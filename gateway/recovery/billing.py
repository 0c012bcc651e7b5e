"""Counting what the provider billed for one request: every part of the answer once, and
the attempts whose output the client never got as recovery (docs/recovery.md, "Tokens and
cost").

A part comes with the provider's usage, read in its format (:meth:`Format.answer_usage`);
a part that has none (a stream cut before its usage event, a provider that reports none) is
estimated from the request sent and the output received (a JSON answer's text; what a
stream relayed: :mod:`gateway.live.relay`), with the compaction estimate (``ceil(chars / 4)
+ 4 per entry``), and the request's tokens are marked ``estimated``. Each part is added to
the request's :class:`~gateway.money.bill.Bill` (:meth:`~gateway.money.bill.Bill.add`, which
also prices it); ``log`` only names the request in a ``usage_implausible`` event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.formats.usage import Usage, limit, plausible
from gateway.observe import cost
from gateway.resilience.conversation import CHARS_PER_TOKEN, estimate_tokens, text_size

if TYPE_CHECKING:
    from gateway.formats import Format
    from gateway.money.bill import Bill
    from gateway.money.pricing import Price
    from gateway.observe.request_log import RequestLog


def estimate(body: Mapping[str, Any], fmt: Format, output: int) -> Usage:
    """A part's usage estimated: the request ``body`` (in ``fmt``) and the size of what the
    part produced (``output``, in the estimate's units: :func:`text_size` of its text)."""
    return Usage(estimate_tokens(body, fmt), -(-output // CHARS_PER_TOKEN))


def checked(
    log: RequestLog, u: Usage, model: str, most: int, guess: Callable[[], Usage]
) -> tuple[Usage, bool]:
    """``u`` as it is billed, and whether a count of it is estimated: a count the provider
    cannot have meant is ``guess()``'s (:func:`gateway.formats.usage.plausible`; ``most``: the
    largest count the request could have produced, :func:`gateway.formats.usage.limit`), and said
    once per provider and model (:func:`gateway.observe.cost.usage_implausible`)."""
    billed, estimated, wrong = plausible(u, most, guess)
    if wrong:
        cost.usage_implausible(log, model, wrong)
    return billed, estimated


def bill_failed(
    bill: Bill,
    log: RequestLog,
    u: Usage | None,
    price: Price | None,
    model: str,
    most: int,
    guess: Callable[[], Usage],
) -> None:
    """Count a failed attempt whose provider reported counts before it failed (``u``: an
    Anthropic stream's ``message_start``, then a reset or an error event): recovery, as
    reported (:func:`checked`). One that reported none (a stream reset before its first
    event, a translated stream's usage with no counts yet) is not counted: nothing says
    the provider billed it."""
    if u is None or not (u.input or u.output):
        return
    u, estimated = checked(log, u, model, most, guess)
    bill.add(u, price, model, True, estimated)


def bill_answer(
    bill: Bill,
    log: RequestLog,
    fmt: Format,
    data: Mapping[str, Any],
    sent: Mapping[str, Any],
    price: Price | None,
    model: str,
    *,
    recovery: bool = False,
    window: int | None = None,
) -> None:
    """Count one JSON answer (or part) in ``fmt`` on ``bill``: its usage (:func:`checked`;
    ``window``: the model's context window), else estimated from ``sent`` (the request, in
    ``fmt``) and the answer's text."""
    block = data.get(fmt.answer_usage_key)
    if isinstance(block, dict):
        try:
            u = fmt.answer_usage(block)
        except (AttributeError, TypeError):  # a field of the wrong type: estimated
            pass
        else:
            u, estimated = checked(
                log, u, model, limit(window), lambda: estimate(sent, fmt, _output(fmt, data))
            )
            bill.add(u, price, model, recovery, estimated)
            return
    guess = estimate(sent, fmt, _output(fmt, data))
    bill.add(guess, price, model, recovery, True)


def _output(fmt: Format, data: Mapping[str, Any]) -> int:
    """The size of an answer's text, in the estimate's units (0 when it cannot be read)."""
    try:
        return text_size(fmt.answer_text(data))
    except (AttributeError, TypeError):
        return 0
