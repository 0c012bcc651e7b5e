"""JSON Schema <-> Gemini's ``Schema`` (gateway/translate/gemini_schema.py): the schemas real
clients send (the OpenAI SDK's strict tools, pydantic models, Claude Code, Codex and MCP
tools) with the Gemini schema each becomes and the keywords it names as dropped; what is
refused, by the path of the keyword; Gemini clients' schemas (the Gemini CLI's, the
google-genai SDK's) back to JSON Schema; round trips; and properties: ``to_gemini`` raises
nothing but ``Refused`` and never changes its input, ``from_gemini`` reads every
well-typed Gemini schema."""

from __future__ import annotations

import contextlib
import copy
import enum
from typing import Any, Literal

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from gateway.errors import Refused
from gateway.translate.gemini_schema import MAX_DEPTH, from_gemini, to_gemini
from gateway.translate.ir import Dropped

pytestmark = pytest.mark.fast

P = "tools[0].function.parameters"
ANY_LEAVES = [{"type": t} for t in ("STRING", "NUMBER", "BOOLEAN", "OBJECT")]
ANY = {"anyOf": [*ANY_LEAVES, {"type": "ARRAY", "items": {"anyOf": ANY_LEAVES}}]}
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def gemini(schema: Any, path: str = P) -> tuple[dict[str, Any], list[str]]:
    """The Gemini schema and the names dropped; the input checked unchanged."""
    before = copy.deepcopy(schema)
    drops = Dropped()
    out = to_gemini(schema, path, drops)
    assert schema == before
    orjson.dumps(out)
    return out, drops.names


# ---- the schemas clients send ---------------------------------------------------------


class Unit(enum.StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Location(BaseModel):
    city: str = Field(description="City name")
    country: str | None = None


class GetWeather(BaseModel):
    """Get the weather for a location."""

    location: Location
    unit: Unit
    days: int = Field(ge=1, le=14)
    mode: Literal["brief"]
    detail: Literal["low", "high"] = "low"
    ratio: float = Field(gt=0, lt=1)
    count: int = Field(gt=0)


LOCATION = {
    "type": "OBJECT",
    "properties": {
        "city": {"type": "STRING", "description": "City name", "title": "City"},
        "country": {"type": "STRING", "title": "Country", "nullable": True},
    },
    "required": ["city", "country"],
    "propertyOrdering": ["city", "country"],
    "title": "Location",
}
WEATHER_PROPERTIES = {
    "location": LOCATION,
    "unit": {"type": "STRING", "enum": ["celsius", "fahrenheit"], "title": "Unit"},
    "days": {"type": "INTEGER", "minimum": 1, "maximum": 14, "title": "Days"},
    "mode": {"type": "STRING", "enum": ["brief"], "title": "Mode"},
    "detail": {"type": "STRING", "enum": ["low", "high"], "title": "Detail", "default": "low"},
    "ratio": {"type": "NUMBER", "minimum": 0, "maximum": 1, "title": "Ratio"},
    "count": {"type": "INTEGER", "minimum": 1, "title": "Count"},
}
WEATHER_ORDER = ["location", "unit", "days", "mode", "detail", "ratio", "count"]


def test_the_openai_sdk_strict_tool_of_a_pydantic_model() -> None:
    """``openai.pydantic_function_tool``: ``$defs`` / ``$ref``, ``additionalProperties: false``
    on every object, an Optional as ``anyOf`` with null, an Enum, a one-value Literal as
    ``const``, ``gt`` as exclusive bounds (an integer's exact, a number's named)."""
    tool = openai.pydantic_function_tool(GetWeather)
    assert tool["function"]["strict"] is True
    out, names = gemini(tool["function"]["parameters"])
    assert out == {
        "type": "OBJECT",
        "properties": WEATHER_PROPERTIES,
        "required": WEATHER_ORDER,
        "propertyOrdering": WEATHER_ORDER,
        "description": "Get the weather for a location.",
        "title": "GetWeather",
    }
    assert names == [
        f"{P}.properties.ratio.exclusiveMinimum",
        f"{P}.properties.ratio.exclusiveMaximum",
    ]


def test_a_pydantic_models_json_schema_as_a_response_format() -> None:
    """``model_json_schema()`` (a ``response_format``): defaults kept, the null default of an
    Optional too; only the fields without one required."""
    path = "response_format.json_schema.schema"
    out, _ = gemini(GetWeather.model_json_schema(), path)
    location = {**LOCATION, "required": ["city"]}
    location["properties"] = {**LOCATION["properties"]}
    location["properties"]["country"] = {**location["properties"]["country"], "default": None}
    assert out["properties"] == {**WEATHER_PROPERTIES, "location": location}
    assert out["required"] == ["location", "unit", "days", "mode", "ratio", "count"]


# In the shape Claude Code's tools arrive (zod-to-json-schema, draft 7: ``$schema``, every
# object closed), Codex's function tools, and MCP servers' (TypeScript with zod, Python with
# pydantic, and one that leaves types out).
CLAUDE_CODE_TODO = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    "activeForm": {"type": "string", "minLength": 1},
                },
                "required": ["content", "status", "activeForm"],
                "additionalProperties": False,
            },
            "description": "The updated todo list",
        }
    },
    "required": ["todos"],
    "additionalProperties": False,
    "$schema": DRAFT7,
}
CLAUDE_CODE_WEB_FETCH = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "uri", "description": "The URL to fetch content from"},
        "prompt": {"type": "string", "description": "The prompt to run on the fetched content"},
    },
    "required": ["url", "prompt"],
    "additionalProperties": False,
    "$schema": DRAFT7,
}
CODEX_SHELL = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "The command"},
        "workdir": {"type": "string", "description": "The working directory"},
        "timeout_ms": {"type": "number", "description": "The timeout in milliseconds"},
    },
    "required": ["command"],
    "additionalProperties": False,
}
MCP_EDIT_FILE = {  # as @modelcontextprotocol/server-filesystem's edit_file
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                "required": ["oldText", "newText"],
                "additionalProperties": False,
            },
        },
        "dryRun": {"type": "boolean", "default": False, "description": "Preview changes"},
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
    "$schema": DRAFT7,
}
MCP_FASTMCP = {  # a Python MCP server (pydantic): titles, Optional, a map, gt=0
    "properties": {
        "repo_path": {"title": "Repo Path", "type": "string"},
        "base_branch": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "max_count": {"default": 10, "type": "integer", "exclusiveMinimum": 0},
        "labels": {"additionalProperties": {"type": "string"}, "type": "object"},
    },
    "required": ["repo_path"],
    "title": "git_create_branchArguments",
    "type": "object",
}
MCP_UNTYPED = {  # a Notion-style MCP tool: nested schemas that name no type
    "type": "object",
    "properties": {
        "data": {
            "description": "The data for the page",
            "properties": {"page_id": {"type": "string"}},
            "required": ["page_id"],
        },
        "value": {"description": "Any JSON value"},
        "ids": {"type": "array"},
    },
}


def edits_item() -> dict[str, Any]:
    return {
        "type": "OBJECT",
        "properties": {"oldText": {"type": "STRING"}, "newText": {"type": "STRING"}},
        "required": ["oldText", "newText"],
        "propertyOrdering": ["oldText", "newText"],
    }


CLIENT_SCHEMAS = {
    "claude code TodoWrite": (
        CLAUDE_CODE_TODO,
        {
            "type": "OBJECT",
            "properties": {
                "todos": {
                    "type": "ARRAY",
                    "items": {
                        "type": "OBJECT",
                        "properties": {
                            "content": {"type": "STRING", "minLength": 1},
                            "status": {
                                "type": "STRING",
                                "enum": ["pending", "in_progress", "completed"],
                            },
                            "activeForm": {"type": "STRING", "minLength": 1},
                        },
                        "required": ["content", "status", "activeForm"],
                        "propertyOrdering": ["content", "status", "activeForm"],
                    },
                    "description": "The updated todo list",
                }
            },
            "required": ["todos"],
        },
        [],
    ),
    "claude code WebFetch: a format Gemini does not take": (
        CLAUDE_CODE_WEB_FETCH,
        {
            "type": "OBJECT",
            "properties": {
                "url": {"type": "STRING", "description": "The URL to fetch content from"},
                "prompt": {
                    "type": "STRING",
                    "description": "The prompt to run on the fetched content",
                },
            },
            "required": ["url", "prompt"],
            "propertyOrdering": ["url", "prompt"],
        },
        [f"{P}.properties.url.format"],
    ),
    "codex shell": (
        CODEX_SHELL,
        {
            "type": "OBJECT",
            "properties": {
                "command": {
                    "type": "ARRAY",
                    "items": {"type": "STRING"},
                    "description": "The command",
                },
                "workdir": {"type": "STRING", "description": "The working directory"},
                "timeout_ms": {"type": "NUMBER", "description": "The timeout in milliseconds"},
            },
            "required": ["command"],
            "propertyOrdering": ["command", "workdir", "timeout_ms"],
        },
        [],
    ),
    "mcp edit_file": (
        MCP_EDIT_FILE,
        {
            "type": "OBJECT",
            "properties": {
                "path": {"type": "STRING"},
                "edits": {"type": "ARRAY", "items": edits_item()},
                "dryRun": {"type": "BOOLEAN", "description": "Preview changes", "default": False},
            },
            "required": ["path", "edits"],
            "propertyOrdering": ["path", "edits", "dryRun"],
        },
        [],
    ),
    "mcp fastmcp": (
        MCP_FASTMCP,
        {
            "type": "OBJECT",
            "properties": {
                "repo_path": {"type": "STRING", "title": "Repo Path"},
                "base_branch": {"type": "STRING", "default": None, "nullable": True},
                "max_count": {"type": "INTEGER", "minimum": 1, "default": 10},
                "labels": {"type": "OBJECT"},
            },
            "required": ["repo_path"],
            "propertyOrdering": ["repo_path", "base_branch", "max_count", "labels"],
            "title": "git_create_branchArguments",
        },
        [f"{P}.properties.labels.additionalProperties"],
    ),
    "mcp untyped: the type the keywords tell, else any value": (
        MCP_UNTYPED,
        {
            "type": "OBJECT",
            "properties": {
                "data": {
                    "type": "OBJECT",
                    "properties": {"page_id": {"type": "STRING"}},
                    "required": ["page_id"],
                    "description": "The data for the page",
                },
                "value": {
                    "anyOf": [
                        {**b, "description": "Any JSON value"} for b in copy.deepcopy(ANY["anyOf"])
                    ]
                },
                "ids": {"type": "ARRAY", "items": ANY},
            },
            "propertyOrdering": ["data", "value", "ids"],
        },
        [],
    ),
}


@pytest.mark.parametrize("name", CLIENT_SCHEMAS)
def test_client_tool_schemas(name: str) -> None:
    schema, expected, names = CLIENT_SCHEMAS[name]
    assert gemini(schema) == (expected, names)


def test_claude_code_bash_without_drops_given() -> None:
    bash = {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command to execute"}},
        "required": ["command"],
        "additionalProperties": False,
        "$schema": DRAFT7,
    }
    assert to_gemini(bash, "tools[0].input_schema") == {
        "type": "OBJECT",
        "properties": {"command": {"type": "STRING", "description": "The command to execute"}},
        "required": ["command"],
    }


# ---- keyword by keyword ---------------------------------------------------------------

CONVERTED = {
    "a type list: one schema per type, each with its keywords": (
        {"type": ["string", "integer", "null"], "minLength": 1, "minimum": 0, "description": "id"},
        {
            "anyOf": [
                {"type": "STRING", "minLength": 1, "description": "id", "nullable": True},
                {"type": "INTEGER", "minimum": 0, "description": "id", "nullable": True},
            ]
        },
    ),
    "a nullable object": (
        {"type": ["object", "null"], "properties": {"a": {"type": "boolean"}}},
        {"type": "OBJECT", "properties": {"a": {"type": "BOOLEAN"}}, "nullable": True},
    ),
    "number and integer: number": ({"type": ["integer", "number"]}, {"type": "NUMBER"}),
    "anyOf of several types with null: nullable on each branch, the default left out": (
        {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "default": None,
         "description": "a name or a number", "title": "Key"},
        {
            "anyOf": [
                {"type": "STRING", "description": "a name or a number", "title": "Key", "nullable": True},
                {"type": "INTEGER", "description": "a name or a number", "title": "Key", "nullable": True},
            ]
        },
    ),
    "a branch's own description stays": (
        {"anyOf": [{"type": "string", "description": "a path"}, {"type": "integer"}], "description": "x"},
        {"anyOf": [{"type": "STRING", "description": "a path"}, {"type": "INTEGER", "description": "x"}]},
    ),
    "a nested anyOf is flattened": (
        {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "boolean"}]}, {"type": "integer"}]},
        {"anyOf": [{"type": "STRING"}, {"type": "BOOLEAN"}, {"type": "INTEGER"}]},
    ),
    "oneOf read as anyOf": (
        {"oneOf": [{"type": "string"}, {"type": "number"}]},
        {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
    ),
    "keywords beside anyOf apply to each branch": (
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
         "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {
            "anyOf": [
                {"type": "OBJECT", "properties": {"a": {"type": "STRING"}, "b": {"type": "STRING"}},
                 "required": [r], "propertyOrdering": ["a", "b"]}
                for r in ("a", "b")
            ]
        },
    ),
    "allOf of objects (zod intersection): merged": (
        {"allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]},
        {"type": "OBJECT", "properties": {"a": {"type": "STRING"}, "b": {"type": "INTEGER"}},
         "required": ["a", "b"], "propertyOrdering": ["a", "b"]},
    ),
    "allOf with a $ref and a description (pydantic v1)": (
        {"$defs": {"Kind": {"type": "string", "enum": ["a", "b"]}},
         "properties": {"kind": {"allOf": [{"$ref": "#/$defs/Kind"}], "description": "The kind"}}},
        {"type": "OBJECT", "properties": {
            "kind": {"type": "STRING", "enum": ["a", "b"], "description": "The kind"}}},
    ),
    "$ref with a constraint beside it: merged": (
        {"definitions": {"Name": {"type": "string"}},
         "properties": {"n": {"$ref": "#/definitions/Name", "maxLength": 8}}},
        {"type": "OBJECT", "properties": {"n": {"type": "STRING", "maxLength": 8}}},
    ),
    "$ref pointers: escapes, percent-encoding, one definition used twice": (
        {"$defs": {"a/b": {"type": "string"}, "A B": {"type": "integer"}},
         "properties": {"x": {"$ref": "#/$defs/a~1b"}, "y": {"$ref": "#/$defs/A%20B"},
                        "z": {"$ref": "#/$defs/a~1b"}}},
        {"type": "OBJECT", "properties": {"x": {"type": "STRING"}, "y": {"type": "INTEGER"},
                                          "z": {"type": "STRING"}},
         "propertyOrdering": ["x", "y", "z"]},
    ),
    "an Optional model (pydantic): the definition, nullable": (
        {"$defs": {"M": {"type": "object", "properties": {"a": {"type": "string"}}, "title": "M"}},
         "anyOf": [{"$ref": "#/$defs/M"}, {"type": "null"}], "default": None, "title": "Field"},
        {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}, "title": "Field",
         "default": None, "nullable": True},
    ),
    "OpenAI strict Optional[Literal]: enum with null": (
        {"type": ["string", "null"], "enum": ["a", "b", None]},
        {"type": "STRING", "enum": ["a", "b"], "nullable": True},
    ),
    "an integer enum: strings with the type": (
        {"type": "integer", "enum": [1, 2, 3]},
        {"type": "INTEGER", "enum": ["1", "2", "3"]},
    ),
    "a number enum": ({"enum": [0.5, 2]}, {"type": "NUMBER", "enum": ["0.5", "2"]}),
    "an untyped enum of strings and integers": (
        {"enum": ["auto", 1, 2]},
        {"anyOf": [{"type": "STRING", "enum": ["auto"]}, {"type": "INTEGER", "enum": ["1", "2"]}]},
    ),
    "an enum's values of another type than the schema's are left out": (
        {"type": "string", "enum": ["a", 1]},
        {"type": "STRING", "enum": ["a"]},
    ),
    "const of a string": ({"const": "x"}, {"type": "STRING", "enum": ["x"]}),
    "both booleans: any boolean": ({"enum": [True, False]}, {"type": "BOOLEAN"}),
    "an integer's exclusive bounds: the next integers": (
        {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10.5, "minimum": -5},
        {"type": "INTEGER", "minimum": 1, "maximum": 10},
    ),
    "draft 4 exclusive bounds (a flag)": (
        {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
        {"type": "INTEGER", "minimum": 1},
    ),
    "formats Gemini takes": (
        {"type": "object", "properties": {
            "t": {"type": "string", "format": "date-time"}, "i": {"type": "integer", "format": "int64"},
            "f": {"type": "number", "format": "float"}}},
        {"type": "OBJECT", "properties": {
            "t": {"type": "STRING", "format": "date-time"}, "i": {"type": "INTEGER", "format": "int64"},
            "f": {"type": "NUMBER", "format": "float"}}, "propertyOrdering": ["t", "i", "f"]},
    ),
    "counts and pattern kept": (
        {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 9},
         "minItems": 1, "maxItems": 5},
        {"type": "ARRAY", "items": {"type": "STRING", "maxLength": 9, "pattern": "^[a-z]+$"},
         "minItems": 1, "maxItems": 5},
    ),
    "object counts kept": (
        {"type": "object", "minProperties": 1, "maxProperties": 3},
        {"type": "OBJECT", "minProperties": 1, "maxProperties": 3},
    ),
    "a required name without a property: a property of any value": (
        {"type": "object", "required": ["a"]},
        {"type": "OBJECT", "properties": {"a": ANY}, "required": ["a"]},
    ),
    "annotations and unknown keywords dropped silently": (
        {"type": "string", "$id": "x", "$comment": "c", "examples": ["a"], "deprecated": True,
         "readOnly": True, "x-google-order": 1, "contentMediaType": "text/plain", "strict": True},
        {"type": "STRING"},
    ),
    "keywords of another type dropped silently": (
        {"type": "string", "minItems": 1, "properties": {"a": {"not": {}}}, "multipleOf": 2},
        {"type": "STRING"},
    ),
    "additionalProperties true, false or {}: silently": (
        {"type": "object", "properties": {
            "a": {"type": "object", "additionalProperties": True},
            "b": {"type": "object", "additionalProperties": {}},
            "c": {"type": "object", "unevaluatedProperties": False}}},
        {"type": "OBJECT", "properties": {"a": {"type": "OBJECT"}, "b": {"type": "OBJECT"},
                                          "c": {"type": "OBJECT"}}, "propertyOrdering": ["a", "b", "c"]},
    ),
    "true as a schema: any value": ({"type": "array", "items": True}, {"type": "ARRAY", "items": ANY}),
    "an example kept (OpenAPI)": ({"type": "string", "example": "x"}, {"type": "STRING", "example": "x"}),
}  # fmt: skip


@pytest.mark.parametrize("name", CONVERTED)
def test_keywords_converted(name: str) -> None:
    schema, expected = CONVERTED[name]
    assert gemini(schema) == (expected, [])


NAMED = {
    "a format Gemini does not take": ({"type": "string", "format": "uuid"}, "format"),
    "a format of another type": ({"type": "integer", "format": "date-time"}, "format"),
    "a number's exclusive bound": ({"type": "number", "exclusiveMinimum": 0}, "exclusiveMinimum"),
    "multipleOf": ({"type": "integer", "multipleOf": 5}, "multipleOf"),
    "uniqueItems": ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
    "contains": ({"type": "array", "contains": {"const": 1}}, "contains"),
    "maxContains": ({"type": "array", "maxContains": 2}, "maxContains"),
    "a map's values": ({"type": "object", "additionalProperties": {"type": "integer"}}, "additionalProperties"),
    "unevaluatedProperties of a schema": ({"type": "object", "unevaluatedProperties": {"type": "string"}}, "unevaluatedProperties"),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": {"type": "string"}}}, "patternProperties"),
    "propertyNames": ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames"),
    "dependentRequired": ({"type": "object", "dependentRequired": {"a": ["b"]}}, "dependentRequired"),
    "a boolean const (Literal[True])": ({"type": "boolean", "const": True}, "const"),
    "a boolean enum": ({"enum": [False]}, "enum"),
}  # fmt: skip


@pytest.mark.parametrize("name", NAMED)
def test_keywords_dropped_and_named(name: str) -> None:
    schema, keyword = NAMED[name]
    _, names = gemini({"type": "object", "properties": {"x": schema}})
    assert names == [f"{P}.properties.x.{keyword}"]


def test_uniqueItems_false_is_not_named() -> None:
    assert gemini({"type": "array", "items": {"type": "string"}, "uniqueItems": False})[1] == []


def test_a_drop_inside_a_definition_is_named_where_the_client_wrote_it() -> None:
    schema = {
        "$defs": {"Id": {"type": "string", "format": "uuid"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Id"}, "b": {"$ref": "#/$defs/Id"}},
    }
    out, names = gemini(schema)
    assert out["properties"] == {"a": {"type": "STRING"}, "b": {"type": "STRING"}}
    assert names == [f"{P}.$defs.Id.format"]


def tree() -> dict[str, Any]:
    class Node(BaseModel):
        name: str
        children: list[Node] = []

    return Node.model_json_schema()


def laughs() -> dict[str, Any]:
    """Ten definitions, each naming the next ten times: 10**10 schemas once inlined."""
    defs: dict[str, Any] = {
        f"D{i}": {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/D{i + 1}"}
                                                   for j in range(10)}}
        for i in range(10)
    }  # fmt: skip
    defs["D10"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


REFUSED = {
    "not": ({"properties": {"x": {"type": "string", "not": {"const": ""}}}}, "properties.x.not"),
    "if / then / else": ({"properties": {"x": {"if": {}, "then": {}, "else": {}}}}, "properties.x.if"),
    "a tuple (prefixItems)": ({"properties": {"x": {"type": "array", "prefixItems": [{}]}}}, "properties.x.prefixItems"),
    "a tuple (items as an array)": ({"properties": {"x": {"type": "array", "items": [{}, {}]}}}, "properties.x.items"),
    "a pydantic tuple": ({"properties": {"x": {"anyOf": [{"type": "array", "prefixItems": [{"type": "integer"}]}, {"type": "null"}]}}},
                         "properties.x.anyOf[0].prefixItems"),
    "dependentSchemas": ({"type": "object", "dependentSchemas": {"a": {}}}, "dependentSchemas"),
    "dependencies": ({"type": "object", "dependencies": {"a": ["b"]}}, "dependencies"),
    "$dynamicRef": ({"$dynamicRef": "#node"}, "$dynamicRef"),
    "a recursive schema (pydantic)": (tree(), "$defs.Node.properties.children.items.$ref"),
    "a reference to the root": ({"properties": {"x": {"$ref": "#"}}}, "properties.x.$ref"),
    "a reference outside the schema": ({"properties": {"x": {"$ref": "https://example.com/x.json"}}}, "properties.x.$ref"),
    "a reference to an anchor": ({"properties": {"x": {"$ref": "#node"}}}, "properties.x.$ref"),
    "a reference to nothing": ({"properties": {"x": {"$ref": "#/$defs/Nope"}}}, "properties.x.$ref"),
    "a recursive allOf": ({"$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}}, "$ref": "#/$defs/A"}, "$defs.A.allOf[0].$ref"),
    "allOf members that disagree": ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf[1].type"),
    "allOf members that disagree on a bound": ({"allOf": [{"maxLength": 2}, {"maxLength": 3}]}, "allOf[1].maxLength"),
    "an enum of objects": ({"enum": [{"a": 1}]}, "enum"),
    "a const array": ({"const": [1]}, "const"),
    "only null (type)": ({"type": "null"}, "type"),
    "only null (const)": ({"const": None}, "const"),
    "only null (anyOf)": ({"anyOf": [{"type": "null"}]}, "anyOf"),
    "no value of the type": ({"type": "integer", "enum": ["a"]}, "enum"),
    "false": ({"properties": {"x": False}}, "properties.x"),
    "more schemas than a conversion writes": (laughs(), "$defs.D9.properties.p2"),
    "nested too deep": (nested(MAX_DEPTH + 1), ".".join(["items"] * (MAX_DEPTH + 1))),
    "a type that is not one": ({"type": "str"}, "type"),
    "a type that is not a string": ({"type": {"a": 1}}, "type"),
    "a count of the wrong type": ({"type": "string", "minLength": "5"}, "minLength"),
    "a negative count": ({"type": "array", "maxItems": -1}, "maxItems"),
    "a bound of the wrong type": ({"type": "number", "minimum": "0"}, "minimum"),
    "required not a list": ({"type": "object", "required": "a"}, "required"),
    "properties not an object": ({"type": "object", "properties": []}, "properties"),
    "a description not a string": ({"type": "string", "description": 5}, "description"),
    "nullable not a boolean": ({"type": "string", "nullable": "yes"}, "nullable"),
    "a schema not an object": ({"properties": {"x": "string"}}, "properties.x"),
    "anyOf not an array": ({"anyOf": {}}, "anyOf"),
    "a pattern not a string": ({"type": "string", "pattern": 1}, "pattern"),
}  # fmt: skip


@pytest.mark.parametrize("name", REFUSED)
def test_refused_naming_the_keyword(name: str) -> None:
    schema, where = REFUSED[name]
    before = copy.deepcopy(schema)
    with pytest.raises(Refused) as refused:
        to_gemini(schema, P, Dropped())
    assert refused.value.field == f"{P}.{where}"
    assert refused.value.status == 400 and refused.value.param == f"{P}.{where}"
    assert schema == before


def test_the_message_says_what_and_where() -> None:
    with pytest.raises(Refused) as refused:
        to_gemini({"properties": {"x": {"not": {}}}}, P)
    assert (
        str(refused.value) == f"{P}.properties.x.not: this keyword is not available on this model"
    )


# ---- Gemini clients' schemas back to JSON Schema ---------------------------------------

GEMINI_CLI_CLASSIFIER = {  # gemini-cli packages/core/src/routing/strategies/classifierStrategy.ts
    "type": "OBJECT",
    "properties": {
        "reasoning": {"type": "STRING", "description": "A brief explanation of the choice."},
        "model_choice": {"type": "STRING", "enum": ["flash", "pro"]},
    },
    "required": ["reasoning", "model_choice"],
}
GEMINI_CLI_EDIT_FIXER = {  # gemini-cli packages/core/src/utils/llm-edit-fixer.ts
    "type": "OBJECT",
    "properties": {
        "explanation": {"type": "STRING"},
        "search": {"type": "STRING"},
        "replace": {"type": "STRING"},
        "noChangesRequired": {"type": "BOOLEAN"},
    },
    "required": ["search", "replace", "explanation"],
}
GEMINI_CLI_ZOD = {  # gemini-cli policy-enforcer.ts: zodToJsonSchema(..., {target: "openApi3"})
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["allow", "deny", "ask_user"]},
        "reason": {"type": "string"},
    },
    "required": ["decision", "reason"],
    "additionalProperties": False,
}
GENAI_SDK = {  # google-genai's process_schema of a pydantic model (handle_null_fields)
    "type": "OBJECT",
    "title": "CountryInfo",
    "properties": {
        "name": {"type": "STRING", "title": "Name"},
        "total_area_sq_mi": {
            "type": "INTEGER",
            "nullable": True,
            "default": None,
            "title": "Total Area Sq Mi",
        },
        "codes": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": "1", "maxItems": "3"},
    },
    "required": ["name"],
    "propertyOrdering": ["total_area_sq_mi", "name", "codes"],
}

FROM_GEMINI = {
    "gemini cli classifier": (
        GEMINI_CLI_CLASSIFIER,
        {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string", "description": "A brief explanation of the choice."},
                "model_choice": {"type": "string", "enum": ["flash", "pro"]},
            },
            "required": ["reasoning", "model_choice"],
        },
    ),
    "gemini cli edit fixer": (
        GEMINI_CLI_EDIT_FIXER,
        {
            "type": "object",
            "properties": {k: {"type": "boolean" if k == "noChangesRequired" else "string"}
                           for k in GEMINI_CLI_EDIT_FIXER["properties"]},
            "required": ["search", "replace", "explanation"],
        },
    ),
    "gemini cli zod (lower-case types, Vertex's additionalProperties)": (GEMINI_CLI_ZOD, GEMINI_CLI_ZOD),
    "google-genai sdk: nullable, int64 as text, propertyOrdering as the order": (
        GENAI_SDK,
        {
            "type": "object",
            "title": "CountryInfo",
            "properties": {
                "total_area_sq_mi": {"type": ["integer", "null"], "default": None, "title": "Total Area Sq Mi"},
                "name": {"type": "string", "title": "Name"},
                "codes": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            },
            "required": ["name"],
        },
    ),
    "a nullable anyOf": (
        {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}], "nullable": True},
        {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    ),
    "an integer enum (Vertex's example)": (
        {"type": "INTEGER", "format": "enum", "enum": ["101", "201", "301"]},
        {"type": "integer", "enum": [101, 201, 301]},
    ),
    "a nullable number enum": (
        {"type": "NUMBER", "enum": ["1.5", "2"], "nullable": True},
        {"type": ["number", "null"], "enum": [1.5, 2, None]},
    ),
    "a string enum format": (
        {"type": "STRING", "format": "enum", "enum": ["EAST", "WEST"]},
        {"type": "string", "enum": ["EAST", "WEST"]},
    ),
    "kept: formats, bounds, pattern, counts; example as examples": (
        {"type": "OBJECT", "properties": {
            "when": {"type": "STRING", "format": "date-time", "example": "2025-01-01T00:00:00Z"},
            "n": {"type": "NUMBER", "minimum": 0, "maximum": "1.5"},
            "s": {"type": "STRING", "pattern": "^a", "minLength": "1", "maxLength": 5}},
         "minProperties": 1, "maxProperties": "2"},
        {"type": "object", "properties": {
            "when": {"type": "string", "format": "date-time", "examples": ["2025-01-01T00:00:00Z"]},
            "n": {"type": "number", "minimum": 0, "maximum": 1.5},
            "s": {"type": "string", "pattern": "^a", "minLength": 1, "maxLength": 5}},
         "minProperties": 1, "maxProperties": 2},
    ),
    "TYPE_UNSPECIFIED, NULL; unknown keys dropped": (
        {"type": "TYPE_UNSPECIFIED", "properties": {"n": {"type": "NULL"}}, "x-unknown": 1},
        {"properties": {"n": {"type": "null"}}},
    ),
    "additionalProperties of a schema (Vertex)": (
        {"type": "OBJECT", "additionalProperties": {"type": "INTEGER"}},
        {"type": "object", "additionalProperties": {"type": "integer"}},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", FROM_GEMINI)
def test_from_gemini(name: str) -> None:
    schema, expected = FROM_GEMINI[name]
    before = copy.deepcopy(schema)
    out = from_gemini(schema, "tools[0].functionDeclarations[0].parameters")
    assert out == expected
    assert list(out.get("properties", {})) == list(expected.get("properties", {}))
    assert schema == before


FROM_GEMINI_REFUSED = {
    "an unknown type": ({"type": "STRNG"}, "type"),
    "a type not a string": ({"type": 1}, "type"),
    "properties not an object": ({"properties": []}, "properties"),
    "a property not a schema": ({"properties": {"a": "STRING"}}, "properties.a"),
    "a nested wrong type": ({"properties": {"a": {"items": {"type": "LIST"}}}}, "properties.a.items.type"),
    "required not strings": ({"required": "a"}, "required"),
    "enum not strings": ({"type": "INTEGER", "enum": [1]}, "enum"),
    "a count not a number": ({"minItems": "many"}, "minItems"),
    "a bound not a number": ({"minimum": "low"}, "minimum"),
    "nullable not a boolean": ({"nullable": "true"}, "nullable"),
    "anyOf not an array": ({"anyOf": {"type": "STRING"}}, "anyOf"),
    "a branch not a schema": ({"anyOf": [1]}, "anyOf[0]"),
    "items not a schema": ({"items": []}, "items"),
    "too deep": (nested(MAX_DEPTH + 1), ".".join(["items"] * (MAX_DEPTH + 1))),
}  # fmt: skip


@pytest.mark.parametrize("name", FROM_GEMINI_REFUSED)
def test_from_gemini_refuses_a_value_of_the_wrong_type(name: str) -> None:
    schema, where = FROM_GEMINI_REFUSED[name]
    with pytest.raises(Refused) as refused:
        from_gemini(schema, "generationConfig.responseSchema")
    assert refused.value.field == f"generationConfig.responseSchema.{where}"


# ---- round trips ----------------------------------------------------------------------

ROUND_TRIPS = [
    CODEX_SHELL | {"additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "string", "description": "x"},
                                      "b": {"type": ["integer", "null"], "minimum": 1}},
     "required": ["a"]},
    {"type": "array", "items": {"anyOf": [{"type": "string", "enum": ["x"]}, {"type": "boolean"}]},
     "maxItems": 2},
    {"type": "integer", "enum": [1, 2], "format": "int32", "title": "Level"},
]  # fmt: skip


@pytest.mark.parametrize("schema", ROUND_TRIPS)
def test_json_schema_to_gemini_and_back(schema: dict[str, Any]) -> None:
    back = from_gemini(to_gemini(schema, P))
    assert back == {k: v for k, v in schema.items() if k != "additionalProperties"}


def test_gemini_to_json_schema_and_back() -> None:
    for schema in (GEMINI_CLI_CLASSIFIER, GEMINI_CLI_EDIT_FIXER):
        ordered = {**schema, "propertyOrdering": list(schema["properties"])}
        assert to_gemini(from_gemini(ordered), P) == ordered


# ---- properties -----------------------------------------------------------------------

KEYWORDS = [
    "type", "properties", "required", "items", "prefixItems", "anyOf", "oneOf", "allOf", "not",
    "enum", "const", "$ref", "$defs", "definitions", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems",
    "maxItems", "uniqueItems", "additionalProperties", "patternProperties", "nullable",
    "description", "title", "default", "examples", "$schema", "if", "then", "dependencies",
    "propertyOrdering", "x-unknown",
]  # fmt: skip
TYPE_NAMES = ["string", "number", "integer", "boolean", "array", "object", "null"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


def _value(schemas: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    refs = st.sampled_from(
        ["#", "#/$defs/a", "#/$defs/b", "#/definitions/a", "#/properties/x", "#x"]
    )
    types = st.sampled_from(TYPE_NAMES) | st.lists(st.sampled_from(TYPE_NAMES), max_size=3)
    return (
        schemas | JSON | types | refs | st.lists(schemas, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "x"]), schemas, max_size=3)
    )  # fmt: skip


SCHEMAS = st.recursive(
    st.booleans() | st.fixed_dictionaries({"type": st.sampled_from(TYPE_NAMES)}),
    lambda inner: st.dictionaries(st.sampled_from(KEYWORDS), _value(inner), max_size=5),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(SCHEMAS)
def test_to_gemini_raises_only_refused_and_never_changes_its_input(schema: Any) -> None:
    before = copy.deepcopy(schema)
    try:
        out = to_gemini(schema, P, Dropped())
    except Refused as refused:
        assert refused.field.startswith(P)
    else:
        orjson.dumps(out)
        assert out.get("type", "OBJECT") in {
            "STRING",
            "NUMBER",
            "INTEGER",
            "BOOLEAN",
            "ARRAY",
            "OBJECT",
        }
    assert schema == before


GEMINI_TYPES = ["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"]


@st.composite
def gemini_schemas(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """A well-typed Gemini ``Schema``, as :func:`to_gemini` writes one (so it comes back
    the same): no ``nullable`` beside ``anyOf``, each required name declared."""
    kind = draw(st.sampled_from(GEMINI_TYPES + (["ANYOF"] if depth < 2 else [])))
    out: dict[str, Any] = {}
    if kind == "ANYOF":
        out["anyOf"] = draw(st.lists(gemini_schemas(depth + 1).filter(lambda b: "anyOf" not in b),
                                     min_size=2, max_size=3))  # fmt: skip
        return out
    out["type"] = kind
    if kind == "STRING" and draw(st.booleans()):
        out["enum"] = draw(st.lists(st.text(max_size=4), min_size=1, max_size=3, unique=True))
    if kind in ("INTEGER", "NUMBER") and draw(st.booleans()):
        out["minimum"] = draw(st.integers(-10, 10))
    if kind == "ARRAY":
        out["items"] = draw(gemini_schemas(depth + 1)) if depth < 3 else {"type": "STRING"}
        if draw(st.booleans()):
            out["maxItems"] = draw(st.integers(0, 5))
    if kind == "OBJECT" and depth < 3:
        names = draw(st.lists(st.text(min_size=1, max_size=4), max_size=3, unique=True))
        if names:
            out["properties"] = {n: draw(gemini_schemas(depth + 1)) for n in names}
            out["required"] = (
                draw(st.lists(st.sampled_from(names), max_size=2, unique=True)) or None
            )
            out = {k: v for k, v in out.items() if v is not None}
        if len(names) > 1:
            out["propertyOrdering"] = names
    if draw(st.booleans()):
        out["description"] = draw(st.text(max_size=8))
    if draw(st.booleans()):
        out["nullable"] = True
    return out


@settings(max_examples=300, deadline=None)
@given(gemini_schemas())
def test_a_well_typed_gemini_schema_goes_to_json_schema_and_back(schema: dict[str, Any]) -> None:
    before = copy.deepcopy(schema)
    back = from_gemini(schema, "generationConfig.responseSchema")
    assert schema == before
    orjson.dumps(back)
    assert to_gemini(back, P) == schema


@settings(max_examples=300, deadline=None)
@given(SCHEMAS)
def test_from_gemini_raises_only_refused(schema: Any) -> None:
    before = copy.deepcopy(schema)
    with contextlib.suppress(Refused):
        orjson.dumps(from_gemini(schema))
    assert schema == before
