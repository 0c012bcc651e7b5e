"""The architecture's rules, checked: pure recovery code, one chokepoint per dependency."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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
    "path", sorted((GATEWAY / "translate").rglob("*.py")), ids=lambda p: p.name
)
def test_translation_is_pure(path: Path) -> None:
    """gateway/translate/ does no I/O either: the attempter is the only one that calls it."""
    assert not imports_of(path) & (FORBIDDEN_IN_PURE - {"time"})  # ids carry a creation time


@pytest.mark.parametrize(
    ("module", "owner"),
    [("prometheus_client", {"observe/metrics.py", "observe/counts.py"}),
     ("yaml", {"policy/source.py"}),
     ("redis", {"state/redis.py", "state/redis_sync.py", "state/redis_admissions.py",
                "state/deployment_sync.py"})],
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


def _runtime_imports(path: Path) -> set[str]:
    """The gateway modules a file imports when it runs (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    deps: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gateway"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                as_file = GATEWAY.parent / (full.replace(".", "/") + ".py")
                deps.add(full if as_file.exists() else node.module)
        elif isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name.startswith("gateway")}
    return deps


def test_no_import_cycles() -> None:
    """The modules' runtime imports form no cycle (the package reads top-down)."""
    modules = {}
    for p in GATEWAY.rglob("*.py"):
        parts = p.relative_to(GATEWAY.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = _runtime_imports(p)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(modules.get(m, ())):
            if d not in modules:
                continue
            assert state.get(d) != 1, " -> ".join([*path[path.index(d) :], d])
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m)


def test_every_imported_package_is_declared() -> None:
    """Each third-party package gateway/ imports is a dependency in pyproject.toml (or, for
    optional ones, an extra), not something another package happens to bring along."""
    import sys
    import tomllib

    project = tomllib.loads((GATEWAY.parent / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    names = {re.split(r"[<>=!;\[ ]", d, maxsplit=1)[0].lower().replace("-", "_") for d in declared}
    distribution = {"yaml": "pyyaml", "opentelemetry": "opentelemetry_sdk"}
    imported = set().union(*(imports_of(p) for p in GATEWAY.rglob("*.py"))) - {"gateway"}
    third_party = {m for m in imported if m not in sys.stdlib_module_names}
    missing = {m for m in third_party if distribution.get(m, m) not in names}
    assert not missing, sorted(missing)


def test_serving_loads_no_translation_or_tracing_sdk() -> None:
    """A serving process leaves out what it does not use: format translation (loaded by
    the first request that crosses formats), the OpenTelemetry SDK and the Redis client
    (loaded when configured)."""
    code = "import sys, gateway.cli, gateway.web.app; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lazy = ("gateway.translate", "opentelemetry", "redis")
    assert [m for m in out.stdout.split() if m.startswith(lazy)] == []


def test_streams_is_framing_only() -> None:
    """gateway/streams/ loads no I/O: not aiohttp, nor the proxy, upstream or relay
    (the live relay is gateway/relay.py)."""
    code = (
        "import sys, gateway.streams.sse, gateway.streams.splice, gateway.streams.verdict;"
        " print(' '.join(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    io = {"aiohttp", "gateway.proxy", "gateway.upstream", "gateway.relay", "gateway.deadlines"}
    assert not loaded & io
