"""The house rules of gateway/ that a linter does not check: no function over 80 lines, no
module over 400 lines without a reason on its first line, ruff's complexity rule on; and
the fast tier (``pytest -m fast``) holds no test that opens a socket.

A long module states why on its first line, a comment ``# long: <reason>`` above its
docstring (README.md, Tests).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
GATEWAY = ROOT / "gateway"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400
MAX_COMPLEXITY = 15
#: Split in progress: the hot-path functions and modules being split into small named
#: pieces; each entry goes when its split lands (the tests below fail on a stale one).
SPLIT_IN_PROGRESS: set[str] = set()
LONG_REASON = re.compile(r"# long: \S.{9,}")
#: The fixtures of tests/ that open sockets or start processes: real servers (the fake
#: provider, the gateway, redis, a forward proxy) and the clients that reach them.
SOCKET_FIXTURES = frozenset({
    "fake", "gateway_of", "make_gateway", "gw", "evil", "gateway_at", "gateway_process",
    "https_fake", "mtls_fake", "http_fake", "live", "state_url", "make_backend",
    "aiohttp_client", "aiohttp_server", "aiohttp_raw_server", "unused_tcp_port",
})  # fmt: skip
#: And the helpers that do.
SOCKET_HELPERS = frozenset({
    "FakeProvider", "Harness", "ClientSession", "TestServer", "TestClient", "subprocess",
    "redis_server", "proxy_server", "open_connection", "start_server", "create_server",
})  # fmt: skip


def _modules() -> list[Path]:
    return sorted(GATEWAY.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _long_functions() -> dict[str, int]:
    """``module::function`` -> its length in lines, for every function over the limit."""
    found: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{_name(path)}::{node.name}"] = lines
    return found


def _long_modules() -> dict[str, str]:
    """Module -> its first line, for every module over the limit."""
    found: dict[str, str] = {}
    for path in _modules():
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_MODULE_LINES:
            found[_name(path)] = lines[0]
    return found


def test_no_function_is_over_80_lines() -> None:
    too_long = {f: n for f, n in _long_functions().items() if f not in SPLIT_IN_PROGRESS}
    assert not too_long, f"split these into named pieces of at most 80 lines: {too_long}"


def test_a_module_over_400_lines_gives_its_reason_first() -> None:
    unexplained = [
        m
        for m, first in _long_modules().items()
        if m not in SPLIT_IN_PROGRESS and not LONG_REASON.fullmatch(first.rstrip())
    ]
    assert not unexplained, (
        "a module over 400 lines begins with '# long: <why it is one module>', or is split: "
        f"{unexplained}"
    )


def test_every_split_in_progress_is_still_needed() -> None:
    """An exemption whose function or module is now short goes (the rules then hold it)."""
    still = set(_long_functions()) | set(_long_modules())
    assert not SPLIT_IN_PROGRESS - still, (
        f"no longer long, remove from SPLIT_IN_PROGRESS: {sorted(SPLIT_IN_PROGRESS - still)}"
    )


def test_the_rules_catch_a_planted_offender(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"def planted():\n{body}\n")
    (fn,) = tree.body
    assert isinstance(fn, ast.FunctionDef) and fn.end_lineno is not None
    assert fn.end_lineno - fn.lineno + 1 == MAX_FUNCTION_LINES + 1
    assert LONG_REASON.fullmatch("# long: one class, every metric it declares")
    assert not LONG_REASON.fullmatch('"""A module."""')
    assert not LONG_REASON.fullmatch("# long:")


def test_ruff_checks_complexity_at_15_or_less() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lint = config["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"]
    assert lint["mccabe"]["max-complexity"] <= MAX_COMPLEXITY
    ignored = {path for path, rules in lint["per-file-ignores"].items() if "C901" in rules} - {
        "tests/**",
        "bench/**",
    }
    in_progress = {entry.split("::")[0] for entry in SPLIT_IN_PROGRESS}
    assert ignored <= in_progress, f"C901 is off for more than the splits in progress: {ignored}"


def _fast_modules() -> list[Path]:
    marked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
                and "mark.fast" in ast.unparse(node.value)
            ):
                marked.append(path)
    return marked


def test_the_fast_tier_holds_the_pure_tests() -> None:
    assert len(_fast_modules()) >= 50  # most unit tests: a lost marker shows here


@pytest.mark.parametrize("path", _fast_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_fast_module_uses_no_socket_fixture(path: Path) -> None:
    """A module of the fast tier names none of the fixtures or helpers that open sockets or
    start processes (its tests are pure or in memory)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fixtures: set[str] = set()
    helpers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            fixtures |= {a.arg for a in node.args.args}
        elif isinstance(node, ast.Name):
            helpers.add(node.id)
        elif isinstance(node, ast.Attribute):
            helpers.add(node.attr)
        elif isinstance(node, ast.alias):
            helpers.add((node.asname or node.name).split(".")[-1])
    used = (fixtures & SOCKET_FIXTURES) | (helpers & SOCKET_HELPERS)
    assert not used, f"not a fast module: it uses {sorted(used)}"
