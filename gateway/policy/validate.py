"""Per-file schema validation: each entry of a parsed policy file -> a validated model.

The sections of a file (``providers``, ``models``, ``policies``, ``teams``) and the
entries under them are validated one by one against :mod:`gateway.policy.schema`;
every pydantic error becomes a ``file:line: key.path: message`` :class:`Problem`.
Provider certificate files are made absolute (against the file's folder) and checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gateway.errors import Problem
from gateway.policy.cert_files import check_files
from gateway.policy.egress import FILE_FIELDS
from gateway.policy.schema import Model, Policy, PolicyFile, Provider, Team
from gateway.policy.source import Loc, Source

#: Top-level sections of a file, in the order they are checked; their value types
#: are those of :class:`PolicyFile` (a test keeps the two in step).
SECTIONS: dict[str, type[BaseModel]] = {
    "providers": Provider,
    "models": Model,
    "policies": Policy,
    "teams": Team,
}
KIND = {"providers": "provider", "models": "model", "policies": "policy", "teams": "team"}


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    if kind in ("value_error", "assertion_error"):
        ctx = err.get("ctx") or {}
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    msg = err["msg"]
    value = err.get("input")
    if isinstance(value, str | int | float | bool) and "keys" not in err["loc"]:
        msg += f", got {value!r}"
    return msg


def _clean_loc(loc: tuple[int | str, ...]) -> Loc:
    """Drop pydantic's own segments (``[key]``, ``function-after[...]``) from an error location."""
    return tuple(p for p in loc if not (isinstance(p, str) and (p == "[key]" or "[" in p)))


def schema_problems(src: Source, prefix: Loc, exc: ValidationError) -> Iterator[Problem]:
    for err in exc.errors():
        yield src.problem((*prefix, *_clean_loc(err["loc"])), _message(err))


@dataclass(frozen=True, slots=True)
class Entry:
    value: Any  # the validated model
    src: Source
    loc: Loc  # (section, name)

    @property
    def where(self) -> str:
        return f"{self.src.display}:{self.src.line(self.loc)}"


def validate_file(
    src: Source, problems: list[Problem], invalid: dict[str, set[str]]
) -> list[Entry]:
    """Validate each entry of each section; return the valid ones."""
    data = src.data
    if data is None:
        return []
    if not isinstance(data, dict):
        problems.append(
            Problem(
                src.display,
                src.line(()),
                "(top level): a policy file is a mapping with any of "
                + ", ".join(f"{s}:" for s in SECTIONS),
            )
        )
        return []
    entries: list[Entry] = []
    for section, body in data.items():
        model = SECTIONS.get(section) if isinstance(section, str) else None
        if model is None:
            problems.append(
                src.problem((section,), "unknown key (expected " + ", ".join(SECTIONS) + ")")
            )
            continue
        if body is None:  # `teams:` with everything below commented out
            continue
        if not isinstance(body, dict):
            problems.append(src.problem((section,), f"must be a mapping of {KIND[section]} names"))
            continue
        for name, raw in body.items():
            if not isinstance(name, str) or not name:
                problems.append(
                    src.problem((section, name), f"{KIND[section]} name must be a non-empty string")
                )
                continue
            try:
                value = model.model_validate({} if raw is None else raw)
            except ValidationError as exc:
                problems.extend(schema_problems(src, (section, name), exc))
                invalid[section].add(name)
                continue
            if isinstance(value, Provider):
                checked = _provider_files(src, (section, name), value, problems)
                if checked is None:
                    invalid[section].add(name)
                    continue
                value = checked
            entries.append(Entry(value, src, (section, name)))
    return entries


def _provider_files(
    src: Source, loc: Loc, provider: Provider, problems: list[Problem]
) -> Provider | None:
    """``provider`` with absolute file paths, or ``None`` when a file cannot be used."""
    updates: dict[str, str] = {}
    for name in FILE_FIELDS:
        path = getattr(provider, name)
        if path is not None and not os.path.isabs(path):
            updates[name] = os.path.abspath(os.path.join(src.base, path))
    if updates:
        provider = provider.model_copy(update=updates)
    found = check_files(provider)
    for name, message in found:
        problems.append(src.problem((*loc, name), message))
    return None if found else provider


# Keep the declared file format and the sections checked here in step.
assert set(SECTIONS) == set(PolicyFile.model_fields), "SECTIONS out of step with PolicyFile"
