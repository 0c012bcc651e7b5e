"""The built-in simulated provider (``api: sim``) behind ``llm-gateway serve --demo``.

It is the scripted fake provider of :mod:`gateway.testing`, served on a loopback
port inside the gateway process, so a new user sees real recovery with no network
and no key. Each model fails on a fixed script, counted per gateway request (the
gateway passes its ``x-request-id`` upstream):

============== ===================================================================
sim-ok         always answers
sim-flaky      429 with ``Retry-After: 1`` on the first attempt, then answers
sim-down       always 500 (its demo route falls back to sim-ok)
sim-overloaded "overloaded" (529 on /v1/messages, 503 otherwise) twice, then answers
sim-claude     always "overloaded" (its demo route falls back to sim-gpt, of the other
               format: the bundled policies serve it from a ``speaks: anthropic`` sim)
sim-long       every answer is cut at 24 tokens (finish_reason ``length``)
sim-small      a 2048-token context window: longer prompts get prompt-too-long
any other      answers like sim-ok
============== ===================================================================
"""

from __future__ import annotations

from collections import OrderedDict

from gateway.testing.fake_provider import FakeProvider
from gateway.testing.script import Error, Step

_LONG_REPLY = (
    "Retries, fallbacks and continuations are what a gateway is for: this answer is long "
    "enough that sim-long cuts it at the token limit several times, and llm-gateway asks "
    "the model to continue until the whole text is there, joined into one answer."
)
_MEMORY = 10_000  # request ids remembered for per-request attempt counts


class SimProvider(FakeProvider):
    def __init__(self) -> None:
        super().__init__(models=("sim-ok",))
        self.reply["sim-long"] = _LONG_REPLY
        self.cut_at["sim-long"] = 24
        self.context_window["sim-small"] = 2048
        self._attempts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def _next_steps(self, model: str | None) -> list[Step]:
        record = self.requests[-1]
        self.requests.clear()  # a long-running demo keeps no history
        key = (record.headers.get("x-request-id", ""), model or "")
        n = self._attempts.pop(key, 0) + 1
        self._attempts[key] = n
        if len(self._attempts) > _MEMORY:
            self._attempts.popitem(last=False)
        anthropic = record.path.startswith("/v1/messages")
        if model == "sim-flaky" and n == 1:
            return [Error.openai_rate_limit(retry_after=1)]
        if model == "sim-down":
            return [Error.anthropic_server(500) if anthropic else Error.openai_server(500)]
        if model == "sim-claude":
            return [Error.anthropic_overloaded() if anthropic else Error.overloaded_503()]
        if model == "sim-overloaded" and n <= 2:
            return [Error.anthropic_overloaded() if anthropic else Error.overloaded_503()]
        return []
