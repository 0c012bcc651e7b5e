"""Per-request log events of a relayed stream carry what every per-request event carries."""

from __future__ import annotations

from structlog.testing import capture_logs

from gateway.testing import FakeProvider, MalformedEventAt
from tests.harness import Harness


async def test_a_dropped_event_is_logged_with_the_team_and_request(
    gw: Harness, fake: FakeProvider
) -> None:
    """An undecodable event mid-stream: the stream_event_dropped line names the team, the
    request and the model, like the request's other events."""
    fake.push(MalformedEventAt(2))
    with capture_logs() as events:
        stream = await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.startswith("Hello! This is the fake provider")
    (dropped,) = [e for e in events if e["event"] == "stream_event_dropped"]
    (done,) = [e for e in events if e["event"] == "request_completed"]
    assert dropped["team"] == "team-a"
    assert dropped["request_id"] == done["request_id"]
    assert dropped["model"] == "gpt-test"
