"""Assertions shared by the client tests: what the gateway and the fake saw."""

from __future__ import annotations

from tests.clients.scenario import CommandResult, GatewayRequest, Outcome

REPLY = "Hello! This is the fake provider answering model {model}."


def show(outcome: Outcome) -> str:
    """Everything needed to understand a failure, for assertion messages."""
    lines = []
    for c in outcome.commands:
        lines.append(f"$ {' '.join(c.argv)}  -> rc={c.returncode} ({c.seconds:.1f}s)")
        lines.append(f"stdout: {c.stdout[-3000:]}")
        lines.append(f"stderr: {c.stderr[-3000:]}")
    lines.append("gateway saw:")
    lines += [f"  {r.method} {r.path}?{r.query} -> {r.status}" for r in outcome.gateway_requests]
    lines.append("fake saw:")
    lines += [f"  {r['method']} {r['path']} model={r['model']}" for r in outcome.fake_requests]
    return "\n".join(lines)


def only(outcome: Outcome) -> CommandResult:
    assert len(outcome.commands) == 1
    return outcome.commands[0]


def gateway_posts(outcome: Outcome, path: str) -> list[GatewayRequest]:
    return [r for r in outcome.gateway_requests if r.method == "POST" and r.path == path]


def fake_posts(outcome: Outcome, model: str | None = None) -> list[dict]:
    return [
        r
        for r in outcome.fake_requests
        if r["method"] == "POST" and (model is None or r["model"] == model)
    ]


def assert_absorbed(outcome: Outcome, path: str, model: str, upstream_attempts: int = 2) -> None:
    """The client made ONE request; the gateway made ``upstream_attempts`` upstream."""
    posts = gateway_posts(outcome, path)
    assert len(posts) == 1, show(outcome)
    assert posts[0].status == 200, show(outcome)
    assert posts[0].headers.get("x-gateway-attempts") == str(upstream_attempts), show(outcome)
    assert "retry" in posts[0].headers.get("x-gateway-recovery", ""), show(outcome)
    assert len(fake_posts(outcome, model)) == upstream_attempts, show(outcome)
    completed = sum(
        float(line.rsplit(" ", 1)[1])
        for line in outcome.metrics.splitlines()
        if line.startswith("llm_gateway_requests_total{")
    )
    assert completed == 1, outcome.metrics
