"""The architecture's rules, checked: pure recovery code, one chokepoint per dependency."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"

#: What does I/O or waits: never loaded by the import closure of pure code.
IO = frozenset({"aiohttp", "asyncio", "ssl", "socket", "urllib.request", "http.client", "redis",
                "subprocess", "selectors", "threading", "multiprocessing", "concurrent.futures",
                "random", "time"})  # fmt: skip
#: The pure packages (no I/O, clock and randomness passed in), and what their closure may
#: load of :data:`IO` all the same. A new pure package is one line here.
PURE = {
    "gateway.resilience": frozenset(),
    "gateway.translate": frozenset({"time"}),  # ids carry a creation time
    "gateway.formats": frozenset(),
}
#: Modules of a pure package that are not pure yet, each with the reason (none left).
NOT_YET_PURE: set[str] = set()


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(GATEWAY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in GATEWAY.rglob("*.py")}


def pure_modules(package: str) -> list[str]:
    return sorted(m for m in MODULES if (m == package or m.startswith(package + "."))
                  and m not in NOT_YET_PURE)  # fmt: skip


@functools.cache
def all_imports(path: Path) -> frozenset[str]:
    """Every module a file imports when it runs, by its full name: at the top and in
    functions alike (a lazy import is still made), not under ``TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
        for n in ast.walk(node)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return frozenset(names)


def closure(module: str) -> dict[str, str]:
    """The gateway modules ``module`` loads, each with the one that imports it first."""
    seen = {module: ""}
    todo = [module]
    while todo:
        m = todo.pop()
        for name in sorted(all_imports(MODULES[m])):
            parts = name.split(".")
            for n in (".".join(parts[:i]) for i in range(2, len(parts) + 1)):  # packages too
                if n in MODULES and n not in seen:
                    seen[n] = m
                    todo.append(n)
    return seen


def chain(found: dict[str, str], module: str) -> str:
    path = [module]
    while found[path[-1]]:
        path.append(found[path[-1]])
    return " <- ".join(path)


def _is(name: str, banned: frozenset[str]) -> bool:
    parts = name.split(".")
    return any(".".join(parts[:i]) in banned for i in range(1, len(parts) + 1))


@pytest.mark.parametrize("package", sorted(PURE))
def test_pure_code_imports_no_io_in_its_closure(package: str) -> None:
    """No gateway module a pure module loads (through any chain of imports, lazy ones
    too) imports aiohttp, asyncio, ssl, sockets, urllib.request, threads, the clock or
    randomness (apart from what its package may use)."""
    banned = IO - PURE[package]
    wrong: dict[tuple[str, str], str] = {}  # (module, what it imports): one chain to it
    for module in pure_modules(package):
        found = closure(module)
        for m in sorted(found):
            for n in sorted(all_imports(MODULES[m])):
                if _is(n, banned):
                    wrong.setdefault((m, n), chain(found, m))
    assert not wrong, "\n".join(f"{c} imports {n}" for (_, n), c in sorted(wrong.items()))


# What the pure code's libraries load themselves (pydantic reads its plugins' entry points
# through importlib.metadata, which loads socket): theirs, not the gateway's doing.
_LIBRARIES = """
import orjson, pydantic, yarl
class _Warm(pydantic.BaseModel):
    x: int = 0
"""


@pytest.mark.parametrize("package", sorted(PURE))
def test_pure_code_loads_no_io_when_imported(package: str) -> None:
    """Importing each pure module, in a fresh interpreter per package, loads no I/O module
    that its libraries (pydantic, orjson, yarl) do not load anyway: the closure as it runs."""
    code = f"""
import importlib, json, sys
{_LIBRARIES}
before = set(sys.modules)
loaded = {{}}
for m in {pure_modules(package)!r}:
    importlib.import_module(m)
    loaded[m] = sorted(set(sys.modules) - before)
    before = set(sys.modules)
print(json.dumps(loaded))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    banned = IO - PURE[package]
    loaded = json.loads(out.stdout)
    wrong = {m: bad for m, new in loaded.items() if (bad := [n for n in new if _is(n, banned)])}
    assert not wrong


def test_the_closure_walk_follows_chains_and_lazy_imports() -> None:
    """The walk reaches a module through another (the schema's egress settings, from the
    recovery core) and counts an import inside a function (the proxy's translation)."""
    found = closure("gateway.resilience.decide")
    assert chain(found, "gateway.policy.egress").endswith("gateway.resilience.decide")
    assert "gateway.upstream.egress" not in found
    assert "gateway.translate.convert" in all_imports(GATEWAY / "live" / "attempter.py")


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
    distribution = {"yaml": "pyyaml", "opentelemetry": "opentelemetry_sdk",
                    "google": "google_auth", "azure": "azure_identity"}  # fmt: skip
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


def test_stream_framing_is_framing_only() -> None:
    """The stream framing (gateway/formats/sse.py, splice.py) loads no I/O: not aiohttp, nor the proxy, upstream or relay
    (the live relay is gateway/live/relay.py)."""
    code = (
        "import sys, gateway.formats.sse, gateway.formats.splice, gateway.resilience.verdict;"
        " print(' '.join(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    io = {
        "aiohttp",
        "gateway.live.attempter",
        "gateway.upstream.client",
        "gateway.live.relay",
        "gateway.upstream.deadlines",
    }
    assert not loaded & io
