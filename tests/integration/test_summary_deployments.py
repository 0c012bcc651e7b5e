"""The ``summarize`` step's call on a model with several deployments, over real sockets: it
goes through deployment choice like any attempt (docs/compaction.md, ``summarize``).

The summary model is ``gpt-dep``, served by two keys of one provider (``keys#1`` with
``key-a``, ``keys#2`` with ``key-b``, ``balance: ordered``); the request is on
``gpt-backup``, whose window the fake provider makes too small for the transcript.
"""

from __future__ import annotations

import openai
import pytest
from structlog.testing import capture_logs

from gateway.testing import FakeProvider
from tests.integration.test_deployments import REVOKED, Make, ask, keys_used, make, up
from tests.integration.test_prompt_and_output import agent_transcript

__all__ = ["make"]  # the fixture, shared with test_deployments

SUMMARY = "Read f0.py to f4.py; f3.py sleeps on the real clock. Open: inject the clock."
POLICY = {
    "compaction": {"strategies": ["summarize"], "summarize_model": "gpt-dep", "keep_recent": 2}
}


def summary_keys(fake: FakeProvider) -> list[str]:
    return [r.key or "" for r in fake.requests if r.model == "gpt-dep"]


async def test_a_summary_skips_a_deployment_that_is_out(make: Make, fake: FakeProvider) -> None:
    """Key A was taken out for an hour on a 401: the summary goes to key B, and the client
    gets its answer, not "prompt too long"."""
    gw = await make({"provider": "keys", "balance": "ordered"}, POLICY)
    fake.script("gpt-dep", [REVOKED, REVOKED], key="key-a")  # revoked: it stays so
    await ask(gw)  # key A answers 401 and is taken out; key B answers
    assert keys_used(fake) == ["key-a", "key-b"]
    assert up(gw, "keys#1") == {"keys#1": 0}
    fake.requests.clear()
    fake.context_window["gpt-backup"] = 3000
    fake.reply["gpt-dep"] = SUMMARY
    with capture_logs() as events:
        raw = await gw.async_openai().chat.completions.with_raw_response.create(
            model="gpt-backup", messages=agent_transcript()
        )
    assert raw.parse().choices[0].message.content
    assert summary_keys(fake) == ["key-b"]
    assert raw.headers["x-gateway-recovery"] == "compaction"
    assert fake.requests[-1].body["messages"][2]["content"].endswith(SUMMARY)
    step = [(e["outcome"], e.get("summary_model")) for e in events
            if e["event"] == "prompt_too_long_recovery"]  # fmt: skip
    assert step == [("applied", "gpt-dep")]


async def test_a_summary_refused_by_one_key_is_retried_on_the_other(
    make: Make, fake: FakeProvider
) -> None:
    """The summary call meets the revoked key first: key A is taken out (as an attempt
    would take it out), the retry goes to key B, and later attempts avoid key A."""
    gw = await make({"provider": "keys", "balance": "ordered"}, POLICY)
    fake.script("gpt-dep", [REVOKED], key="key-a")
    fake.context_window["gpt-backup"] = 3000
    fake.reply["gpt-dep"] = SUMMARY
    with capture_logs() as events:
        raw = await gw.async_openai().chat.completions.with_raw_response.create(
            model="gpt-backup", messages=agent_transcript()
        )
    assert raw.parse().choices[0].message.content
    assert summary_keys(fake) == ["key-a", "key-b"]
    assert raw.headers["x-gateway-attempts"] == "2"  # the summary calls are not attempts
    ejected = [(e["deployment"], e["reason"]) for e in events if e["event"] == "deployment_ejected"]
    assert ejected == [("keys#1", "auth")]
    assert up(gw, "keys#1", "keys#2") == {"keys#1": 0, "keys#2": 1}
    fake.requests.clear()
    await ask(gw)
    assert keys_used(fake) == ["key-b"]


async def test_a_summary_with_every_deployment_out_fails_the_step(
    make: Make, fake: FakeProvider
) -> None:
    """Both keys out: no summary call is made, the step fails with ``no_deployment``, and
    the next strategy makes the prompt fit."""
    policy = {"compaction": {**POLICY["compaction"], "strategies": ["summarize", "drop_middle"]}}
    gw = await make({"provider": "keys", "balance": "ordered"}, policy)
    fake.script("gpt-dep", [REVOKED], key="key-a")
    fake.script("gpt-dep", [REVOKED], key="key-b")
    with pytest.raises(openai.APIStatusError):  # both keys refuse
        await ask(gw)
    assert up(gw, "keys#1", "keys#2") == {"keys#1": 0, "keys#2": 0}
    fake.requests.clear()
    fake.context_window["gpt-backup"] = 3000
    with capture_logs() as events:
        c = await gw.async_openai().chat.completions.create(
            model="gpt-backup", messages=agent_transcript()
        )
    assert c.choices[0].message.content
    assert summary_keys(fake) == []
    failed = [e for e in events if e["event"] == "prompt_too_long_recovery"]
    assert [(e["strategy"], e["outcome"]) for e in failed] == [
        ("summarize", "failed"), ("drop_middle", "applied")
    ]  # fmt: skip
    assert failed[0]["error"] == "no_deployment"
