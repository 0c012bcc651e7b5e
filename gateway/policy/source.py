"""One policy file: YAML -> plain data, and the line of every key in it.

Policy files are read with YAML 1.2 booleans (only ``true`` / ``false``: the ``on:``
key of ``retry`` stays a string), one document per file, duplicate keys refused, and
an index from every key path (``("teams", "a", "routes", 0)``) to its line, so a
problem found later (schema, references) is reported as ``file:line: key.path:
message``. Alias bombs cost their size on disk: a node reached again through an alias
is not walked again. :mod:`gateway.routing.load` builds the policy set from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from gateway.errors import Problem

__all__ = ["Loc", "Source", "format_loc", "parse", "parse_yaml"]

Loc = tuple[str | int, ...]

_MAX_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false are booleans.

    Under YAML 1.1 ``on``, ``off``, ``yes``, ``no`` are booleans, which would turn
    the ``on:`` key of ``retry`` and ``turn_retry`` into ``True``.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def parse_yaml(text: str) -> Any:
    """One YAML document as plain data, with the loader policy files use (YAML 1.2 booleans)."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@dataclass(slots=True)
class Source:
    rel: str
    display: str
    base: str  # the absolute folder relative provider file paths start from
    data: Any = None
    lines: dict[Loc, int] = field(default_factory=dict)
    ok: bool = True  # parsed (schema problems do not clear it)

    def line(self, loc: Loc) -> int:
        """The line of the longest prefix of ``loc`` that exists in the file."""
        for n in range(len(loc), -1, -1):
            found = self.lines.get(loc[:n])
            if found is not None:
                return found
        return 1

    def problem(self, loc: Loc, message: str) -> Problem:
        return Problem(self.display, self.line(loc), f"{format_loc(loc)}: {message}")


def format_loc(loc: Loc) -> str:
    """``("teams", "a", "routes", 0, "policy")`` -> ``teams.a.routes[0].policy``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def parse(src: Source, raw: bytes, problems: list[Problem]) -> None:
    """Fill ``src.data`` and ``src.lines`` from ``raw``; clear ``src.ok`` on a syntax problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        src.ok = False
        line = raw[: exc.start].count(b"\n") + 1
        problems.append(Problem(src.display, line, "not valid UTF-8"))
        return
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return
        before = len(problems)
        _index(node, (), src, problems, 0, set())
        if len(problems) > before:  # duplicate keys: the data would be ambiguous
            src.ok = False
            return
        src.data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        src.ok = False
        mark = exc.problem_mark or exc.context_mark
        what = exc.problem or "invalid YAML"
        if exc.context and what.startswith("but "):  # "expected X" / "but found Y"
            what = f"{exc.context} {what}"
        elif exc.context:
            what += f" ({exc.context})"
        problems.append(
            Problem(src.display, mark.line + 1 if mark else 1, f"YAML syntax error: {what}")
        )
    except yaml.YAMLError as exc:  # e.g. a NUL or control character (ReaderError)
        src.ok = False
        problems.append(Problem(src.display, 1, f"YAML syntax error: {exc}"))
    except (RecursionError, ValueError) as exc:  # absurd nesting; integers past Python's limit
        src.ok = False
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        problems.append(Problem(src.display, 1, f"cannot read this YAML: {what}"))
    finally:
        if loader is not None:
            loader.dispose()


def _key_of(node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:str":
            return node.value
        try:
            return _Loader("").construct_object(node)
        except yaml.YAMLError:
            return node.value
    return None  # a mapping or list used as a key; the schema rejects it


def _index(
    node: yaml.Node,
    loc: Loc,
    src: Source,
    problems: list[Problem],
    depth: int,
    seen_nodes: set[int],
) -> None:
    """Record the line of every key and list item; report duplicate keys.

    A node reached again through an alias is not walked again (``seen_nodes``), so an
    alias bomb costs its size on disk, not its expansion.
    """
    src.lines.setdefault(loc, node.start_mark.line + 1)
    if depth > _MAX_DEPTH or id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`
                _index(vnode, loc, src, problems, depth + 1, seen_nodes)
                continue
            key = _key_of(knode)
            line = knode.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # unhashable key
                continue
            if first is not None:
                problems.append(
                    Problem(
                        src.display,
                        line,
                        f"{format_loc((*loc, key))}: duplicate key (first at line {first})",
                    )
                )
                continue
            seen[key] = line
            src.lines[(*loc, key)] = line
            _index(vnode, (*loc, key), src, problems, depth + 1, seen_nodes)
            src.lines[(*loc, key)] = line  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, (*loc, i), src, problems, depth + 1, seen_nodes)
