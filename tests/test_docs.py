"""The documentation's examples run: policy files load, CLI timelines are what the CLI prints.

Conventions (also written down at the end of docs/policies.md):

- A ```yaml block directly preceded by ``<!-- policy-file: SET/PATH.yaml -->`` is the
  file ``PATH.yaml`` of the example set ``SET``; all blocks of one set in one document
  are written to one directory and loaded together with ``load_policy_dir``.
- An unmarked ```yaml block whose first line that is not a comment is a top-level
  section (``providers:``, ``models:``, ``policies:``, ``teams:``) is a self-contained
  set; ``---`` separates files, named by a ``# name.yaml`` comment on their first line.
  ``<!-- policy-fragment -->`` before a block opts it out.
- Every ``env:NAME`` team key of a set gets a dummy value.
- Every folder under ``docs/examples/`` is a policy set that loads as it is (no env
  values: its team keys are ``sha256:``); where a doc has a set of that folder's name,
  its blocks are the folder's files, byte for byte.
- In a ```console block, every ``$ llm-gateway simulate ...`` / ``$ llm-gateway check ...``
  line is run from the repository root as ``python -m gateway ...`` and must print
  exactly the lines that follow it (up to the next ``$`` line or the end of the block).
  An ``llm-gateway simulate`` command in any other block must run and exit 0.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.routing.load import load_policy_dir

ROOT = Path(__file__).resolve().parent.parent
POLICY_DOCS = ("README.md", "docs/policies.md", "docs/translation.md", "docs/clouds.md")
EXAMPLES = ROOT / "docs" / "examples"
EXAMPLE_DIRS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
COMMAND_DOCS = (
    "README.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md")),
)

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<lang>[\w+-]*)[ \t]*$")
_FILE_MARKER = re.compile(
    r"^<!--\s*policy-file:\s*(?P<set>[\w.-]+)/(?P<path>[\w./-]+\.ya?ml)\s*-->$"
)
_FRAGMENT_MARKER = re.compile(r"^<!--\s*policy-fragment\s*-->$")
_SECTION = re.compile(r"^(providers|models|policies|teams):\s*(#.*)?$")
_NAME_COMMENT = re.compile(r"^#\s*(?P<name>[\w./-]+\.ya?ml)\b")
_ENV_KEY = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")
_RUN_IN_CONSOLE = ("llm-gateway simulate", "llm-gateway check")


@dataclass(frozen=True, slots=True)
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str  # the line just before the fence ("" when none)


def blocks(doc: str) -> Iterator[Block]:
    """Every fenced block of a Markdown file, with its content dedented by the fence's indent."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks = m["indent"], m["ticks"]
        marker = lines[i - 1].strip() if i > 0 else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        yield Block(doc, i + 1, m["lang"], "\n".join(body) + "\n", marker)
        i = j + 1


# ---- policy files ----------------------------------------------------------------------


@dataclass(slots=True)
class PolicySet:
    id: str
    files: dict[str, str] = field(default_factory=dict)


def _first_code_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line
    return ""


def _split_documents(text: str) -> dict[str, str]:
    docs = re.split(r"(?m)^---[ \t]*\n", text)
    files: dict[str, str] = {}
    for n, doc in enumerate(d for d in docs if d.strip()):
        first = doc.lstrip("\n").splitlines()[0]
        m = _NAME_COMMENT.match(first)
        name = m["name"] if m else f"file{n}.yaml"
        assert name not in files, f"two documents named {name}"
        files[name] = doc
    return files


def policy_sets() -> list[PolicySet]:
    found: list[PolicySet] = []
    for doc in POLICY_DOCS:
        marked: dict[str, PolicySet] = {}
        for b in blocks(doc):
            if b.lang not in ("yaml", "yml"):
                continue
            if m := _FILE_MARKER.match(b.marker):
                s = marked.setdefault(m["set"], PolicySet(f"{doc}:{m['set']}"))
                assert m["path"] not in s.files, f"{doc}:{b.line}: {m['path']} given twice"
                s.files[m["path"]] = b.text
            elif _FRAGMENT_MARKER.match(b.marker):
                continue
            elif _SECTION.match(_first_code_line(b.text)):
                found.append(PolicySet(f"{doc}:{b.line}", _split_documents(b.text)))
        found.extend(marked.values())
    return found


POLICY_SETS = policy_sets()


def test_the_docs_have_policy_examples() -> None:
    """Guard the extractor: a broken convention must not silently test nothing."""
    ids = [s.id for s in POLICY_SETS]
    assert any(i.startswith("README.md:") for i in ids), ids
    assert "docs/policies.md:worked" in ids, ids
    worked = next(s for s in POLICY_SETS if s.id == "docs/policies.md:worked")
    assert len(worked.files) == 4, sorted(worked.files)
    assert "docs/translation.md:translation" in ids, ids
    assert "docs/clouds.md:clouds" in ids, ids


def test_markers_precede_yaml_blocks() -> None:
    """A policy marker is followed by a ```yaml block (so a marked example is never skipped)."""
    for doc in POLICY_DOCS:
        lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if _FILE_MARKER.match(line.strip()) or _FRAGMENT_MARKER.match(line.strip()):
                nxt = lines[n + 1].strip() if n + 1 < len(lines) else ""
                assert nxt.startswith("```yaml"), f"{doc}:{n + 1}: marker not before a yaml block"
            elif line.strip().startswith("<!--") and "policy-" in line:
                raise AssertionError(f"{doc}:{n + 1}: malformed marker {line!r}")


@pytest.mark.parametrize("policy_set", POLICY_SETS, ids=[s.id for s in POLICY_SETS])
def test_policy_example_loads(policy_set: PolicySet, tmp_path: Path) -> None:
    env: dict[str, str] = {}
    for rel, text in policy_set.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        for var in _ENV_KEY.findall(text):
            env[var] = f"docs-example-key-{var}"
    loaded = load_policy_dir(tmp_path, env=env)
    assert loaded.counts()["files"] == len(policy_set.files)


def _yaml_files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(folder.rglob("*.y*ml"))
    }


@pytest.mark.parametrize("folder", EXAMPLE_DIRS, ids=[p.name for p in EXAMPLE_DIRS])
def test_example_folder_loads(folder: Path) -> None:
    """A folder of docs/examples/ is what `llm-gateway check` accepts, with no secrets set."""
    files = _yaml_files(folder)
    assert files, f"{folder}: no policy files"
    loaded = load_policy_dir(folder, env={})
    assert loaded.counts()["files"] == len(files)


def test_example_folders_match_the_docs() -> None:
    """A doc's `policy-file: NAME/...` blocks for docs/examples/NAME are that folder's files."""
    for s in POLICY_SETS:
        folder = EXAMPLES / s.id.rsplit(":", 1)[1]
        if folder.is_dir():
            assert s.files == _yaml_files(folder), f"{s.id} differs from {folder}"


# ---- CLI commands and their output ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Command:
    id: str
    argv: tuple[str, ...]  # after "llm-gateway"
    expected: str | None  # None: only the exit status is checked


def _console_commands(b: Block) -> Iterator[Command]:
    """``$ llm-gateway simulate|check ...`` lines of a console block, with the lines after them."""
    current: tuple[int, str] | None = None
    output: list[str] = []
    for k, line in enumerate([*b.text.splitlines(), "$ (end)"]):
        if not line.startswith("$ "):
            output.append(line)
            continue
        if current is not None:
            n, cmd = current
            yield Command(f"{b.doc}:{n}", tuple(shlex.split(cmd))[1:], "\n".join(output))
        cmd = line[2:].strip()
        current = (b.line + 1 + k, cmd) if cmd.startswith(_RUN_IN_CONSOLE) else None
        output = []


def commands() -> list[Command]:
    found: list[Command] = []
    for doc in COMMAND_DOCS:
        for b in blocks(doc):
            if b.lang == "console":
                found.extend(_console_commands(b))
                continue
            for k, line in enumerate(b.text.splitlines()):
                cmd = line.strip().removeprefix("$ ")
                if cmd.startswith("llm-gateway simulate"):
                    argv = tuple(shlex.split(cmd))[1:]
                    found.append(Command(f"{doc}:{b.line + 1 + k}", argv, None))
    return found


COMMANDS = commands()


def _run(argv: tuple[str, ...]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_POLICY_DIR"}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout


@pytest.fixture(scope="module")
def command_results(
    request: pytest.FixtureRequest,
) -> Iterator[dict[tuple[str, ...], Future[tuple[int, str]]]]:
    """Start every selected documented command at once (each is a fresh interpreter)."""
    selected = [
        item.callspec.params["command"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and hasattr(item, "callspec")
        and "command" in item.callspec.params
    ]
    unique = list(dict.fromkeys(c.argv for c in selected))
    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2) * 2)) as pool:
        yield {argv: pool.submit(_run, argv) for argv in unique}


def test_the_docs_have_simulate_timelines() -> None:
    """Guard the extractor: recovery.md shows real timelines, the README its command."""
    timelines = [c for c in COMMANDS if c.argv[:1] == ("simulate",) and c.expected]
    assert sum(c.id.startswith("docs/recovery.md:") for c in timelines) >= 15
    assert any(c.id.startswith("README.md:") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_documented_command_prints_what_the_docs_show(
    command: Command, command_results: dict[tuple[str, ...], Future[tuple[int, str]]]
) -> None:
    status, output = command_results[command.argv].result()
    shown = "llm-gateway " + shlex.join(command.argv)
    if command.expected is None:
        assert status == 0, f"{shown} exited {status}:\n{output}"
        assert output.strip(), f"{shown} printed nothing"
        return
    assert output.rstrip("\n") == command.expected.rstrip("\n"), (
        f"{command.id}: `{shown}` printed something else than the docs show; "
        f"paste this output into the docs:\n{output}"
    )


# ---- the reference page lists what the code has -----------------------------------------

REFERENCE = ROOT / "docs" / "reference.md"


def _reference() -> str:
    return REFERENCE.read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The text of one ``## title`` section of docs/reference.md."""
    text = _reference()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _first_cells(section: str) -> list[str]:
    """The backticked names in the first cell of each table row of ``section``."""
    cells = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells.extend(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return cells


def test_every_setting_is_in_the_reference() -> None:
    """Each GATEWAY_ setting has a row in docs/reference.md, and each row is a setting."""
    from gateway.settings import GatewaySettings

    rows = set(re.findall(r"^\| `(GATEWAY_[A-Z_]+)` \|", _section("Settings"), flags=re.M))
    fields = {"GATEWAY_" + name.upper() for name in GatewaySettings.model_fields}
    fields.discard("GATEWAY_DEMO")  # the --demo flag, in the Command line table
    assert fields - rows == set(), "settings without a row in docs/reference.md"
    assert rows - fields == set(), "rows in docs/reference.md that are not settings"


async def test_the_reference_lists_every_metric_a_gateway_serves() -> None:
    """Every metric family a running gateway's /metrics shows is a row of the reference's
    Metrics table with the same type, and every row is one of them."""
    import aiohttp
    from prometheus_client import CollectorRegistry

    from gateway.observe.metrics import Metrics
    from gateway.settings import GatewaySettings
    from gateway.web.app import create_app

    gw = create_app(
        GatewaySettings(demo=True, policy_dir=ROOT / "policies"),
        metrics=Metrics(CollectorRegistry(auto_describe=True)),
    )
    port = await gw.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
            assert r.status == 200
            text = await r.text()
    finally:
        await gw.stop()
    served = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))
    for name in [n for n in served if n.endswith("_created")]:
        if served.get(name.removesuffix("_created") + "_total") == "counter":
            del served[name]  # the creation time of a counter without labels
    rows = re.findall(r"^\| `(llm_gateway_\w+)` \| (\w+) \|", _section("Metrics"), flags=re.M)
    assert len(served) >= 19, sorted(served)  # guard the scrape: every family shows
    assert dict(rows) == served, "docs/reference.md, Metrics: the table and /metrics differ"
    assert len(rows) == len(served), "a metric has two rows"


_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def _strings(node: ast.AST) -> set[str]:
    """The strings an expression may be: a literal, or either branch of ``a if c else b``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body) | _strings(node.orelse)
    return set()


def emitted_events() -> dict[str, str]:
    """Every log event name the code emits -> where: the first argument of a call on a
    module's logger (``structlog.get_logger`` or ``logging.getLogger``), a literal or a
    name bound to literals, and a stdlib record renamed (``record.msg = "..."``)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT).as_posix()
        loggers = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            if ast.unparse(node.value.func) in ("structlog.get_logger", "logging.getLogger")
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for fn in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
            bound: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            bound.setdefault(target.id, set()).update(_strings(node.value))
                        elif isinstance(target, ast.Attribute) and target.attr == "msg":
                            for name in _strings(node.value):
                                found.setdefault(name, f"{where}:{node.lineno}")
            for node in ast.walk(fn):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _LEVELS
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in loggers
                    and node.args
                ):
                    continue
                first = node.args[0]
                names = bound.get(first.id, set()) if isinstance(first, ast.Name) else set()
                names |= _strings(first)
                assert names, f"{where}:{node.lineno}: an event name the test cannot read"
                for name in names:
                    found.setdefault(name, f"{where}:{node.lineno}")
    return found


def test_the_reference_lists_every_log_event() -> None:
    """Every event name the code logs is a row of the reference's Log events tables, and
    every row is an event the code logs."""
    emitted = emitted_events()
    assert {"request_completed", "deployment_cooldown", "bad_http_request"} <= set(emitted)
    rows = [n for n in _first_cells(_section("Log events")) if n.islower()]
    missing = {name: where for name, where in emitted.items() if name not in rows}
    assert not missing, f"events not in docs/reference.md, Log events: {missing}"
    assert set(rows) <= set(emitted), set(rows) - set(emitted)


def test_the_reference_lists_every_endpoint() -> None:
    """Every path and method the gateway routes is a row of the reference's Endpoints table,
    and every row is routed."""
    from gateway.web import routes

    routed = {
        (method, path)
        for table in (routes.V1, routes.ROUTES, routes.METRICS)
        for path, methods in table.items()
        for method in methods
    }
    rows = set(re.findall(r"^\| `([A-Z]+)` \| `(/[^`]*)` \|", _section("Endpoints"), flags=re.M))
    assert rows == routed


def test_the_reference_lists_every_gateway_header() -> None:
    """Every ``x-gateway-*`` header the code reads or sets is named in the reference's
    header tables."""
    code = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "gateway").rglob("*.py"))
    names = set(re.findall(r"x-gateway-[a-z-]+[a-z]", code))
    assert {"x-gateway-attempts", "x-gateway-timeout"} <= names
    tables = _section("Request headers the gateway reads") + _section(
        "Response headers the gateway sets"
    )
    assert names <= set(_first_cells(tables)), names - set(_first_cells(tables))


def test_the_reference_lists_every_command_and_option() -> None:
    """Every subcommand of llm-gateway and each of its options is in the Command line table."""
    import argparse

    from gateway.cli import build_parser

    table = _section("Command line")
    rows = {line.split(" | ")[0].strip("| `").split()[0]: line for line in table.splitlines()
            if line.startswith("| `")}  # fmt: skip
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(rows) == set(sub.choices)
    for name, command in sub.choices.items():
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in rows[name], f"llm-gateway {name} {flag}"


# ---- what the docs say about tests --------------------------------------------------------

TEST_DOCS = (
    "README.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md")),
    "bench/README.md",
    "tests/clients/README.md",
)


def _xfail_tests() -> set[str]:
    """Names of the tests marked xfail: a decorator or a ``pytest.xfail(...)`` call in the
    test, or a module's ``pytestmark``."""
    marked: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_xfail = any(
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
            and "xfail" in ast.unparse(n.value)
            for n in tree.body
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "test"
            ):
                decorated = any("xfail" in ast.unparse(d) for d in node.decorator_list)
                called = any(
                    isinstance(n, ast.Call) and ast.unparse(n.func).endswith("xfail")
                    for n in ast.walk(node)
                )
                if module_xfail or decorated or called:
                    marked.add(node.name)
    return marked


def _paragraphs(doc: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each paragraph, list item or table row of a Markdown file."""
    start, lines = 1, []
    for n, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
        new_item = line.lstrip().startswith(("- ", "* ", "| ")) or re.match(r"\s*\d+\. ", line)
        if not line.strip() or new_item:
            if lines:
                yield start, " ".join(lines)
            start, lines = n, ([line] if line.strip() else [])
        else:
            lines.append(line)
    if lines:
        yield start, " ".join(lines)


def test_a_test_the_docs_call_xfail_is_marked_xfail() -> None:
    """Where a doc says a test is xfail (a known gap), it names the test and the test is
    marked xfail; a test that passes is not called a known gap."""
    marked = _xfail_tests()
    wrong = []
    for doc in TEST_DOCS:
        for line, text in _paragraphs(doc):
            if not re.search(r"xfail|expected to fail|expected failure", text, re.I):
                continue
            named = set(re.findall(r"\b(test_\w+)", text))
            if not named:
                wrong.append(f"{doc}:{line}: says xfail but names no test")
            wrong += [f"{doc}:{line}: {n} is not marked xfail" for n in sorted(named - marked)]
    assert not wrong, wrong


def test_the_xfail_check_reads_the_tests() -> None:
    """Guard the check above: it finds the test functions, and a test named in a paragraph
    that says xfail is reported when it is not marked."""
    assert "test_upstream_error_quoting_the_prompt_is_not_logged" not in _xfail_tests()
    doc = "docs/security.md"
    said = [t for _, t in _paragraphs(doc) if "test_check_alias_bomb_is_fast" in t]
    assert said and not any("xfail" in t.lower() for t in said)


def _named_paths(text: str) -> set[str]:
    """Backticked file paths (``a/b.py``, ``deploy/x.yaml``) and ``gateway.x.y`` modules."""
    names = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.split("::")[0].split(":")[0].rstrip(".,")
        is_file = re.fullmatch(r"[\w./-]+\.(py|md|yaml|yml|json|toml|conf)", token) and "/" in token
        is_module = re.fullmatch(r"\w+\.py", token)  # a bare module name: `watchdog.py`
        if is_file or is_module or re.fullmatch(r"gateway(\.\w+)+", token):
            names.add(token)
    return names


def _exists(name: str, here: Path) -> bool:
    if name.startswith("gateway.") and "/" not in name:
        parts = name.split(".")
        # a module, or an attribute of one (gateway.web.app.create_app)
        for cut in range(len(parts), 1, -1):
            base = ROOT.joinpath(*parts[:cut])
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                return True
        return False
    if name.startswith(("../", "/", "~")) or "shared/" in name:
        return True  # outside the repository
    if "/" not in name and name.endswith(".py"):  # a bare module name: one of ours somewhere
        return any(any((ROOT / top).rglob(name)) for top in ("gateway", "tests", "bench", "deploy"))
    bases = (here, ROOT, ROOT / "gateway", ROOT / "policies")
    return any((base / name).exists() for base in bases)


def test_every_path_and_module_a_doc_names_exists() -> None:
    """A doc that names a file or module (`gateway/x.py`, `policy/load.py`,
    `gateway.recovery.engine`) names one that exists."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
    missing = {
        f"{doc.relative_to(ROOT)}: {name}"
        for doc in docs
        for name in _named_paths(doc.read_text(encoding="utf-8"))
        if not _exists(name, doc.parent)
    }
    assert not missing, sorted(missing)
