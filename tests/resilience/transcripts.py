"""Agent transcripts in the three request shapes, built from one neutral description.

A :class:`Transcript` is a system prompt, the user's task and a list of steps:
the user says something, the assistant says something, or the assistant calls
tools (possibly several in parallel) and gets their results. ``to_openai``,
``to_anthropic`` and ``to_responses`` render it the way real agents send it
(Anthropic: consecutive same-role turns merged so roles alternate, user text
after tool results joined to the tool-result message; Responses: a reasoning
item before each round of calls). All text is deterministic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.formats import CHAT, MESSAGES, RESPONSES, Format

SYSTEM_PROMPT = (
    "You are a coding agent working in the user's repository. Use the tools to read files, "
    "search and run commands. Make minimal, correct changes and explain them briefly."
)
TOOLS_SPEC = [
    {"name": "read_file", "description": "Read a file", "params": {"path": "string"}},
    {"name": "grep", "description": "Search the repository", "params": {"pattern": "string"}},
    {"name": "run", "description": "Run a shell command", "params": {"cmd": "string"}},
]


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Step:
    kind: Literal["user", "assistant", "tools"]
    text: str = ""
    calls: tuple[Call, ...] = ()


@dataclass
class Transcript:
    task: str
    steps: list[Step] = field(default_factory=list)
    system: str = SYSTEM_PROMPT
    developer_notes: dict[int, str] = field(default_factory=dict)  # before step i (OpenAI)


def filler(label: str, chars: int) -> str:
    """Deterministic source-like text of exactly ``chars`` characters."""
    lines: list[str] = []
    size = 0
    i = 0
    while size < chars:
        line = (
            f"{label}:{i:05d}  def handler_{i}(request): return process(request, retries={i % 7})\n"
        )
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)[:chars]


def tool_round(seed: int, sizes: list[int], text: str = "") -> Step:
    """A round of parallel tool calls whose results have the given sizes."""
    calls = []
    for j, size in enumerate(sizes):
        kind = ("read_file", "grep", "run")[(seed + j) % 3]
        argument = {"read_file": "path", "grep": "pattern", "run": "cmd"}[kind]
        calls.append(
            Call(kind, {argument: f"src/module_{seed}_{j}.py"}, filler(f"r{seed}.{j}", size))
        )
    return Step("tools", text, tuple(calls))


def coding_session(rounds: int = 12, parallel: int = 3, big: int = 30_000) -> Transcript:
    """A long agent session: task, many tool rounds (some parallel, some huge), chat."""
    t = Transcript(task="Fix the flaky retry test in tests/test_client.py and explain the cause.")
    for r in range(rounds):
        sizes = [big if (r + j) % 4 == 0 else 600 + 37 * j for j in range(1 + r % parallel)]
        t.steps.append(tool_round(r, sizes, text=f"Round {r}: looking at the next files."))
        if r % 5 == 4:
            t.steps.append(Step("assistant", f"Progress after round {r}: narrowed it down."))
            t.steps.append(Step("user", f"Keep going, also check module {r}."))
    t.steps.append(tool_round(rounds, [2_000, 3_000], text="Running the tests once more."))
    return t


# ---- renderers --------------------------------------------------------------------


def _call_id(step: int, j: int) -> str:
    return f"call_{step}_{j}"


def to_openai(t: Transcript, *, parts: bool = False) -> dict[str, Any]:
    """OpenAI chat completions body (``parts``: user content as a list of text parts)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": t.system}]
    task: Any = [{"type": "text", "text": t.task}] if parts else t.task
    messages.append({"role": "user", "content": task})
    for i, step in enumerate(t.steps):
        if i in t.developer_notes:
            messages.append({"role": "developer", "content": t.developer_notes[i]})
        if step.kind in ("user", "assistant"):
            messages.append({"role": step.kind, "content": step.text})
            continue
        messages.append(
            {
                "role": "assistant",
                "content": step.text or None,
                "tool_calls": [
                    {
                        "id": _call_id(i, j),
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for j, c in enumerate(step.calls)
                ],
            }
        )
        for j, c in enumerate(step.calls):
            messages.append({"role": "tool", "tool_call_id": _call_id(i, j), "content": c.result})
    tools = [
        {"type": "function", "function": {"name": s["name"], "description": s["description"]}}
        for s in TOOLS_SPEC
    ]
    return {"model": "glm-4.7", "messages": messages, "tools": tools, "stream": False}


def to_anthropic(t: Transcript) -> dict[str, Any]:
    """Anthropic Messages body: top-level system, alternating roles, tool_use/tool_result."""
    turns: list[tuple[str, list[dict[str, Any]]]] = [("user", [{"type": "text", "text": t.task}])]

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))

    for i, step in enumerate(t.steps):
        if step.kind in ("user", "assistant"):
            add(step.kind, [{"type": "text", "text": step.text}])
            continue
        blocks: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
        blocks += [
            {"type": "tool_use", "id": _call_id(i, j), "name": c.name, "input": c.arguments}
            for j, c in enumerate(step.calls)
        ]
        add("assistant", blocks)
        add(
            "user",
            [
                {"type": "tool_result", "tool_use_id": _call_id(i, j), "content": c.result}
                for j, c in enumerate(step.calls)
            ],
        )
    messages = [{"role": role, "content": blocks} for role, blocks in turns]
    if isinstance(messages[0]["content"], list) and len(messages[0]["content"]) == 1:
        messages[0] = {"role": "user", "content": t.task}  # the plain-string form clients send
    tools = [
        {"name": s["name"], "description": s["description"], "input_schema": {"type": "object"}}
        for s in TOOLS_SPEC
    ]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "system": [{"type": "text", "text": t.system, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "tools": tools,
    }


def to_responses(t: Transcript) -> dict[str, Any]:
    """OpenAI Responses body as the Codex CLI sends it: instructions and input items."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t.task}]}
    ]
    for i, step in enumerate(t.steps):
        if i in t.developer_notes:
            items.append({"role": "developer", "content": t.developer_notes[i]})
        if step.kind == "user":
            items.append({"role": "user", "content": step.text})
            continue
        if step.kind == "assistant":
            items.append(_assistant_item(i, step.text))
            continue
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{i}",
                "summary": [{"type": "summary_text", "text": f"Plan for step {i}."}],
                "encrypted_content": "gAAAA" + "x" * 64,
            }
        )
        if step.text:
            items.append(_assistant_item(i, step.text))
        for j, c in enumerate(step.calls):
            items.append(
                {
                    "type": "function_call",
                    "call_id": _call_id(i, j),
                    "name": c.name,
                    "arguments": json.dumps(c.arguments),
                }
            )
        for j, c in enumerate(step.calls):
            items.append(
                {"type": "function_call_output", "call_id": _call_id(i, j), "output": c.result}
            )
    tools = [{"type": "function", "name": s["name"], "parameters": {}} for s in TOOLS_SPEC]
    return {"model": "gpt-5-codex", "instructions": t.system, "input": items, "tools": tools}


def _assistant_item(i: int, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{i}",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


RENDER = {CHAT: to_openai, MESSAGES: to_anthropic, RESPONSES: to_responses}


def render(t: Transcript, fmt: Format) -> dict[str, Any]:
    """The transcript as a request body of ``fmt``."""
    return RENDER[fmt](t)
