"""The observability hot path (gateway/observe): the access log's fast JSON line and the
per-request metrics counted in plain Python and exposed by custom collectors say exactly
what structlog's chain and plain Prometheus calls said, with one process and with workers,
and redaction, level filtering, capture_logs and the console format still work."""

from __future__ import annotations

import io
import math
import os
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from structlog.testing import capture_logs

from gateway.money.bill import Bill
from gateway.observe import logs
from gateway.observe.counts import LATENCY_BUCKETS
from gateway.observe.events import Events, _micro
from gateway.observe.metrics import Metrics, P
from gateway.observe.request_log import RequestLog
from tests.log_sink import Sink

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def request(**kw: Any) -> RequestLog:
    base: dict[str, Any] = {
        "request_id": "req-0123456789abcdef",
        "started": 10.0,
        "team": "team-a",
        "route": "/v1/chat/completions",
        "model": "gpt-test",
        "answered_by": "gpt-test",
        "provider": "fake",
        "status": 200,
        "attempts": 1,
        "ttfb": 0.0123456789,
        "prompt_tokens": 12,
        "completion_tokens": 34,
    }
    fields = {**base, **kw}
    bill = Bill()
    for name in BILLED:
        if name in fields:
            setattr(bill, name, fields.pop(name))
    return RequestLog(**fields, bill=bill)


#: What a request was billed: its Bill's, which the record points at.
BILLED = ("prompt_tokens", "completion_tokens", "recovery_prompt_tokens",
          "recovery_completion_tokens", "cost_usd", "recovery_cost_usd", "unpriced", "estimated")  # fmt: skip


VARIANTS = [
    request(),
    request(ttfb=None, prompt_tokens=0, completion_tokens=0, status=502, error="upstream_error"),
    request(recovery=("retry", "fallback"), answered_by="gpt-backup", attempts=3),
    request(answered_by="", status=499, request_id='quote" back\\ slash \u00e9 \u4e2d \n'),
    request(started=10.0 - 1e-9, ttfb=-0.0),
    request(started=9.0000005, ttfb=601.25),
    request(estimated=True),  # a part's tokens estimated: said in "tokens"
    request(deployment="bedrock-us", session="a3506b466203"),  # a session kept on one
    # costs: rounded to 1e-8 USD; recovery tokens only when not 0; null when nothing priced
    request(cost_usd=0.000123456789, recovery_cost_usd=1.5e-7, recovery_prompt_tokens=5),
    request(cost_usd=1234.5, recovery_completion_tokens=3, estimated=True),
    request(unpriced="gpt-test"),
    request(unpriced="gpt-x", cost_usd=2e-9, recovery_cost_usd=0.1),
]


def completed(lines: list[bytes]) -> list[bytes]:
    """The ``request_completed`` lines of ``lines`` (not ``price_unknown``)."""
    return [line for line in lines if b'"event":"request_completed"' in line]


def chain_lines(log_sink: Sink, reqs: list[RequestLog], now: float) -> list[bytes]:
    """What structlog's chain writes for ``reqs``: the fast path switched off."""
    fast, logs.fast_json = logs.fast_json, None
    try:
        before = len(log_sink.raw())
        ev = Events(Metrics())
        for r in reqs:
            ev.request_completed(r, now)
        return completed(log_sink.raw()[before:])
    finally:
        logs.fast_json = fast


def _without_timestamp(line: bytes) -> bytes:
    head, sep, stamp = line.rpartition(b',"timestamp":"')
    assert sep and TIMESTAMP.match(stamp.decode().removesuffix('"}\n')), line
    return head


def test_fast_line_is_the_chain_line(log_sink: Sink) -> None:
    """Byte for byte (but the timestamp) what structlog's chain rendered, same file."""
    log_sink.configure("info", "json")
    assert logs.fast_json is not None and logs.fast_json.current()
    ev = Events(Metrics())
    for r in VARIANTS:
        ev.request_completed(r, 10.25)
    fast = completed(log_sink.raw())
    chain = chain_lines(log_sink, VARIANTS, 10.25)
    assert len(fast) == len(chain) == len(VARIANTS)
    for f, c in zip(fast, chain, strict=True):
        assert f.endswith(b"\n")
        assert _without_timestamp(f) == _without_timestamp(c)
    first = orjson.loads(fast[0])
    assert list(first) == [
        "request_id", "team", "path", "route", "model", "requested_model", "status", "attempts",
        "deployment", "session", "recovery", "duration_s", "ttfb_s", "tokens", "cost_usd", "recovery_cost_usd", "error",
        "event", "level", "timestamp",
    ]  # fmt: skip
    assert first["event"] == "request_completed" and first["level"] == "info"
    assert first["duration_s"] == 0.25 and first["ttfb_s"] == 0.012346
    assert first["tokens"] == {"prompt": 12, "completion": 34}
    assert first["cost_usd"] == 0.0 and first["recovery_cost_usd"] == 0.0
    assert "logger" not in first
    costs = [orjson.loads(line) for line in fast[-4:]]
    assert list(costs[0])[13:17] == ["tokens", "cost_usd", "recovery_cost_usd", "recovery_tokens"]
    assert (costs[0]["cost_usd"], costs[0]["recovery_cost_usd"]) == (0.00012346, 1.5e-7)
    assert costs[0]["recovery_tokens"] == {"prompt": 5, "completion": 0}
    assert (costs[1]["cost_usd"], costs[1]["recovery_tokens"]["completion"]) == (1234.5, 3)
    assert costs[2]["cost_usd"] is None and "recovery_tokens" not in costs[2]
    assert (costs[3]["cost_usd"], costs[3]["recovery_cost_usd"]) == (0.0, 0.1)  # some priced


def test_request_completed_fields_are_not_secret_names(log_sink: Sink) -> None:
    """The fast path skips redact(): none of its field names may be a secret-bearing one."""
    log_sink.configure("info", "json")
    Events(Metrics()).request_completed(request(recovery=("retry",), error="x"), 11.0)
    (line,) = log_sink.lines()
    assert not [name for name in line if logs.secret_field(name)]
    # redact() looks at top-level names only; the nested token counts are plain numbers
    assert all(isinstance(v, int) for v in line["tokens"].values())


def test_other_events_are_still_redacted(log_sink: Sink) -> None:
    """Defence in depth stays for every event through the chain."""
    log_sink.configure("info", "json")
    ev = Events(Metrics())
    ev.prompt_too_long_recovery(request(), "gpt-test", "drop_oldest", "ok", prompt="SEKRIT-1")
    structlog.get_logger("gateway").info(
        "anything", authorization="Bearer SEKRIT-2", api_key="SEKRIT-3", body="SEKRIT-4"
    )
    text = log_sink.path.read_text()
    assert "SEKRIT" not in text
    first, second = log_sink.lines()
    assert first["event"] == "prompt_too_long_recovery" and first["prompt"] == "[redacted]"
    assert second["authorization"] == second["api_key"] == second["body"] == "[redacted]"
    assert TIMESTAMP.match(second["timestamp"]) and second["level"] == "info"


SECRET_NAMES = [
    "authorization", "Proxy-Authorization", "api_key", "x-api-key", "X-Api-Key", "api-key",
    "x-goog-api-key", "token", "access_token", "session_token", "x-amz-security-token",
    "refresh_token", "secret", "client_secret", "secret_access_key", "private_key",
    "password", "redis_password", "signature", "x-amz-signature", "cookie", "set-cookie",
    "credentials", "prompt", "messages", "body",
]  # fmt: skip
#: Fields that name or count things: their values are not secrets.
PLAIN_NAMES = ["key", "team", "tokens", "prompt_tokens", "max_tokens", "keys", "period",
               "reason", "field", "token_count", "budget"]  # fmt: skip


def test_secrets_are_redacted_by_their_names_and_a_redis_key_is_not(log_sink: Sink) -> None:
    """Redaction hides the fields whose names say they hold a secret (keys, tokens,
    signatures, passwords, credentials, cookies) or client text, not every field named
    ``key``: a Redis key's name (``state_value_ignored``) is readable."""
    log_sink.configure("info", "json")
    secrets = {name: f"SEKRIT-{i}" for i, name in enumerate(SECRET_NAMES)}
    plain = {name: f"plain-{i}" for i, name in enumerate(PLAIN_NAMES)}
    plain["key"] = "llm-gateway:limit:team-a:tok:29944123"
    structlog.get_logger("gateway").warning("anything", **secrets, **plain)
    (line,) = log_sink.lines()
    assert "SEKRIT" not in log_sink.path.read_text()
    assert {name: line[name] for name in secrets} == dict.fromkeys(secrets, "[redacted]")
    assert {name: line[name] for name in plain} == plain


def test_warning_level_drops_the_access_line_but_counts(log_sink: Sink) -> None:
    log_sink.configure("warning", "json")
    m = Metrics()
    Events(m).request_completed(request(), 10.5)
    structlog.get_logger("gateway").warning("still_here", n=1)
    assert [line["event"] for line in log_sink.lines()] == ["still_here"]
    labels = {"team": "team-a", "model": "gpt-test", "status": "200"}
    assert m.registry.get_sample_value(P + "requests_total", labels) == 1


def test_capture_logs_still_captures_request_completed(log_sink: Sink) -> None:
    log_sink.configure("info", "json")
    with capture_logs() as captured:
        Events(Metrics()).request_completed(request(), 10.5)
    assert log_sink.raw() == []
    (entry,) = captured
    assert entry["event"] == "request_completed" and entry["log_level"] == "info"
    assert entry["duration_s"] == 0.5 and entry["team"] == "team-a"
    assert "timestamp" not in entry
    # the chain is back in force afterwards
    assert logs.fast_json is not None and logs.fast_json.current()


def test_another_configure_takes_over(log_sink: Sink) -> None:
    """``gateway simulate`` drops every event with its own structlog.configure."""
    log_sink.configure("info", "json")

    def drop(*_: Any) -> Any:
        raise structlog.DropEvent

    structlog.configure(processors=[drop], logger_factory=structlog.ReturnLoggerFactory())
    Events(Metrics()).request_completed(request(), 10.5)
    assert log_sink.raw() == []


def test_console_format_goes_through_structlog(
    log_sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("info", "console")
    structlog.configure(cache_logger_on_first_use=False)
    assert logs.fast_json is None
    Events(Metrics()).request_completed(request(), 10.5)
    out = capsys.readouterr().out
    assert "request_completed" in out and "team=team-a" in out and "duration_s=0.5" in out


def test_unencodable_value_falls_back_to_the_chain(log_sink: Sink) -> None:
    """A value orjson cannot encode alone goes through the chain's fallback, once."""
    log_sink.configure("info", "json")

    class Odd:
        def __repr__(self) -> str:
            return "<odd>"

    Events(Metrics()).request_completed(request(error=Odd()), 10.5)
    (line,) = log_sink.lines()
    assert line["event"] == "request_completed" and line["error"] == "<odd>"


def test_timestamps_are_utc_iso_micros(log_sink: Sink) -> None:
    stamp = logs._Timestamp()
    values = [stamp.now() for _ in range(1000)]
    assert all(TIMESTAMP.match(v) for v in values)
    assert values == sorted(values)


def test_json_lines_writes_whole_lines_to_the_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What was buffered goes first; a write cut short by a signal is completed."""
    with (tmp_path / "out").open("wb") as f:
        f.write(b"buffered before\n")
        out = logs.JsonLines(f)
        real_write = os.write
        monkeypatch.setattr(logs.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
        out.write(b'{"event":"one","n":1}\n')
        out.msg(b'{"event":"two"}')
    assert (tmp_path / "out").read_bytes() == (
        b'buffered before\n{"event":"one","n":1}\n{"event":"two"}\n'
    )


def test_json_lines_without_a_descriptor() -> None:
    buf = io.BytesIO()
    out = logs.JsonLines(buf)
    assert out.fd is None
    out.info(b'{"event":"x"}')
    assert buf.getvalue() == b'{"event":"x"}\n'


# ---- metrics -------------------------------------------------------------------------


class Reference:
    """The per-request series fed the way events.py fed them before: public Prometheus calls
    on plain ``Counter`` / ``Histogram`` objects, with the help texts they had."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            P + "requests_total", "Requests answered", ["team", "model", "status"], registry=r
        )
        buckets = LATENCY_BUCKETS
        self.duration = Histogram(
            P + "request_duration_seconds",
            "Time from request to the last byte of the answer",
            ["team", "model"],
            buckets=buckets,
            registry=r,
        )
        self.ttfb = Histogram(
            P + "time_to_first_byte_seconds",
            "Time from request to the first byte sent to the client",
            ["team", "model"],
            buckets=buckets,
            registry=r,
        )
        self.attempts = Counter(
            P + "upstream_attempts_total",
            "Upstream attempts by outcome category (ok for success)",
            ["provider", "model", "category"],
            registry=r,
        )
        self.tokens = Counter(
            P + "tokens_total",
            "Tokens reported by upstream usage",
            ["team", "model", "kind"],
            registry=r,
        )
        self.cost = Counter(
            P + "cost_usd_total",
            "What answers (kind answer) and recovery attempts (kind recovery) cost, USD",
            ["team", "model", "kind"],
            registry=r,
        )

    def request_completed(self, r: RequestLog, now: float) -> None:
        model = r.answered_by or r.model
        self.requests.labels(r.team, model, str(r.status)).inc()
        self.duration.labels(r.team, model).observe(now - r.started)
        if r.ttfb is not None:
            self.ttfb.labels(r.team, model).observe(r.ttfb)
        b = r.bill
        if b.prompt_tokens:
            self.tokens.labels(r.team, model, "prompt").inc(b.prompt_tokens)
        if b.completion_tokens:
            self.tokens.labels(r.team, model, "completion").inc(b.completion_tokens)
        if b.cost_usd > 0:
            self.cost.labels(r.team, model, "answer").inc(b.cost_usd)
        if b.recovery_cost_usd > 0:
            self.cost.labels(r.team, model, "recovery").inc(b.recovery_cost_usd)


NAMES = {
    P + "requests_total",
    P + "request_duration_seconds",
    P + "time_to_first_byte_seconds",
    P + "upstream_attempts_total",
    P + "tokens_total",
    P + "cost_usd_total",
}


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for metric in registry.collect()
        if metric.name in NAMES or metric.name + "_total" in NAMES
        for s in metric.samples
        if not s.name.endswith("_created")
    }


def assert_same(got: CollectorRegistry, want: CollectorRegistry) -> None:
    g, w = samples(got), samples(want)
    assert g.keys() == w.keys()
    for key, value in w.items():
        assert g[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_collected_metrics_equal_direct_prometheus_calls() -> None:
    """Same series, same values (bucket edges, zero, negative, inf), at every scrape."""
    rng = random.Random(11)
    m, ref = Metrics(), Reference()
    ev = Events(m)
    edges = [float(b) for b in LATENCY_BUCKETS]
    specials = [*edges, 0.0, -0.5, math.inf, 1e-9, 601.0]
    for round_ in range(4):
        for i in range(300):
            started = 100.0
            now = started + (rng.choice(specials) if i % 7 == 0 else rng.expovariate(2.0))
            r = request(
                started=started,
                team=rng.choice(["team-a", "team-b"]),
                answered_by=rng.choice(["gpt-test", "gpt-backup", ""]),
                status=rng.choice([200, 200, 429, 502]),
                ttfb=rng.choice([None, rng.choice(specials), rng.random()]),
                prompt_tokens=rng.choice([0, rng.randrange(1, 500)]),
                completion_tokens=rng.choice([0, rng.randrange(1, 500)]),
                cost_usd=rng.choice([0.0, rng.random() / 1000]),
                recovery_cost_usd=rng.choice([0.0, 0.0, 1e-9, rng.random()]),
            )
            ev.request_completed(r, now)
            ref.request_completed(r, now)
            provider, category = rng.choice(["fake", "other"]), rng.choice(["ok", "rate_limit"])
            ev.upstream_attempt(provider, "gpt-test", category)
            ref.attempts.labels(provider, "gpt-test", category).inc()
        assert_same(m.registry, ref.registry)
        assert_same(m.registry, ref.registry)  # collecting twice adds nothing
        if round_ == 1:
            body, _ = m.render()
            assert b"llm_gateway_requests_total{" in body


def test_counts_are_visible_to_every_reader() -> None:
    """get_sample_value, render() and a metric's own collect() all see pending counts."""
    m = Metrics()
    ev = Events(m)
    ev.request_completed(request(), 10.3)
    ev.upstream_attempt("fake", "gpt-test", "ok")
    labels = {"team": "team-a", "model": "gpt-test"}
    assert m.registry.get_sample_value(P + "request_duration_seconds_count", labels) == 1
    ev.request_completed(request(), 10.3)
    assert (
        b'llm_gateway_request_duration_seconds_count{model="gpt-test",team="team-a"} 2.0'
        in (m.render()[0])
    )
    ev.upstream_attempt("fake", "gpt-test", "ok")
    (metric,) = m.upstream_attempts.collect()
    totals = [s.value for s in metric.samples if s.name.endswith("_total")]
    assert totals == [2.0]


def test_series_appear_as_before() -> None:
    """No ttfb, no tokens: no such series (as when the children were made per request)."""
    m = Metrics()
    Events(m).request_completed(request(ttfb=None, prompt_tokens=0, completion_tokens=0), 10.1)
    names = {name for name, _ in samples(m.registry)}
    assert P + "requests_total" in names and P + "request_duration_seconds_count" in names
    assert not any(n.startswith((P + "time_to_first_byte", P + "tokens")) for n in names)


def test_negative_tokens_raise_as_before() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Events(Metrics()).request_completed(request(prompt_tokens=-1), 10.1)


def feed(ev: Events, ref: Reference, n: int, seed: int = 5) -> None:
    """The same requests and upstream attempts to ``ev`` and ``ref``."""
    rng = random.Random(seed)
    for _ in range(n):
        r = request(
            team=rng.choice(["team-a", "team-b"]),
            status=rng.choice([200, 429]),
            ttfb=rng.choice([None, rng.random()]),
            prompt_tokens=rng.choice([0, 7]),
            completion_tokens=rng.choice([0, 9]),
            cost_usd=rng.choice([0.0, 0.25]),
            recovery_cost_usd=rng.choice([0.0, 0.125]),
        )
        now = 10.0 + rng.expovariate(1.0)
        ev.request_completed(r, now)
        ref.request_completed(r, now)
        category = "ok" if r.status == 200 else "rate_limit"
        ev.upstream_attempt("fake", "gpt-test", category)
        ref.attempts.labels("fake", "gpt-test", category).inc()


def exposition(body: bytes) -> tuple[list[str], dict[tuple[str, str], float]]:
    """The HELP and TYPE lines of the per-request metrics, and their samples by (name,
    labels) with the ``_created`` timestamps."""
    meta, values = [], {}
    for line in body.decode().splitlines():
        if line.startswith("#"):
            if any(f" {name.removesuffix('_total')}" in line for name in NAMES):
                meta.append(line)
            continue
        series, _, value = line.rpartition(" ")
        if any(series.startswith(name.removesuffix("_total")) for name in NAMES):
            values[series.partition("{")[0], series] = float(value)
    return meta, values


def test_exposition_is_that_of_plain_metrics() -> None:
    """/metrics shows the per-request series as the plain Counter / Histogram objects did:
    HELP and TYPE lines, every sample, the _created series; each metric once."""
    m, ref = Metrics(), Reference()
    feed(Events(m), ref, 200)
    (meta, got), (ref_meta, want) = (
        exposition(m.render()[0]),
        exposition(generate_latest(ref.registry)),
    )
    assert sorted(meta) == sorted(ref_meta) and len(meta) == 2 * 6 + 2 * 6  # + _created
    assert got.keys() == want.keys()
    created = [k for k in want if k[0].endswith("_created")]
    assert len(created) == 4 + 2 + 2 + 2 + 4 + 4  # one per child, as before
    for key, value in want.items():
        if key[0].endswith("_created"):
            assert abs(got[key] - value) < 60, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    types = re.findall(r"^# TYPE (\S+) ", m.render()[0].decode(), flags=re.MULTILINE)
    assert len(types) == len(set(types))
    # the registry knows the collectors' names: the same metric cannot be registered twice
    with pytest.raises(ValueError, match="Duplicated"):
        Counter(P + "requests_total", "again", ["team"], registry=m.registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Histogram(P + "time_to_first_byte_seconds", "again", registry=m.registry)


def test_workers_count_on_the_same_path_and_a_scrape_adds_every_process(
    tmp_path: Path,
) -> None:
    """In multiprocess mode (``--workers``) the per-request series are counted by the same
    code as in one process; each process writes its counts to the multiprocess directory
    when flushed, and a scrape writes its own and adds every process's file."""
    import subprocess
    import sys

    alone, mine, ref = Metrics(), Metrics(multiprocess_dir=str(tmp_path)), Reference()
    assert not alone.multiprocess and mine.multiprocess
    for name in ("requests", "duration", "ttfb", "upstream_attempts", "tokens", "cost"):
        assert type(getattr(mine, name)) is type(getattr(alone, name)), name
    feed(Events(alone), Reference(), 100)
    feed(Events(mine), ref, 100)
    assert not list(tmp_path.iterdir())  # nothing written per request
    mine.flush()
    assert [f.name for f in tmp_path.iterdir()] == [f"counts_{os.getpid()}.json"]
    assert_same(mine.registry, alone.registry)  # the same counts, either way

    # another process (another worker) counts other requests and flushes them
    other = (
        "import sys; from tests.test_observe_fast import *; "
        "m = Metrics(multiprocess_dir=sys.argv[1]); feed(Events(m), Reference(), 60, seed=9); "
        "m.flush()"
    )
    root = Path(__file__).parents[1]
    subprocess.run([sys.executable, "-c", other, str(tmp_path)], cwd=root, check=True)
    assert len(list(tmp_path.glob("counts_*.json"))) == 2
    feed(Events(Metrics()), ref, 60, seed=9)  # what the other process counted
    feed(Events(mine), ref, 5, seed=3)  # this process's newest, not flushed yet
    assert_same(mine.registry, ref.registry)
    meta, got = exposition(mine.render()[0])
    _, want = exposition(generate_latest(ref.registry))
    want = {k: v for k, v in want.items() if not k[0].endswith("_created")}
    assert got.keys() == want.keys()  # no _created series: none in multiprocess mode
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    assert f"# HELP {P}requests_total Requests answered" in meta
    with pytest.raises(ValueError, match="non-negative"):
        Events(mine).request_completed(request(completion_tokens=-1), 10.1)


def test_counts_file_keeps_every_value() -> None:
    """A process's counts survive their file: NaN and infinite sums, statuses, created."""
    from gateway.observe.counts import Counts

    m = Metrics()
    ev = Events(m)
    for started, ttfb in ((10.0 - math.inf, math.nan), (9.5, None), (9.9, 0.004)):
        ev.request_completed(request(started=started, ttfb=ttfb, status=429), 10.0)
    ev.upstream_attempt("fake", "gpt-test", "ok")
    ev.request_completed(request(cost_usd=0.1, recovery_cost_usd=0.2), 10.0)
    own = m._counts()
    back = Counts.load(own.dump())
    assert back.dump() == own.dump()
    (s,) = back.series.values()
    assert s.cost is not None and s.recovery_cost is not None
    assert (s.cost.value, s.recovery_cost.value) == (0.1, 0.2)
    assert s.duration.sum == math.inf and math.isnan(s.ttfb.sum)  # type: ignore[union-attr]
    assert s.by_status[429].value == 3 and s.by_status[200].value == 1


def test_only_public_library_api() -> None:
    """gateway/observe uses prometheus_client and structlog through their public API: no
    private module or name is imported, no private attribute of theirs is touched."""
    import ast

    root = Path(__file__).parents[1] / "gateway" / "observe"
    libraries = ("prometheus_client", "structlog")
    private_attrs = {"_sum", "_buckets", "_upper_bounds", "_value", "_metrics", "_CONFIG",
                     "_created", "_multiprocess", "_use_created"}  # fmt: skip
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(libraries):
                parts = [*(node.module or "").split("."), *(a.name for a in node.names)]
                assert not any(p.startswith("_") for p in parts), (path.name, ast.dump(node))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(libraries):
                        assert not any(p.startswith("_") for p in a.name.split(".")), path.name
            elif isinstance(node, ast.Attribute):
                assert node.attr not in private_attrs, (path.name, node.lineno, node.attr)


async def test_access_lines_of_one_loop_pass_are_written_together() -> None:
    """batch() lines go out in one write at the end of the loop pass; a write() in between
    first writes what was gathered, so the output keeps the order of the calls."""
    import asyncio

    from gateway.observe.logs import JsonLines

    class Recorder(io.BytesIO):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[bytes] = []

        def write(self, data: bytes) -> int:  # type: ignore[override]
            self.writes.append(bytes(data))
            return super().write(data)

        def fileno(self) -> int:
            raise io.UnsupportedOperation

    f = Recorder()
    out = JsonLines(f)
    out.batch(b"a\n")
    out.batch(b"b\n")
    assert f.writes == []  # not yet: the loop pass has not ended
    await asyncio.sleep(0)  # the scenario: one loop pass ends
    assert f.writes == [b"a\nb\n"]
    out.batch(b"c\n")
    out.write(b"d\n")  # another event: what is gathered goes first
    await asyncio.sleep(0)  # another loop pass
    assert f.writes == [b"a\nb\n", b"c\n", b"d\n"]
    assert f.getvalue() == b"a\nb\nc\nd\n"


def test_dropped_events_of_a_stream_are_one_line_with_their_count() -> None:
    """Undecodable events a translated stream dropped are counted in one go when it ends:
    the metric by their number, one warning line with ``count`` (none for a single one)."""
    metrics = Metrics()
    ev = Events(metrics)
    with capture_logs() as captured:
        ev.stream_event_dropped(request(), "claude-test")
        ev.stream_event_dropped(request(), "claude-test", 3)
    dropped = [e for e in captured if e["event"] == "stream_event_dropped"]
    assert [e.get("count") for e in dropped] == [None, 3]
    assert all(e["log_level"] == "warning" and e["model"] == "claude-test" for e in dropped)
    value = metrics.registry.get_sample_value(
        "llm_gateway_stream_events_dropped_total", {"model": "claude-test"}
    )
    assert value == 4


def requests_total_of(m: Metrics) -> float:
    _, got = exposition(m.render()[0])
    return sum(v for k, v in got.items() if k[0] == P + "requests_total")


def test_with_workers_a_counter_never_goes_back_whichever_worker_answers(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    """Two workers on one directory: a scrape answered by either shows the same total,
    the newest counts of the answering one included, so Prometheus never sees a reset."""
    a = Metrics(multiprocess_dir=str(tmp_path))
    feed(Events(a), Reference(), 10)
    a.flush()
    feed(Events(a), Reference(), 5, seed=3)  # counted after the last flush
    first = requests_total_of(a)
    assert first == 15
    other = (  # another worker (another pid) answers the next scrape
        "import sys; from tests.test_observe_fast import *; "
        "print(requests_total_of(Metrics(multiprocess_dir=sys.argv[1])))"
    )
    root = Path(__file__).parents[1]
    out = subprocess.run(
        [sys.executable, "-c", other, str(tmp_path)], cwd=root, check=True, capture_output=True
    )
    assert float(out.stdout.decode().split()[-1]) == first


def test_a_worker_with_a_dead_workers_pid_goes_on_from_its_counts(tmp_path: Path) -> None:
    """A new process that gets a dead worker's pid starts from that worker's file instead
    of overwriting it: the total does not drop."""
    dead = Metrics(multiprocess_dir=str(tmp_path))
    feed(Events(dead), Reference(), 12)
    dead.flush()
    reborn = Metrics(multiprocess_dir=str(tmp_path))  # same pid, same file
    feed(Events(reborn), Reference(), 3, seed=5)
    assert requests_total_of(reborn) == 15


def test_a_broken_counts_file_is_skipped_and_an_unwritable_one_logged(tmp_path: Path) -> None:
    """A scrape skips a counts file it cannot read (logged) instead of failing; a flush
    that cannot write logs it and keeps the counts in memory."""
    m = Metrics(multiprocess_dir=str(tmp_path))
    feed(Events(m), Reference(), 4)
    (tmp_path / "counts_1.json").write_bytes(b"{not json")
    with structlog.testing.capture_logs() as logs:
        assert requests_total_of(m) == 4
    assert [e["event"] for e in logs] == ["metrics_counts_unreadable"]
    own = tmp_path / f"counts_{os.getpid()}.json"
    own.unlink()
    own.mkdir()  # a directory where the file goes
    with structlog.testing.capture_logs() as logs:
        m.flush()
    assert [e["event"] for e in logs] == ["metrics_flush_failed"]


def test_durations_are_rounded_to_the_microsecond_as_round_does() -> None:
    """The access log's ``duration_s`` and ``ttfb_s`` (``_micro``, cheaper than ``round``):
    the same value as ``round(x, 6)`` for durations from microseconds to hours; what is
    no duration (negative, infinite, NaN, huge) is ``round``'s. They part only on a
    float within a rounding error of half a microsecond (0.0078125: ``round`` takes the
    even neighbour), which a measured duration is not told apart by."""
    rng = random.Random(7)
    for _ in range(200_000):
        x = rng.random() * rng.choice((1e-3, 0.1, 1.0, 30.0, 600.0, 7200.0))
        assert _micro(x) == round(x, 6), x
    for x in (0.0, 1.0, 0.25, 0.0123456, -1.5, 2e9):
        assert _micro(x) == round(x, 6)
    assert _micro(math.inf) == math.inf and math.isnan(_micro(math.nan))
