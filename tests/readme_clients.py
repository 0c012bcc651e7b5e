"""The README's client commands (Claude Code, Codex, ``llm``, the ``openai`` CLI, aider)
replayed as the requests those programs send, at their size, with the official SDKs.

The programs themselves are too heavy for the suite (``tests/clients/`` drives them, opt-in).
Each replay takes what the README gives it (base URL, key, model, prompt, config) and sends
what the program would: its long system prompt or instructions, its tools, streaming, and
for Claude Code its small-model request and the turn after a tool ran. Claude Code's
requests are about 3,000 input tokens (about 0.009 USD at the demo's prices), Codex's
instructions about 5,000, aider's about 2,500, as the real programs send.

Each replay returns the :class:`Answer` of every request it sent, in order.
"""

from __future__ import annotations

import inspect
import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from tests.integration.test_demo import claude_code_turn


@dataclass(frozen=True, slots=True)
class Answer:
    """One request of a replayed client: the model asked for, the gateway's headers, the
    answer's text (or the tool it called, with its arguments)."""

    client: str
    asked: str
    headers: Mapping[str, str]
    text: str = ""
    tool: tuple[str, dict[str, Any]] | None = None
    finish: str = ""

    @property
    def model(self) -> str:
        return self.headers.get("x-gateway-model", "")

    @property
    def recovery(self) -> str:
        return self.headers.get("x-gateway-recovery", "")


def _filler(lead: str, chars: int) -> str:
    """A system prompt of ``chars`` characters (the sim counts 4 characters a token)."""
    return (lead + " ") * (chars // (len(lead) + 1))


# Sizes as the programs send them (their system prompts, measured on the real clients).
CLAUDE_CODE_SYSTEM = _filler(
    "You are Claude Code, an interactive CLI tool that helps users with software "
    "engineering tasks. Use the tools available to you to assist the user.",
    12_000,
)
CLAUDE_CODE_SMALL_SYSTEM = _filler("Summarize this coding conversation in a short title.", 800)
CODEX_INSTRUCTIONS = _filler(
    "You are Codex, a coding agent running in a terminal. Keep going until the task is done.",
    20_000,
)
AIDER_SYSTEM = _filler(
    "Act as an expert software developer. Always use best practices when coding.", 10_000
)
CLAUDE_CODE_BETAS = ["claude-code-20250219", "interleaved-thinking-2025-05-14"]
_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
CLAUDE_CODE_TOOLS = [
    {"name": name, "description": f"The {name} tool", "input_schema": _SCHEMA}
    for name in ("Bash", "Read", "Edit", "Write", "Glob", "Grep")
]


def claude_code(base_url: str, key: str, env: dict[str, str], argv: list[str]) -> list[Answer]:
    """``claude -p PROMPT [--allowedTools T]``: the small model's request, then the main
    model's streamed turn; a call of an allowed tool is run and answered once more."""
    prompt = argv[argv.index("-p") + 1]
    allowed = (
        set(argv[argv.index("--allowedTools") + 1].split(","))
        if "--allowedTools" in argv
        else set()
    )
    model, small = env["ANTHROPIC_MODEL"], env["ANTHROPIC_DEFAULT_HAIKU_MODEL"]
    answers: list[Answer] = []
    with anthropic.Anthropic(base_url=base_url, auth_token=key, max_retries=0) as c:
        raw = c.beta.messages.with_raw_response.create(
            model=small,
            max_tokens=512,
            system=CLAUDE_CODE_SMALL_SYSTEM,
            messages=[{"role": "user", "content": prompt}],
            betas=CLAUDE_CODE_BETAS,
        )
        m = raw.parse()
        text = "".join(b.text for b in m.content if b.type == "text")
        answers.append(Answer("claude", small, raw.headers, text, None, m.stop_reason or ""))
        messages: list[Any] = claude_code_turn(prompt)
        while True:
            with c.beta.messages.stream(
                model=model,
                max_tokens=32_000,
                system=[{"type": "text", "text": CLAUDE_CODE_SYSTEM}],
                tools=CLAUDE_CODE_TOOLS,  # type: ignore[arg-type]
                messages=messages,
                betas=CLAUDE_CODE_BETAS,
            ) as s:
                final = s.get_final_message()
                headers = s.response.headers
            text = "".join(b.text for b in final.content if b.type == "text")
            calls = [b for b in final.content if b.type == "tool_use"]
            tool = (calls[0].name, dict(calls[0].input)) if calls else None  # type: ignore[arg-type]
            answers.append(Answer("claude", model, headers, text, tool, final.stop_reason or ""))
            if not calls or calls[0].name not in allowed:
                return answers
            messages = [
                messages[0],
                {"role": "assistant", "content": [b.model_dump() for b in final.content]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": calls[0].id,
                            "content": "(no output)",
                        }
                    ],
                },
            ]


def codex(base_url: str, key: str, model: str, prompt: str) -> list[Answer]:
    """``codex exec PROMPT``: one streamed Responses request with Codex's instructions."""
    shell = {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
    }
    with (
        openai.OpenAI(base_url=base_url, api_key=key, max_retries=0) as c,
        c.responses.with_streaming_response.create(
            model=model,
            instructions=CODEX_INSTRUCTIONS,
            input=[{"role": "user", "content": [{"type": "input_text", "text": prompt}]}],
            tools=[shell],  # type: ignore[list-item]
            store=False,
            stream=True,
        ) as r,
    ):
        text, finish = "", ""
        for event in r.parse():
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.completed":
                finish = event.response.status or ""
        return [Answer("codex", model, r.headers, text, None, finish)]


@dataclass(slots=True)
class _Chat:
    """A streamed chat completion as the OpenAI-speaking CLIs send it."""

    client: str
    base_url: str
    key: str
    model: str
    system: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)

    def send(self, messages: list[dict[str, Any]]) -> Answer:
        sent = [{"role": "system", "content": self.system}] if self.system else []
        extra: dict[str, Any] = {"tools": self.tools} if self.tools else {}
        with (
            openai.OpenAI(base_url=self.base_url, api_key=self.key, max_retries=0) as c,
            c.chat.completions.with_streaming_response.create(
                model=self.model, messages=[*sent, *messages], stream=True, **extra
            ) as r,
        ):
            text, finish, name, args = "", "", "", ""
            for chunk in r.parse():
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        if call.function is not None:
                            name += call.function.name or ""
                            args += call.function.arguments or ""
                    finish = choice.finish_reason or finish
            tool = (name, json.loads(args or "{}")) if name else None
            return Answer(self.client, self.model, r.headers, text, tool, finish)


def aider(base_url: str, key: str, model: str, prompt: str) -> list[Answer]:
    """``aider --model openai/MODEL --message PROMPT``: one streamed chat request with
    aider's system prompt."""
    return [
        _Chat("aider", base_url, key, model, AIDER_SYSTEM).send(
            [{"role": "user", "content": prompt}]
        )
    ]


def openai_cli(base_url: str, key: str, argv: list[str]) -> list[Answer]:
    """``openai api chat.completions.create -m MODEL -g ROLE TEXT [--stream]``."""
    model = argv[argv.index("-m") + 1]
    g = argv.index("-g")
    messages = [{"role": argv[g + 1], "content": argv[g + 2]}]
    if "--stream" in argv:
        return [_Chat("openai", base_url, key, model).send(messages)]
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0) as c:
        raw = c.chat.completions.with_raw_response.create(model=model, messages=messages)  # type: ignore[arg-type]
    choice = raw.parse().choices[0]
    text = choice.message.content or ""
    return [Answer("openai", model, raw.headers, text, None, choice.finish_reason)]


def llm_cli(base_url: str, key: str, entry: dict[str, Any], argv: list[str]) -> list[Answer]:
    """``llm -m MODEL_ID [--functions CODE] PROMPT [--td]``, ``entry`` the model's item of
    ``extra-openai-models.yaml``: a streamed chat (or Responses) request; with functions,
    each called function is run (the README's code) and its result sent back."""
    model = entry["model_name"]
    (prompt,) = positional(argv[1:], with_value={"-m", "--functions"})
    if entry.get("responses"):
        with (
            openai.OpenAI(base_url=base_url, api_key=key, max_retries=0) as c,
            c.responses.with_streaming_response.create(model=model, input=prompt, stream=True) as r,
        ):
            text = "".join(e.delta for e in r.parse() if e.type == "response.output_text.delta")
            return [Answer("llm", model, r.headers, text)]
    functions: dict[str, Any] = {}
    if "--functions" in argv:
        exec(argv[argv.index("--functions") + 1], functions)  # the README's own code
    tools = [_function_tool(name, f) for name, f in functions.items() if callable(f)]
    chat = _Chat("llm", base_url, key, model, tools=tools)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    answers = [chat.send(messages)]
    while (called := answers[-1].tool) is not None and called[0] in functions:
        result = functions[called[0]](**called[1])
        messages += [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": called[0], "arguments": json.dumps(called[1])},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": str(result)},
        ]
        answers.append(chat.send(messages))
    return answers


def shell_words(command: str) -> tuple[dict[str, str], list[str]]:
    """A shell command's leading ``NAME=value`` assignments and its words."""
    words = shlex.split(command, comments=True)
    env: dict[str, str] = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


def positional(words: list[str], with_value: set[str]) -> list[str]:
    """The words that are no option nor an option's value (``with_value``: the options
    that take one)."""
    found: list[str] = []
    it = iter(words)
    for w in it:
        if w in with_value:
            next(it, None)
        elif not w.startswith("-"):
            found.append(w)
    return found


def _function_tool(name: str, f: Callable[..., Any]) -> dict[str, Any]:
    """A Python function as llm offers it: an OpenAI function tool of its string parameters."""
    params = list(inspect.signature(f).parameters)
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in params}}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {**schema, "required": params}},
    }
