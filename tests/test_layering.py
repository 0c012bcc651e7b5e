"""The architecture's rules, checked: pure recovery code, one chokepoint per dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"
FORBIDDEN_IN_PURE = {"aiohttp", "asyncio", "time", "random", "redis"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "path", sorted((GATEWAY / "resilience").glob("*.py")), ids=lambda p: p.name
)
def test_resilience_is_pure(path: Path) -> None:
    """gateway/resilience/ never imports aiohttp, asyncio, time, random or redis."""
    assert not imports_of(path) & FORBIDDEN_IN_PURE


@pytest.mark.parametrize(
    ("module", "owner"),
    [("prometheus_client", {"observe/metrics.py"}),
     ("yaml", {"policy/load.py"}),
     ("redis", {"state/redis.py"})],
)  # fmt: skip
def test_one_chokepoint_per_dependency(module: str, owner: set[str]) -> None:
    """Only the owning modules import Prometheus, YAML and Redis clients."""
    users = {
        p.relative_to(GATEWAY).as_posix()
        for p in GATEWAY.rglob("*.py")
        if module in imports_of(p) and "testing" not in p.parts
    }
    assert users <= owner


def test_only_upstream_uses_the_http_client() -> None:
    """Upstream HTTP is aiohttp's ClientSession, opened in upstream.py only."""

    def opens_client(text: str) -> bool:
        return any(m in text for m in ("ClientSession(", "create_connection(", "TCPConnector"))

    users = {
        p.relative_to(GATEWAY).as_posix()
        for p in GATEWAY.rglob("*.py")
        if "testing" not in p.parts and opens_client(p.read_text())
    }
    assert users == {"upstream.py"}
