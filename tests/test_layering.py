"""The architecture's rules, checked: pure recovery code, one chokepoint per dependency, the
layers of docs/architecture.md (every import goes down them, no cycle between modules or
packages), and that page's module tables against the tree."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Marked fast test by test: the fresh-interpreter tests below start a subprocess.

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


@pytest.mark.fast
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


@pytest.mark.fast
def test_the_closure_walk_follows_chains_and_lazy_imports() -> None:
    """The walk reaches a module through another (the schema's egress settings, from the
    recovery core) and counts an import inside a function (the proxy's translation)."""
    found = closure("gateway.resilience.decide")
    assert chain(found, "gateway.policy.egress").endswith("gateway.resilience.decide")
    assert "gateway.upstream.egress" not in found
    assert "gateway.translate.convert" in all_imports(GATEWAY / "live" / "attempter.py")


@pytest.mark.fast
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


@pytest.mark.fast
def test_only_upstream_uses_the_http_client() -> None:
    """Upstream HTTP is aiohttp's ClientSession, opened in upstream/client.py only."""

    def opens_client(text: str) -> bool:
        return any(m in text for m in ("ClientSession(", "create_connection(", "TCPConnector"))

    users = {
        p.relative_to(GATEWAY).as_posix()
        for p in GATEWAY.rglob("*.py")
        if "testing" not in p.parts and opens_client(p.read_text())
    }
    assert users == {"upstream/client.py"}


@pytest.mark.fast
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


# ---- the layers: every import goes down, no cycle ---------------------------------------
#
# Every import counts here: at the top of a module, inside a function (made when it runs)
# and under ``TYPE_CHECKING`` (a type the module cannot be read without). gateway/testing/
# counts too: it is shipped, and the demo's provider is made of it.

ARCHITECTURE = GATEWAY.parent / "docs" / "architecture.md"

#: Module cycles still to be cut, each with why it exists. A cycle found must lie inside one
#: of these; one that is gone must leave this set (test_the_known_cycles_are_still_there).
KNOWN_CYCLES: dict[frozenset[str], str] = {
}  # fmt: skip


def module_names(root: Path) -> dict[str, Path]:
    """The modules of the package at ``root``, by their dotted names."""

    def name(path: Path) -> str:
        parts = path.relative_to(root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return {name(p): p for p in sorted(root.rglob("*.py"))}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package at ``root`` -> the modules of it that it imports, every
    import counted (top level, in a function, under ``TYPE_CHECKING``). ``from p import x``
    imports the module ``p.x`` when there is one, else ``p`` (where ``x`` is defined)."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.update({sub if sub in modules else base} & modules.keys())
        graph[name] = found - {name}
    return graph


def node_of(module: str) -> str:
    """The layer node a module belongs to: its package under the root (``gateway.web``), or
    the root module itself (``gateway.errors``, ``gateway`` for the root's ``__init__``)."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between layer nodes (:func:`node_of`) that the modules' imports make."""
    packages: dict[str, set[str]] = {node_of(m): set() for m in graph}
    for module, imported in graph.items():
        packages[node_of(module)].update(n for n in map(node_of, imported) if n != node_of(module))
    return packages


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one
    node (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def shown(cycle: list[str], graph: dict[str, set[str]]) -> str:
    """A cycle with the imports that make it, one per line."""
    edges = [f"    {a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle]
    return " / ".join(cycle) + "\n" + "\n".join(edges)


def upward(graph: dict[str, set[str]], rank: dict[str, int]) -> list[str]:
    """The imports between layer nodes that do not go to a lower layer."""
    return [
        f"{m} -> {n} (layer {rank[node_of(m)]} imports layer {rank[node_of(n)]})"
        for m in sorted(graph)
        for n in sorted(graph[m])
        if node_of(m) != node_of(n) and rank[node_of(n)] >= rank[node_of(m)]
    ]


def _doc_section(title: str) -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _rows(section: str) -> list[list[str]]:
    """The cells of each table row of ``section``, headers (a row above a rule) left out."""
    lines = section.splitlines()
    return [
        [c.strip() for c in line.strip().strip("|").split(" | ")]
        for line, below in zip(lines, [*lines[1:], ""], strict=True)
        if line.startswith("| ") and not line.startswith("| ---") and not below.startswith("| ---")
    ]


def _as_module(written: str, root: str = "gateway") -> str:
    """``web/`` -> ``gateway.web``; ``errors.py`` -> ``gateway.errors``; ``__init__.py`` ->
    ``gateway``; ``translate/requests/chat.py`` -> ``gateway.translate.requests.chat``."""
    path = written.removesuffix("/").removesuffix(".py")
    parts = [root, *path.split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def documented_layers() -> dict[str, int]:
    """docs/architecture.md, Layers: each package or root module -> its layer's number."""
    rank: dict[str, int] = {}
    for cells in _rows(_doc_section("Layers")):
        for written in re.findall(r"`([^`]+)`", cells[1]):
            assert _as_module(written) not in rank, f"{written} is in two layers"
            rank[_as_module(written)] = int(cells[0])
    return rank


GRAPH = import_graph(GATEWAY)


@pytest.mark.fast
def test_no_cycle_between_modules() -> None:
    """No module of gateway/ imports itself through others, every import counted."""
    wrong = [c for c in cycles(GRAPH) if not any(set(c) <= known for known in KNOWN_CYCLES)]
    assert not wrong, "\n".join(shown(c, GRAPH) for c in wrong)


@pytest.mark.fast
def test_the_known_cycles_are_still_there() -> None:
    """Each cycle :data:`KNOWN_CYCLES` excuses still exists (a cut one leaves the list)."""
    found = [set(c) for c in cycles(GRAPH)]
    gone = [sorted(k) for k in KNOWN_CYCLES if not any(c & k for c in found)]
    assert not gone, f"no longer cycles, take them out of KNOWN_CYCLES: {gone}"


@pytest.mark.fast
def test_no_cycle_between_packages() -> None:
    """No package of gateway/ (nor root module) imports itself through others."""
    packages = package_graph(GRAPH)
    assert not (found := cycles(packages)), "\n".join(shown(c, packages) for c in found)


@pytest.mark.fast
def test_the_layers_name_every_package_once() -> None:
    """docs/architecture.md, Layers, puts each package and root module of gateway/ in one
    layer, and names nothing else."""
    assert set(documented_layers()) == set(package_graph(GRAPH))


@pytest.mark.fast
def test_every_import_goes_down_the_layers() -> None:
    """Each import from one package (or root module) to another goes to a lower layer of
    docs/architecture.md, Layers: none goes up, none goes sideways within a layer."""
    assert not (wrong := upward(GRAPH, documented_layers())), "\n".join(wrong)


@pytest.mark.fast
def test_the_module_tables_name_every_module() -> None:
    """docs/architecture.md, Modules, has one row per package and per module of gateway/
    (its first cell names it, as ``web/`` or ``web/app.py``), and each row is one."""
    written = [n for cells in _rows(_doc_section("Modules"))
               for n in re.findall(r"`([^`]+)`", cells[0])]  # fmt: skip
    assert len(written) == len(set(written)), "a module has two rows"
    assert {_as_module(n) for n in written} == set(GRAPH)


@pytest.mark.fast
def test_the_checks_catch_a_planted_cycle(tmp_path: Path) -> None:
    """Two modules of two packages that import each other, one inside a function and one
    under ``TYPE_CHECKING``: the module cycle, the package cycle and the import that goes
    up a layer are each found (and a relative import of a name and a module, within a
    package, is read as both)."""
    root = tmp_path / "planted"
    for path, text in {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from planted.high import b\n    return b\n",
        "high/__init__.py": "VALUE = 1\n",
        "high/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from planted.low.a import f\n",
        "high/c.py": "from . import VALUE, b\n",  # relative, within its package: no cycle
    }.items():  # fmt: skip
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    graph = import_graph(root)
    assert graph["planted.low.a"] == {"planted.high.b"}
    assert graph["planted.high.b"] == {"planted.low.a"}
    assert graph["planted.high.c"] == {"planted.high", "planted.high.b"}
    assert cycles(graph) == [["planted.high.b", "planted.low.a"]]
    assert cycles(package_graph(graph)) == [["planted.high", "planted.low"]]
    rank = {"planted": 0, "planted.low": 1, "planted.high": 2}
    assert upward(graph, rank) == ["planted.low.a -> planted.high.b (layer 1 imports layer 2)"]


@pytest.mark.fast
def test_cycles_finds_each_component() -> None:
    """A synthetic graph: a three-module ring with a module hanging off it, a pair, and a
    chain that closes no ring."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"},
             "g": {"h"}, "h": set()}  # fmt: skip
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["e", "f"]]
