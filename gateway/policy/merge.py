"""Deep merge of plain data, as used for a route's ``override`` over its named policy."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``override`` laid over it; neither input is mutated.

    Mappings merge key by key, recursively; anything else in ``override`` (a list,
    a scalar, ``None``) replaces the value in ``base`` whole. Lists are not
    concatenated: ``override: {fallback: {chain: [b]}}`` means the chain is ``[b]``.
    """
    merged: dict[str, Any] = {key: copy.deepcopy(value) for key, value in base.items()}
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
