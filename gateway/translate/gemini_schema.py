r"""JSON Schema <-> Gemini's ``Schema`` (a subset of OpenAPI 3.0), as Gemini's
``functionDeclarations[].parameters`` and ``generationConfig.responseSchema`` take it.

:func:`to_gemini` writes one form that the Gemini API and Vertex AI both take. Keywords are
mapped (``type`` upper-cased; a list of types, a null branch or value as ``nullable`` and
an ``anyOf``; ``oneOf`` as ``anyOf``, as Gemini reads ``responseJsonSchema``; ``$ref``,
``allOf`` inlined; ``const`` as ``enum``, numbers as strings as in Vertex's example; an
integer's exclusive bound as the next; no type: the one its keywords tell, or any value),
kept (:data:`_KEPT`, :data:`_FORMATS`), dropped and named (:data:`_NAMED`, other formats,
a number's exclusive bound made inclusive, a boolean ``enum``: the answer keeps its shape
and types, a value may miss a bound), dropped silently (what JSON Schema ignores:
annotations, unknown keywords, those of another type; ``additionalProperties: false``,
which closes every object in OpenAI's strict mode and has no field on the Gemini API), or
refused (:data:`_REFUSED`, :data:`_NEVER`, tuples, a recursive or outside ``$ref``,
``allOf`` members that disagree, object ``enum`` values, a schema nothing or only null
matches, a wrong JSON type, past :data:`MAX_NODES` / :data:`MAX_DEPTH`: the answer could
take a shape the client forbids). Gemini wants a type on a schema without ``anyOf``,
``items`` on an array and each ``required`` name declared (of any value where the client
gave none); Vertex takes nothing beside ``anyOf`` (a node's description, title, nullable
go on each branch); ``propertyOrdering`` keeps the client's order, as google-genai adds
it. A path names a keyword where the client wrote it (what ``allOf`` or ``$ref``'s
siblings merged: at the merging node).
:func:`from_gemini` goes back (``nullable`` as a null type or branch, ``propertyOrdering``
as the order of ``properties``, int64 given as text as numbers).

Sources: the Gemini API ``Schema`` and ``Type`` (https://ai.google.dev/api/caching#Schema);
Vertex AI's (https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/Schema);
the structured output guide (https://ai.google.dev/gemini-api/docs/structured-output),
``GenerationConfig.responseJsonSchema``; googleapis/python-genai ``_transformers.py``
(``process_schema``, ``handle_null_fields``), ``types.py`` (``Schema.from_json_schema``);
BerriAI/litellm ``litellm/llms/vertex_ai/common_utils.py`` (``_build_vertex_schema``,
``convert_anyof_null_to_nullable``, ``_filter_anyof_fields``); Gemini's answers as
reported: ``Unknown name "$schema" ... Cannot find field``, ``items: missing field``,
``type: must be specified when not using one_of, any_of or all_of fields``,
``required[0]: property is not defined``; Vertex's ``When using any_of, it must be the
only field set``. Pure: no I/O; the input is never changed.
"""

from __future__ import annotations

import math
from itertools import chain
from typing import Any, NoReturn
from urllib.parse import unquote

from gateway.errors import Refused
from gateway.translate.ir import Dropped

#: The most schemas one conversion writes (each ``$ref`` anew) and the deepest they nest.
MAX_NODES, MAX_DEPTH = 5000, 64

_TYPES = {t: t.upper() for t in ("string", "number", "integer", "boolean", "array", "object")}
_KINDS = ("boolean", "string", "integer", "number")
_PLAIN = frozenset(("type", "description", "title", "default", "example"))
#: Gemini's type names, read in any case (lowered), -> JSON Schema's; the enum's unset value
#: (proto3 JSON names it after the enum) -> no type.
_FROM_TYPES = {k: k for k in _TYPES} | {"null": "null", "type_unspecified": ""}
#: Kept as they are: ``description title default example nullable properties required
#: items pattern minimum maximum`` and these counts, by type.
_KEPT = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems"),
         "object": ("minProperties", "maxProperties")}  # fmt: skip
_FORMATS = {"string": ("date-time", "enum"), "integer": ("int32", "int64"),
            "number": ("float", "double")}  # fmt: skip
_NAMED = {"number": ("multipleOf",), "integer": ("multipleOf",),
          "array": ("uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems"),
          "object": ("additionalProperties", "unevaluatedProperties", "patternProperties",
                     "propertyNames", "dependentRequired")}  # fmt: skip
_REFUSED = {"array": ("prefixItems",), "object": ("dependentSchemas", "dependencies")}
_NEVER = ("not", "if", "$dynamicRef", "$recursiveRef")
#: The keywords that tell the type of a schema that names none.
_IMPLIES = {t: (*_KEPT.get(t, ()), *_NAMED.get(t, ()), *_REFUSED.get(t, ()), *more)
            for t, more in (("object", ("properties", "required")),
                            ("array", ("items",)), ("string", ("pattern",)),
                            ("number", ("minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum")))}  # fmt: skip
#: Every keyword that constrains values; any other describes them.
_CONSTRAINTS = frozenset(chain(_NEVER, *_IMPLIES.values(), (
    "type", "enum", "const", "nullable", "anyOf", "oneOf", "allOf", "$ref", "format")))  # fmt: skip
_S = dict[str, Any]
_STRS = "an array of strings"
_IS = {"a string": lambda v: isinstance(v, str), "a boolean": lambda v: isinstance(v, bool),
       "an object": lambda v: isinstance(v, dict), "an array": lambda v: isinstance(v, list),
       _STRS: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)}  # fmt: skip


def to_gemini(schema: Any, path: str, drops: Dropped | None = None) -> _S:
    """The Gemini ``Schema`` for the JSON Schema at ``path`` in the request (as
    ``tools[0].function.parameters``); the keywords dropped are named in ``drops``.
    Raises :class:`~gateway.errors.Refused` naming a keyword with no equivalent."""
    return _ToGemini(schema, path, Dropped() if drops is None else drops).node(schema, path, 0)


class _ToGemini:
    __slots__ = ("drops", "expanding", "nodes", "root", "root_path")

    def __init__(self, root: Any, root_path: str, drops: Dropped) -> None:
        self.root, self.root_path, self.drops = root, root_path, drops
        self.expanding, self.nodes = [id(root)], 0  # the schemas being inlined; written

    def node(self, s: Any, path: str, depth: int) -> _S:
        if s is True or s is False:
            return _any() if s else _refuse(path, "a schema no value matches")
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            _refuse(path, f"a schema of over {MAX_NODES} schemas or {MAX_DEPTH} levels")
        if _as(s, path, "an object").keys() <= _PLAIN and s.get("type") in _KINDS:  # quickly
            return _describe({"type": _TYPES[s["type"]]}, s, path)
        if "$ref" in s:
            return self.ref(s, path, depth)
        if "allOf" in s:  # merged (a member's $ref followed), then converted
            return self.node(self.all_of(s, path), path, depth + 1)
        if never := [k for k in _NEVER if k in s]:
            _refuse(f"{path}.{never[0]}", "this keyword")
        if "oneOf" in s:  # as Gemini reads it in responseJsonSchema
            s = _merge({k: v for k, v in s.items() if k != "oneOf"}, {"anyOf": s["oneOf"]}, path)
        return self.any_of(s, path, depth) if "anyOf" in s else self.typed(s, path, depth)

    def lookup(self, s: _S, path: str) -> tuple[_S, str]:  # the target of $ref, its path
        ref, where = s["$ref"], f"{path}.$ref"
        if not isinstance(ref, str) or (not ref.startswith("#/") and ref != "#"):
            _refuse(where, "a reference to an anchor or outside the schema")
        target, at = self.root, self.root_path
        try:
            for seg in unquote(ref[2:]).split("/") if ref != "#" else ():
                seg = seg.replace("~1", "/").replace("~0", "~")
                target, at = target[int(seg) if isinstance(target, list) else seg], f"{at}.{seg}"
        except (KeyError, IndexError, ValueError, TypeError):
            target = None
        if not isinstance(target := {} if target is True else target, dict):
            raise Refused(where, f"{ref!r} is not a schema of this request")
        if id(target) in self.expanding:
            _refuse(where, "a recursive schema")
        return target, at

    def ref(self, s: _S, path: str, depth: int) -> _S:
        target, at = self.lookup(s, path)
        rest = {k: v for k, v in s.items() if k != "$ref"}
        self.expanding.append(id(target))
        if any(k in _CONSTRAINTS for k in rest):
            out = self.node(_merge(rest, target, path), path, depth + 1)
        else:  # the usual: a description beside a definition's $ref
            out = _describe(self.node(target, at, depth + 1), rest, path)
        self.expanding.pop()
        return out

    def all_of(self, s: _S, path: str) -> _S:
        out = {k: v for k, v in s.items() if k != "allOf"}
        for i, m in enumerate(_as(s["allOf"], f"{path}.allOf", "an array")):
            where = f"{path}.allOf[{i}]"
            if isinstance(m, dict) and "$ref" in m:
                rest = {k: v for k, v in m.items() if k != "$ref"}
                m = _merge(rest, self.lookup(m, where)[0], where)
            out = out if m is True else _merge(out, _as(m, where, "an object"), where)
        return out

    def any_of(self, s: _S, path: str, depth: int) -> _S:
        branches = _as(s["anyOf"], f"{path}.anyOf", "an array")
        rest = {k: v for k, v in s.items() if k in _CONSTRAINTS and k not in ("anyOf", "nullable")}
        nullable, out = _as(s.get("nullable", False), f"{path}.nullable", "a boolean"), list[_S]()
        for i, b in enumerate(branches):
            if _only_null(b):
                nullable = True
                continue
            if rest and (b is True or isinstance(b, dict)):  # the node's keywords apply too
                b = _merge(rest, {} if b is True else b, f"{path}.anyOf[{i}]")
            conv = self.node(b, f"{path}.anyOf[{i}]", depth + 1)
            out.extend(conv["anyOf"] if list(conv) == ["anyOf"] else [conv])
        out = out or _refuse(f"{path}.anyOf", "a schema only null matches")
        return _describe(out[0] if len(out) == 1 else {"anyOf": out}, s, path, nullable)

    def typed(self, s: _S, path: str, depth: int) -> _S:
        types, values, nullable, key = _kinds(s, path)
        types = [t for t in types if t != "integer" or "number" not in types]  # one is enough
        if not types and (values is not None or "type" in s):
            _refuse(f"{path}.{key}", "no value of the type" if values else "only null")
        out = [self.branch(s, t, path, depth, values, key) for t in types] or [_any()]
        return _describe(out[0] if len(out) == 1 else {"anyOf": out}, s, path, nullable)

    def branch(self, s: _S, t: str, path: str, depth: int, values: Any, key: str) -> _S:
        """The schema of the values of type ``t`` that ``s`` allows."""
        out: _S = {"type": _TYPES[t]}
        if values is not None and (enum := self.enum(values, t, f"{path}.{key}")) is not None:
            out["enum"] = enum
        if (fmt := s.get("format")) in _FORMATS.get(t, ()):
            out["format"] = fmt
        elif fmt is not None:
            self.drops.add(f"{path}.format")
        out.update((k, _num(s[k], f"{path}.{k}", count=True)) for k in _KEPT.get(t, ()) if k in s)
        if refused := [k for k in _REFUSED.get(t, ()) if k in s]:
            _refuse(f"{path}.{refused[0]}", "this keyword")
        for k in _NAMED.get(t, ()):  # true constrains in these two only
            if s.get(k) not in (None, False, {}, k not in ("uniqueItems", "contains")):
                self.drops.add(f"{path}.{k}")
        if t in ("number", "integer"):
            self.bounds(s, out, t, path)
        elif t in ("object", "array"):
            (self.object if t == "object" else self.array)(s, out, path, depth)
        elif t == "string" and "pattern" in s:
            out["pattern"] = _as(s["pattern"], f"{path}.pattern", "a string")
        return out

    def enum(self, values: list[Any], t: str, path: str) -> list[str] | None:
        fit = [v for v in values if _fits(v, t)]
        if t == "boolean" and len(set(fit)) < 2:
            self.drops.add(path)  # BOOLEAN takes no enum: any boolean
        if t in ("string", "boolean"):
            return fit if t == "string" else None
        return [str(int(v)) if t == "integer" else repr(v) for v in fit]

    def bounds(self, s: _S, out: _S, t: str, path: str) -> None:
        out.update((k, _num(s[k], f"{path}.{k}")) for k in ("minimum", "maximum") if k in s)
        for key, bound, low in (("exclusiveMinimum", "minimum", True),
                                ("exclusiveMaximum", "maximum", False)):  # fmt: skip
            if (v := s.get(key)) is None or v is False:
                continue
            v = _num(s.get(bound) if v is True else v, f"{path}.{key}")  # True: draft 4
            if t == "integer":
                v = math.floor(v) + 1 if low else math.ceil(v) - 1
            else:
                self.drops.add(f"{path}.{key}")
            out[bound] = max(out.get(bound, v), v) if low else min(out.get(bound, v), v)

    def object(self, s: _S, out: _S, path: str, depth: int) -> None:
        props = _as(s.get("properties", {}), f"{path}.properties", "an object")
        required = _as(s.get("required", []), f"{path}.required", _STRS)
        conv = {n: self.node(sub, f"{path}.properties.{n}", depth + 1) for n, sub in props.items()}
        conv |= {n: _any() for n in required if n not in conv}  # Gemini wants them declared
        if conv:
            out["properties"] = conv
        if required:
            out["required"] = list(dict.fromkeys(required))
        if len(conv) > 1:
            out["propertyOrdering"] = list(conv)

    def array(self, s: _S, out: _S, path: str, depth: int) -> None:
        if isinstance(items := s.get("items", True), list):
            _refuse(f"{path}.items", "a tuple (a schema per position)")
        out["items"] = self.node(items, f"{path}.items", depth + 1)


def _any() -> _S:
    """Any JSON value (but null), as Gemini's Schema can say it: each type in turn."""
    leaves = ("STRING", "NUMBER", "BOOLEAN", "OBJECT")
    items = {"anyOf": [{"type": t} for t in leaves]}
    return {"anyOf": [*({"type": t} for t in leaves), {"type": "ARRAY", "items": items}]}


def _kinds(s: _S, path: str) -> tuple[list[str], list[Any] | None, bool, str]:
    """The types ``s`` allows but null, its enum (or None), if it allows null, and why."""
    t = s.get("type")
    names: list[Any] = [t] if isinstance(t, str) else t if isinstance(t, list) else [None]
    if t is not None and not all(n in _TYPES or n == "null" for n in map(str, names)):
        raise Refused(f"{path}.type", "must be a JSON Schema type or a list of them")
    null = "null" in names or _as(s.get("nullable", False), f"{path}.nullable", "a boolean")
    implied = t is None and [k for k, keys in _IMPLIES.items() if not s.keys().isdisjoint(keys)]
    types = implied or [n for n in dict.fromkeys(names) if n in _TYPES]
    key = "const" if "const" in s else "enum"
    values = [s["const"]] if key == "const" else s.get("enum")
    if values is None:
        return types, None, null, "type"
    if any(isinstance(v, dict | list) for v in _as(values, f"{path}.{key}", "an array")):
        _refuse(f"{path}.{key}", "a value that is an object or an array")
    null, values = (null or t is None) and None in values, [v for v in values if v is not None]
    if t is None:
        types = [next(k for k in _KINDS if _fits(v, k)) for v in values]
    return [k for k in dict.fromkeys(types) if any(_fits(v, k) for v in values)], values, null, key


def _fits(v: Any, t: str) -> bool:
    if t in ("string", "boolean"):
        return isinstance(v, str if t == "string" else bool)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    return t == "number" or isinstance(v, int) or v.is_integer()


def _only_null(b: Any) -> bool:
    return isinstance(b, dict) and (
        b.get("type") in ("null", ["null"]) or b.get("const", 0) is None or b.get("enum") == [None]
    )


def _describe(out: _S, s: _S, path: str, nullable: bool = False) -> _S:
    """``out`` with the node ``s``'s description, title, default, example and nullable; an
    ``anyOf`` (alone, for Vertex) gives each branch those it lacks, but the default."""
    notes: _S = {k: s[k] for k in ("description", "title", "default", "example") if k in s}
    for k in notes.keys() & {"description", "title"}:
        _as(notes[k], f"{path}.{k}", "a string")
    notes |= {"nullable": True} if nullable else {}
    if list(out) != ["anyOf"]:
        return out | notes
    notes.pop("default", None)
    for b in out["anyOf"]:
        b.update({k: v for k, v in notes.items() if k not in b or k == "nullable"})
    return out


def _merge(a: Any, b: Any, path: str) -> Any:
    """``a`` and ``b`` as one schema (``a``'s descriptions win), or refused."""
    if a == b:
        return a
    if not isinstance(a, dict) or not isinstance(b, dict):
        _refuse(path, "schemas that disagree (allOf, or beside $ref or anyOf)")
    out = dict(a)
    for key, value in b.items():
        if key not in out or key not in _CONSTRAINTS or out[key] == value:
            out.setdefault(key, value)
            continue
        mine, at = out[key], f"{path}.{key}"
        if key == "required":
            out[key] = list(dict.fromkeys(_as(mine, at, _STRS) + _as(value, at, _STRS)))
        elif key == "properties" and isinstance(mine, dict) and isinstance(value, dict):
            out[key] = mine | {n: _merge(mine.get(n, v), v, f"{at}.{n}") for n, v in value.items()}
        elif key == "type" and (both := [t for t in _listed(mine) if t in _listed(value)]):
            out[key] = both
        else:
            _refuse(at, "schemas that disagree (allOf, or beside $ref or anyOf)")
    return out


def _listed(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _refuse(path: str, what: str) -> NoReturn:
    raise Refused(path, f"{what} is not available on this model")


def _as(v: Any, path: str, what: str) -> Any:
    """``v``, refused unless it is ``what`` (a key of :data:`_IS`)."""
    if not _IS[what](v):
        raise Refused(path, f"must be {what}")
    return v


def _num(v: Any, path: str, count: bool = False, written: bool = False) -> Any:
    """A finite number (``count``: a count; ``written``: also as text, as int64 goes)."""
    n = _parse(v) if written and isinstance(v, str) else v
    n = int(n) if count and isinstance(n, float) and n.is_integer() else n
    bad = isinstance(n, bool) or not isinstance(n, int if count else int | float)
    if bad or (count and n < 0) or (isinstance(n, float) and not math.isfinite(n)):
        raise Refused(path, "must be a non-negative integer" if count else "must be a number")
    return n


def _parse(v: str) -> Any:
    try:
        n = int(v) if v.lstrip("-").isascii() and v.lstrip("-").isdigit() else float(v)
    except ValueError:
        return v
    return n if isinstance(n, int) or math.isfinite(n) else v


def from_gemini(schema: Any, path: str = "schema", depth: int = 0) -> _S:
    """The JSON Schema for the Gemini ``Schema`` at ``path`` in the request. Raises
    :class:`~gateway.errors.Refused` for a value of the wrong type, naming it."""
    if depth > MAX_DEPTH:
        _refuse(path, f"a schema of over {MAX_DEPTH} levels")
    out: _S = {}
    for key, v in _as(schema, path, "an object").items():
        where, deeper = f"{path}.{key}", depth + 1
        if key == "properties":
            subs = _as(v, where, "an object").items()
            out[key] = {n: from_gemini(sub, f"{where}.{n}", deeper) for n, sub in subs}
        elif key == "anyOf":
            subs = enumerate(_as(v, where, "an array"))
            out[key] = [from_gemini(b, f"{where}[{i}]", deeper) for i, b in subs]
        elif key == "items" or (key == "additionalProperties" and not isinstance(v, bool)):
            out[key] = from_gemini(v, where, deeper)
        elif (read := _scalar(key, v, where)) is not None:
            out[read[0]] = read[1]
    if (order := out.pop("propertyOrdering", None)) and "properties" in out:
        props = out["properties"]
        out["properties"] = {**{n: props[n] for n in order if n in props}, **props}
    if out.get("type") in ("integer", "number") and "enum" in out:
        out["enum"] = [_parse(v) for v in out["enum"]]
    if out.pop("nullable", False) and "anyOf" in out:
        out["anyOf"].append({"type": "null"})
    elif schema.get("nullable") is True and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"].append(None)
    return out


def _scalar(key: str, v: Any, path: str) -> tuple[str, Any] | None:
    if key == "type":
        if (name := _FROM_TYPES.get(_as(v, path, "a string").lower())) is None:
            raise Refused(path, "must be a Gemini Type (STRING, NUMBER, INTEGER, ...)")
        return ("type", name) if name else None
    if key in ("description", "title", "pattern", "format"):
        text = _as(v, path, "a string")
        return None if key == "format" and text == "enum" else (key, text)
    if key in ("enum", "required", "propertyOrdering"):
        return key, list(_as(v, path, _STRS))
    if key in ("minimum", "maximum") or key in chain(*_KEPT.values()):
        return key, _num(v, path, count=key not in ("minimum", "maximum"), written=True)
    if key in ("nullable", "additionalProperties"):
        return key, _as(v, path, "a boolean")
    return {"default": ("default", v), "example": ("examples", [v])}.get(key)
