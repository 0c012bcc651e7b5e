"""The access-log record (``RequestLog``) is written by whoever owns a fact and read back
only to report it: outside the reporters (gateway/observe/, and simulate's timeline), code
reads nothing of it but the request's identity and trace context, set when the request
arrives. What a request was billed is its handler's ``Bill``, not the record's."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from gateway.observe.request_log import RequestLog

pytestmark = pytest.mark.fast

GATEWAY = Path(__file__).resolve().parents[1] / "gateway"
#: The modules that report the record: the events, metrics, traces and logs, and
#: simulate's timeline of what a scripted request did.
REPORTERS = ("observe", "simulate")
#: Set when the request arrives (its id, its start, its path; its trace context), then
#: only read.
IDENTITY = frozenset({"request_id", "started", "path", "span", "traceparent"})
FIELDS = frozenset(f.name for f in dataclasses.fields(RequestLog))


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a field of a ``log`` / ``self.log`` is read (loaded, not assigned; a call
    such as a structlog logger's ``log.error(...)`` is no field)."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        if id(node) in called:
            continue
        holder = node.value
        is_log = (isinstance(holder, ast.Name) and holder.id == "log") or (
            isinstance(holder, ast.Attribute) and holder.attr == "log"
        )
        if is_log and node.attr in FIELDS:
            found.append((node.lineno, node.attr))
    return found


def _offences(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in REPORTERS:
            continue
        for line, name in _reads(ast.parse(path.read_text())):
            if name not in IDENTITY:
                out.append(f"{rel}:{line} reads log.{name}")
    return out


def test_no_decision_reads_the_access_log_record() -> None:
    assert _offences(GATEWAY) == []


def test_the_check_catches_a_planted_read(tmp_path: Path) -> None:
    (tmp_path / "recovery").mkdir()
    (tmp_path / "recovery" / "planted.py").write_text(
        "def f(log):\n    log.attempts += 1\n    log.bill = 1\n    if log.answered_by:\n"
        "        return log.request_id\n"
    )
    assert _offences(tmp_path) == ["recovery/planted.py:4 reads log.answered_by"]


def test_the_bill_is_not_the_records() -> None:
    """The tokens and costs live on the request's Bill; the record only points at it."""
    assert not FIELDS & {"prompt_tokens", "cost_usd", "recovery_cost_usd", "unpriced"}
    assert "bill" in FIELDS
