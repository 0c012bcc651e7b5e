"""The house's naming rules, checked on the code: one class per name, one exceptions
module, a root that holds only the entry points (docs/architecture.md)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"

#: What the root of gateway/ may hold: the entry points, the settings and the exceptions.
ROOT = {"__init__.py", "__main__.py", "cli.py", "settings.py", "errors.py"}


def _classes() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(GATEWAY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(GATEWAY)))
    return where


def test_one_class_per_name() -> None:
    """No two classes of gateway/ share a name: a reader who meets ``Limits`` knows which."""
    twice = {name: paths for name, paths in _classes().items() if len(paths) > 1}
    assert twice == {}


def _is_exception(node: ast.ClassDef, known: set[str]) -> bool:
    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    return bool(bases & known) or any(b.endswith(("Error", "Exception")) for b in bases)


def test_every_exception_is_in_the_exceptions_module() -> None:
    """Every exception class of gateway/ is defined in gateway/errors.py, whose docstring
    draws the tree (what each means, who raises it, who catches it)."""
    errors = ast.parse((GATEWAY / "errors.py").read_text())
    known = {"Exception", "BaseException", "ValueError", "ConnectionError", "RuntimeError"}
    known |= {n.name for n in ast.walk(errors) if isinstance(n, ast.ClassDef)}
    elsewhere = [
        f"{path.relative_to(GATEWAY)}: {node.name}"
        for path in sorted(GATEWAY.rglob("*.py"))
        if path.name != "errors.py" and "testing" not in path.parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and _is_exception(node, known)
    ]
    assert elsewhere == []
    doc = ast.get_docstring(errors) or ""
    for node in ast.walk(errors):
        if isinstance(node, ast.ClassDef) and _is_exception(node, known):
            assert node.name in doc, f"{node.name} is missing from the tree in errors.py"


def test_a_planted_exception_elsewhere_is_caught(tmp_path: Path) -> None:
    """The check above sees an exception class defined outside errors.py."""
    planted = ast.parse("class Oops(ValueError):\n    pass\n")
    node = next(n for n in ast.walk(planted) if isinstance(n, ast.ClassDef))
    assert _is_exception(node, {"ValueError"})


def test_the_root_holds_only_the_entry_points() -> None:
    """gateway/ itself holds the entry points, the settings and the exceptions; every other
    module lives in the folder of its layer."""
    assert {p.name for p in GATEWAY.glob("*.py")} <= ROOT
