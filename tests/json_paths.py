"""Where a fuzz test may put a mutated value: every path into a decoded JSON value."""

from __future__ import annotations

from typing import Any


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) to a value inside ``obj``, ``obj`` itself excluded."""
    items: Any = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    out: list[tuple[Any, ...]] = []
    for k, v in items:
        out.append((*prefix, k))
        out.extend(paths(v, (*prefix, k)))
    return out
