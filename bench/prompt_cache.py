"""What session affinity keeps of the provider's prompt cache, through a real gateway.

    python bench/prompt_cache.py [--sessions 30] [--turns 30] [--load-sessions 3000]
                                 [--quick] [--no-save]

A benchmark, not a test (never collected by pytest); everything talks over 127.0.0.1 and
everything started is stopped at the end. Three in-process fake Anthropic providers
(``gateway.testing.FakeProvider``), each its own deployment with its own prompt cache,
all on one *virtual* clock (``PromptCache(clock=...)``: 5-minute TTL, 1,024-token
minimum), and one ``llm-gateway serve`` process over them (policies written to a temp
dir, a fast retry policy).

Agent sessions shaped like Claude Code's (``x-claude-code-session-id``, two system
blocks with ``cache_control`` on the last, 12 tools, a transcript of tool calls and
~2,000-character tool results with ``cache_control`` on the last block of the last
message) run in rounds: every session sends one turn per round, the sessions of a round
at once; after each round the virtual clock moves 30 s (30 turns = 15 virtual minutes).
Five scenarios, each on its own model (its own upstream model name, so its own caches):

- ``single``: one deployment (the ceiling of the cached share);
- ``none``: three deployments, ``balance: weighted``, ``affinity: none`` (a random draw
  per request);
- ``session``: three deployments, ``affinity: session`` (the default);
- ``none+outage``, ``session+outage``: as above, with deployment A's server stopped
  (connection refused) for the middle third of the rounds and started again on the same
  port, its cache kept.

Then the load check: ``--load-sessions`` sessions of one short request each on
three-deployment models of weights 1:1:1 and 1:1:2 (``affinity: session``, and
``affinity: none`` as the baseline), counted per fake provider.

Prints the tables and the goals (PASS/FAIL; exit status 1 when one fails) and saves
``bench/results/<date>-<time>-prompt-cache.md`` and ``.json`` unless ``--no-save``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import procs  # noqa: E402

from gateway.resilience import affinity  # noqa: E402
from gateway.routing.policyset import hash_key  # noqa: E402
from gateway.testing import FakeProvider  # noqa: E402
from gateway.testing.prompt_cache import PromptCache  # noqa: E402

RESULTS = HERE / "results"
CLIENT_KEY = "bench-prompt-cache-key"
TEAM = "bench"
LETTERS = ["A", "B", "C"]
PROVIDERS = ["deploy-a", "deploy-b", "deploy-c"]  # the deployments' names
KEY_ENV = {"deploy-a": "PC_KEY_A", "deploy-b": "PC_KEY_B", "deploy-c": "PC_KEY_C"}
#: Claude Sonnet list prices, USD per million tokens.
PRICE = {"input": 3.0, "cache_write": 3.75, "cache_read": 0.30, "output": 15.0}
ROUND_S = 30.0  # virtual seconds between two rounds
TTL_S = 300.0
MINIMUM = 1024
#: The gateway's policy: short waits so that an outage moves sessions at once. The
#: ejection after connection failures lasts ``fallback.cooldown`` of *real* time; the
#: runner waits that long after bringing A back, so that the return is due on the first
#: round after the outage, as it would be with a cooldown of seconds and rounds 30 s apart.
EJECT_COOLDOWN_S = 0.25
FAST_POLICY: dict[str, Any] = {
    "retry": {
        "max_retries": 3,
        "rate_limit": {"base": "20ms", "cap": "100ms", "jitter": "10ms"},
        "transient": {"base": "10ms", "cap": "50ms"},
    },
    "turn_retry": {"wait": "20ms", "max": 1},
    "fallback": {"after_consecutive_server_errors": 2, "cooldown": f"{EJECT_COOLDOWN_S}s"},
    "timeouts": {"connect": "1s", "first_byte": "30s", "stream_idle": "30s", "total": "60s"},
}
SCENARIOS = [  # name, affinity (None: one deployment), outage
    ("single", None, False),
    ("none", "none", False),
    ("session", "session", False),
    ("none+outage", "none", True),
    ("session+outage", "session", True),
]
#: The load goal is judged from this many sessions on (with 300, sampling alone spreads a
#: deployment's share by 8 to 10 % at one standard deviation).
LOAD_JUDGED = 3000
LOADS: list[tuple[str, list[float]]] = [("1:1:1", [1, 1, 1]), ("1:1:2", [1, 1, 2])]

# --- the request: Claude Code's shape ---------------------------------------------------

SYSTEM_SHORT = "You are Claude Code, Anthropic's official CLI for Claude."
_GUIDANCE = [
    "Answer concisely; a few lines unless the user asks for detail.",
    "Never guess a file's contents: look at it first, with the tools you were given.",
    "Prefer changing existing files to creating new ones, and keep each change minimal.",
    "Follow the conventions of the code around you: naming, formatting, imports, typing.",
    "Before changing a function, find its callers and keep them working.",
    "Run the project's own checks after a change: its tests, its linter, its type checker.",
    "When a command fails, say what failed and why before trying something else.",
    "Do not add comments that repeat the code; explain why, never what.",
    "Never commit unless the user asks you to; never push to a remote on your own.",
    "Keep secrets out of the transcript: do not print keys, tokens or passwords.",
    "When the request is ambiguous, ask one short question rather than guess.",
    "Use absolute paths in tool calls; the working directory may change between calls.",
    "Batch independent tool calls in one message so that they run in parallel.",
    "When you reference code, give the path and line as path:line so the user can jump there.",
    "Plan multi-step work in a short list and keep it up to date as steps complete.",
    "Do not create documentation files unless the user asks for them.",
    "Stay within the scope of the request; mention other problems, do not fix them unasked.",
    "Quote shell arguments that contain spaces, and avoid interactive commands.",
    "Prefer the dedicated search tools to find and grep commands in the shell.",
    "If a hook blocks a call, adapt to its message instead of retrying the same call.",
]


def system_blocks() -> list[dict[str, Any]]:
    """The two system blocks: the identity line, then ~12,000 characters of instructions
    (the same for every session), marked for the cache."""
    rng = random.Random("system")
    parts = ["# Instructions for the coding agent\n"]
    section = 0
    while sum(len(p) for p in parts) < 12_000:
        section += 1
        picked = rng.sample(_GUIDANCE, 6)
        parts.append(f"\n## Section {section}\n" + "\n".join(f"- {g}" for g in picked) + "\n")
    parts.append("\nEnvironment: working directory /home/dev/project, platform linux.\n")
    return [
        {"type": "text", "text": SYSTEM_SHORT},
        {"type": "text", "text": "".join(parts), "cache_control": {"type": "ephemeral"}},
    ]


def _tool(
    name: str, description: str, props: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    }


def _s(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def tools() -> list[dict[str, Any]]:
    """Twelve tools with Claude Code's names and realistic JSON schemas (no marker)."""
    edit = {"type": "object", "properties": {"old_string": _s("text to replace"),
            "new_string": _s("replacement"), "replace_all": {"type": "boolean"}},
            "required": ["old_string", "new_string"]}  # fmt: skip
    todo = {"type": "object", "properties": {"content": _s("the step"),
            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
            "id": _s("its id")}, "required": ["content", "status", "id"]}  # fmt: skip
    return [
        _tool("Bash", "Runs a shell command in a persistent shell session with an optional timeout.",
              {"command": _s("the command"), "timeout": {"type": "number", "description": "ms, at most 600000"},
               "description": _s("what it does, in 5-10 words")}, ["command"]),
        _tool("Glob", "Finds files by glob pattern, sorted by modification time.",
              {"pattern": _s("the glob"), "path": _s("the directory to search")}, ["pattern"]),
        _tool("Grep", "Searches file contents with ripgrep regular expressions.",
              {"pattern": _s("the regular expression"), "path": _s("file or directory"),
               "glob": _s("files to include"), "output_mode": {"type": "string",
               "enum": ["content", "files_with_matches", "count"]}, "-n": {"type": "boolean"},
               "-i": {"type": "boolean"}, "head_limit": {"type": "number"}}, ["pattern"]),
        _tool("LS", "Lists files and directories under an absolute path.",
              {"path": _s("absolute path"), "ignore": {"type": "array", "items": {"type": "string"}}}, ["path"]),
        _tool("Read", "Reads a file from the local filesystem, with line numbers.",
              {"file_path": _s("absolute path"), "offset": {"type": "number"}, "limit": {"type": "number"}},
              ["file_path"]),
        _tool("Edit", "Performs an exact string replacement in a file.",
              {"file_path": _s("absolute path"), "old_string": _s("text to replace"),
               "new_string": _s("replacement"), "replace_all": {"type": "boolean", "default": False}},
              ["file_path", "old_string", "new_string"]),
        _tool("MultiEdit", "Makes several replacements in one file, atomically.",
              {"file_path": _s("absolute path"), "edits": {"type": "array", "items": edit, "minItems": 1}},
              ["file_path", "edits"]),
        _tool("Write", "Writes a file to the local filesystem, replacing it.",
              {"file_path": _s("absolute path"), "content": _s("the whole file")}, ["file_path", "content"]),
        _tool("NotebookEdit", "Replaces, inserts or deletes a cell of a Jupyter notebook.",
              {"notebook_path": _s("absolute path"), "cell_id": _s("the cell"), "new_source": _s("source"),
               "cell_type": {"type": "string", "enum": ["code", "markdown"]},
               "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"]}},
              ["notebook_path", "new_source"]),
        _tool("WebFetch", "Fetches a URL and answers a prompt about its content.",
              {"url": {"type": "string", "format": "uri"}, "prompt": _s("what to extract")}, ["url", "prompt"]),
        _tool("WebSearch", "Searches the web; results come back as blocks with links.",
              {"query": {"type": "string", "minLength": 2}, "allowed_domains": {"type": "array",
               "items": {"type": "string"}}}, ["query"]),
        _tool("TodoWrite", "Creates and updates the structured list of steps of this session.",
              {"todos": {"type": "array", "items": todo}}, ["todos"]),
    ]  # fmt: skip


#: Tools named in the reminders, in turn (simple schemas; the fake calls the one named).
NEXT_TOOL = ["Grep", "Read", "Bash", "Read", "Edit", "Glob", "Read", "Bash"]
_WORD_TEXT = (
    "invoice ledger parser amount currency total subtotal tax rate customer account period "
    "balance entry posting journal report export import schema field value record batch "
    "queue worker handler request response session token window buffer offset index cache "
    "retry limit budget metric counter gauge label event stream chunk frame header payload"
)
_WORDS = _WORD_TEXT.split()


def tool_output(session: int, turn: int, chars: int = 2000) -> str:
    """~``chars`` characters of a tool's output (code lines with paths), deterministic per
    session and turn, naming no tool."""
    rng = random.Random(f"out-{session}-{turn}")
    lines: list[str] = []
    size = 0
    while size < chars:
        a, b, c = rng.sample(_WORDS, 3)
        line = (
            f"src/billing/{a}_{b}.py:{rng.randint(1, 900)}:    "
            f"{c}_{a} = compute_{b}({c}, {a}_{session}_{turn}) + {rng.randint(0, 99)}"
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:chars]


def first_message(session: int) -> str:
    text = (
        f"[session {session:03d}] The nightly job of the billing service fails since "
        f"yesterday's merge: invoice totals are off by one cent for customer batch "
        f"{1000 + session}. Find the cause and fix it, then run the checks. Start with Grep "
        f"over src/billing for the rounding of the tax rate."
    )
    reminder = (
        "<system-reminder>\nContext of the project (from its notes file): a Python 3.11 "
        "service; the code is in src/billing, the checks are pytest, ruff and mypy; money "
        "is kept in integer cents; rounding is half-even at the ledger boundary only."
        "\n</system-reminder>"
    )
    return reminder + "\n" + text


def reminder(turn: int) -> str:
    tool = NEXT_TOOL[turn % len(NEXT_TOOL)]
    return f"<system-reminder>Step {turn}. Next, use {tool} on the files listed above.</system-reminder>"


def marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with ``cache_control`` on the last block of the last message only."""
    last = messages[-1]
    blocks = [dict(b) for b in last["content"]]
    blocks[-1]["cache_control"] = {"type": "ephemeral"}
    return [*messages[:-1], {"role": last["role"], "content": blocks}]


# --- the gateway ------------------------------------------------------------------------


def model_name(scenario: str) -> str:
    return "pc-" + scenario.replace("+", "-")


def write_policies(root: Path, urls: list[str]) -> None:
    providers = {
        p: {"api": "anthropic", "base_url": url, "api_key_env": KEY_ENV[p]}
        for p, url in zip(PROVIDERS, urls, strict=True)
    }
    price = {"input": PRICE["input"], "output": PRICE["output"],
             "cache_read": PRICE["cache_read"], "cache_write": PRICE["cache_write"]}  # fmt: skip
    models: dict[str, Any] = {}
    for name, aff, _ in SCENARIOS:
        upstream = "claude-bench-" + model_name(name)[3:]
        if aff is None:
            models[model_name(name)] = {"provider": PROVIDERS[0], "upstream_model": upstream,
                                        "price": price}  # fmt: skip
        else:
            models[model_name(name)] = {
                "deployments": [{"provider": p, "weight": 1} for p in PROVIDERS],
                "balance": "weighted", "affinity": aff, "upstream_model": upstream,
                "price": price,
            }  # fmt: skip
    for label, weights in LOADS:
        for aff in ("session", "none"):
            models[load_model(label, aff)] = {
                "deployments": [{"provider": p, "weight": w}
                                for p, w in zip(PROVIDERS, weights, strict=True)],
                "balance": "weighted", "affinity": aff, "price": price,
                "upstream_model": "claude-bench-" + load_model(label, aff)[3:],
            }  # fmt: skip
    platform = {"providers": providers, "models": models, "policies": {"fast": FAST_POLICY}}
    team = {TEAM: {"keys": [hash_key(CLIENT_KEY)], "models": ["*"],
                   "routes": [{"match": {"model": "*"}, "policy": "fast"}]}}  # fmt: skip
    (root / "teams").mkdir(parents=True, exist_ok=True)
    (root / "platform.yaml").write_text(yaml.safe_dump(platform, sort_keys=False))
    (root / "teams" / "bench.yaml").write_text(yaml.safe_dump({"teams": team}, sort_keys=False))


def load_model(label: str, aff: str) -> str:
    return f"pc-load-{label.replace(':', '')}-{aff}"


def start_gateway(policy_dir: Path, port: int, log_path: Path) -> tuple[subprocess.Popen[Any], Any]:
    """The gateway, its log (info: the access log and the events) written to ``log_path``;
    the process and the open log file."""
    log = open(log_path, "wb")  # noqa: SIM115 - closed by the caller
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GATEWAY_"))}
    env.update({"GATEWAY_LOG_LEVEL": "info", "PYTHONPATH": str(HERE.parent)})
    env.update({e: f"sk-fake-{p}" for p, e in KEY_ENV.items()})
    argv = [sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", str(port), "--host", "127.0.0.1"]  # fmt: skip
    return procs.spawn(argv, cpu=None, env=env, stdout=log, stderr=subprocess.STDOUT), log


def log_events(path: Path, start: int, end: int) -> Counter[str]:
    """The gateway's log events between two offsets of its log, by name."""
    out: Counter[str] = Counter()
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    for line in data.splitlines():
        try:
            event = orjson.loads(line).get("event")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(event, str):
            out[event] += 1
    return out


# --- one scenario -----------------------------------------------------------------------


@dataclass
class Turn:
    usage: dict[str, int]
    attempts: int
    cost_usd: float
    client_retries: int


@dataclass
class Session:
    index: int
    sid: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [
            {"role": "user", "content": [{"type": "text", "text": first_message(self.index)}]}
        ]


class Errors(Exception):
    pass


async def send(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], sid: str
) -> tuple[dict[str, Any], int, float, int]:
    """POST a Messages request; the answer, attempts, cost and the client's own retries
    (Claude Code retries a failed request itself: up to 3 times here, 50 ms apart)."""
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01",
               "x-claude-code-session-id": sid, "content-type": "application/json"}  # fmt: skip
    data = orjson.dumps(body)
    for retry in range(4):
        async with http.post(url + "/v1/messages", data=data, headers=headers) as r:
            raw = await r.read()
            if r.status == 200:
                attempts = int(r.headers.get("x-gateway-attempts", "1"))
                cost = float(r.headers.get("x-gateway-cost-usd", "0") or 0)
                return orjson.loads(raw), attempts, cost, retry
            last = f"{r.status}: {raw[:300]!r}"
        await asyncio.sleep(0.05)
    raise Errors(f"request failed 4 times, last {last}")


async def one_turn(
    http: aiohttp.ClientSession, url: str, model: str, system: list[Any], tool_list: list[Any],
    s: Session,
) -> None:  # fmt: skip
    turn = len(s.turns)
    body = {"model": model, "max_tokens": 1024, "system": system, "tools": tool_list,
            "messages": marked(s.messages)}  # fmt: skip
    answer, attempts, cost, retries = await send(http, url, body, s.sid)
    usage = {k: int(answer["usage"].get(k) or 0) for k in
             ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
              "output_tokens")}  # fmt: skip
    s.turns.append(Turn(usage, attempts, cost, retries))
    content = answer["content"]
    s.messages.append({"role": "assistant", "content": content})
    nxt: list[dict[str, Any]] = []
    calls = [b for b in content if b.get("type") == "tool_use"]
    output = tool_output(s.index, turn)
    if calls:
        nxt += [{"type": "tool_result", "tool_use_id": c["id"], "content": output} for c in calls]
    else:  # not expected: the fake calls the tool the reminder names
        nxt.append({"type": "text", "text": output})
    nxt.append({"type": "text", "text": reminder(turn + 1)})
    s.messages.append({"role": "user", "content": nxt})


SESSION_RE = re.compile(r"\[session (\d+)\]")


def served_by(
    fakes: list[FakeProvider], upstream: str
) -> tuple[dict[tuple[int, int], list[int]], int]:
    """(session, turn) -> the deployments that answered it (indexes), from the fakes'
    records of ``upstream``; and the records that named no session."""
    out: dict[tuple[int, int], list[int]] = {}
    unknown = 0
    for d, fake in enumerate(fakes):
        for rec in fake.requests:
            if rec.model != upstream or not isinstance(rec.body, dict):
                continue
            msgs = rec.body.get("messages") or []
            first = msgs[0]["content"] if msgs else ""
            text = first[0].get("text", "") if isinstance(first, list) and first else str(first)
            m = SESSION_RE.search(text)
            if m is None:
                unknown += 1
                continue
            turn = sum(1 for x in msgs if x.get("role") == "assistant")
            out.setdefault((int(m.group(1)), turn), []).append(d)
    return out, unknown


async def scenario(
    name: str, aff: str | None, outage: bool, args: argparse.Namespace, url: str,
    fakes: list[FakeProvider], now: list[float], sids: list[str], log: tuple[Path, Any],
) -> dict[str, Any]:  # fmt: skip
    model = model_name(name)
    upstream = "claude-bench-" + model[3:]
    for f in fakes:
        f.reset()
        assert f.prompt_cache is not None
        f.prompt_cache.clear()
    system, tool_list = system_blocks(), tools()
    sessions = [Session(i, sids[i]) for i in range(args.sessions)]
    out_from, out_to = (args.turns // 3, 2 * args.turns // 3) if outage else (-1, -1)
    port_a = int(fakes[0].url.rsplit(":", 1)[1])
    log_path, log_file = log
    log_file.flush()
    log_start = log_path.stat().st_size
    t0 = time.monotonic()
    round_s: list[float] = []
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=120)
    ) as http:
        for r in range(args.turns):
            if r == out_from:
                await fakes[0].stop()
            if r == out_to:
                await fakes[0].start(port=port_a)
                await asyncio.sleep(EJECT_COOLDOWN_S + 0.05)  # the ejection has run out
            r0 = time.monotonic()
            await asyncio.gather(
                *(one_turn(http, url, model, system, tool_list, s) for s in sessions)
            )
            round_s.append(time.monotonic() - r0)
            now[0] += ROUND_S
    wall = time.monotonic() - t0
    await asyncio.sleep(0.2)  # the access log written
    log_file.flush()
    events = log_events(log_path, log_start, log_path.stat().st_size)
    served, unknown = served_by(fakes, upstream)
    res = figures(name, aff, outage, sessions, served, args)
    res.update(
        wall_s=round(wall, 2),
        round_s_median=round(sorted(round_s)[len(round_s) // 2], 3),
        outage_rounds=[out_from, out_to - 1] if outage else None,
        unattributed_records=unknown,
        events={k: v for k, v in sorted(events.items()) if k != "request_completed"},
    )
    for f in fakes:
        f.reset()
    return res


def usd(u: dict[str, int]) -> float:
    return (
        u["input_tokens"] * PRICE["input"]
        + u["cache_creation_input_tokens"] * PRICE["cache_write"]
        + u["cache_read_input_tokens"] * PRICE["cache_read"]
        + u["output_tokens"] * PRICE["output"]
    ) / 1e6


def prompt(u: dict[str, int]) -> int:
    return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]


def figures(
    name: str, aff: str | None, outage: bool, sessions: list[Session],
    served: dict[tuple[int, int], list[int]], args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    tot = Counter[str]()
    dep_prompt = [0, 0, 0]
    per_session: list[dict[str, Any]] = []
    doubles = 0
    for s in sessions:
        misses, path = 0, []
        for t, turn in enumerate(s.turns):
            tot.update(turn.usage)
            if t == 0 or turn.usage["cache_read_input_tokens"] < prompt(s.turns[t - 1].usage):
                misses += 1
            deps = served.get((s.index, t), [])
            doubles += max(len(deps) - 1, 0)
            d = deps[-1] if deps else -1
            path.append(LETTERS[d] if d >= 0 else "?")
            if d >= 0:
                dep_prompt[d] += prompt(turn.usage)
        moves = sum(1 for a, b in itertools.pairwise(path) if a != b)
        home = Counter(path).most_common(1)[0][0]
        first = None
        if aff == "session":
            order = affinity.ranked(affinity.digest(TEAM, s.sid), PROVIDERS, [1, 1, 1])
            first = LETTERS[order[0]]
        per_session.append({
            "session": s.index, "misses": misses, "moves": moves, "home": home,
            "first_choice": first, "path": "".join(path),
            "attempts_over_1": sum(1 for x in s.turns if x.attempts > 1),
            "client_retries": sum(x.client_retries for x in s.turns),
        })  # fmt: skip
        if moves and outage:  # the prompt tokens per turn, "input/read/write" each
            per_session[-1]["turns"] = " ".join(
                f"{x.usage['input_tokens']}/{x.usage['cache_read_input_tokens']}/"
                f"{x.usage['cache_creation_input_tokens']}"
                for x in s.turns
            )
    prompt_total = (
        tot["input_tokens"] + tot["cache_read_input_tokens"] + tot["cache_creation_input_tokens"]
    )
    homes = Counter(p["home"] for p in per_session)
    n = len(sessions)
    return {
        "scenario": name,
        "affinity": aff,
        "deployments": 1 if aff is None else 3,
        "outage": outage,
        "tokens": dict(tot),
        "prompt_tokens": prompt_total,
        "cached_share": tot["cache_read_input_tokens"] / prompt_total if prompt_total else 0.0,
        "usd": usd(dict(tot)),
        "gateway_cost_usd": round(sum(t.cost_usd for s in sessions for t in s.turns), 6),
        "misses_mean": sum(p["misses"] for p in per_session) / n,
        "moves_mean": sum(p["moves"] for p in per_session) / n,
        "sessions_per_deployment": {x: homes.get(x, 0) for x in LETTERS},
        "prompt_share": {
            x: (dep_prompt[i] / prompt_total if prompt_total else 0.0)
            for i, x in enumerate(LETTERS)
        },
        "requests_with_retries": sum(p["attempts_over_1"] for p in per_session),
        "client_retries": sum(p["client_retries"] for p in per_session),
        "answered_twice_upstream": doubles,
        "off_first_choice": sum(
            1 for p in per_session if p["first_choice"] and p["home"] != p["first_choice"]
        ),
        "sessions": per_session,
    }


def outage_cost(with_outage: dict[str, Any], without: dict[str, Any]) -> None:
    """Extra misses per move, per session that moved: (misses with the outage - misses of
    the same session without it) / its moves with the outage."""
    base = {p["session"]: p["misses"] for p in without["sessions"]}
    per = []
    for p in with_outage["sessions"]:
        if p["moves"]:
            p["extra_misses_per_move"] = (p["misses"] - base[p["session"]]) / p["moves"]
            per.append(p["extra_misses_per_move"])
    with_outage["moved_sessions"] = len(per)
    with_outage["extra_per_move_max"] = max(per) if per else None
    with_outage["extra_per_move_mean"] = sum(per) / len(per) if per else None


# --- the load check ---------------------------------------------------------------------


def bucket_shares(weights: list[float]) -> list[float]:
    """Each deployment's share of the 1,024 buckets' first choices: what the load tends to
    over many sessions, sampling aside."""
    inverse = pow(0x9E3779B1, -1, 1 << 32)
    counts = [0, 0, 0]
    for b in range(affinity.BUCKETS):
        session = ((b << 22) * inverse) & 0xFFFFFFFF
        assert affinity.bucket(session) == b
        counts[affinity.ranked(session, PROVIDERS, weights)[0]] += 1
    return [c / affinity.BUCKETS for c in counts]


async def load_check(
    label: str, weights: list[float], aff: str, n: int, url: str, fakes: list[FakeProvider],
    rng: random.Random,
) -> dict[str, Any]:  # fmt: skip
    model = load_model(label, aff)
    upstream = "claude-bench-" + model[3:]
    for f in fakes:
        f.reset()
    sids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
    queue: asyncio.Queue[str] = asyncio.Queue()
    for sid in sids:
        queue.put_nowait(sid)
    errors = 0

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal errors
        while not queue.empty():
            sid = queue.get_nowait()
            body = {"model": model, "max_tokens": 64,
                    "messages": [{"role": "user", "content": f"load check {sid}: say hello"}]}  # fmt: skip
            try:
                await send(http, url, body, sid)
            except Errors:
                errors += 1

    t0 = time.monotonic()
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=120)
    ) as http:
        await asyncio.gather(*(worker(http) for _ in range(32)))
    wall = time.monotonic() - t0
    counts = [sum(1 for r in f.requests if r.model == upstream) for f in fakes]
    total = sum(counts) or 1
    want = [w / sum(weights) for w in weights]
    share = [c / total for c in counts]
    dev = [s / w - 1 for s, w in zip(share, want, strict=True)]
    out: dict[str, Any] = {
        "weights": label, "affinity": aff, "sessions": n, "requests": counts,
        "weight_share": want, "share": share, "relative_deviation": dev,
        "worst_deviation": max(dev, key=abs), "errors": errors, "wall_s": round(wall, 2),
        "requests_per_s": round(n / wall, 1),
    }  # fmt: skip
    if aff == "session":
        out["bucket_share"] = bucket_shares(weights)
        predicted = Counter(
            affinity.ranked(affinity.digest(TEAM, s), PROVIDERS, weights)[0] for s in sids
        )
        out["predicted_share"] = [predicted[i] / n for i in range(3)]
        # which fake answered each session (the session id is in the prompt)
        where: dict[str, int] = {}
        for d, f in enumerate(fakes):
            for r in f.requests:
                if r.model == upstream:
                    where[r.body["messages"][0]["content"].split()[2].rstrip(":")] = d
        out["on_first_choice"] = sum(
            1 for s in sids
            if where.get(s) == affinity.ranked(affinity.digest(TEAM, s), PROVIDERS, weights)[0]
        )  # fmt: skip
    for f in fakes:
        f.reset()
    return out


# --- the report -------------------------------------------------------------------------


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(out: dict[str, Any]) -> tuple[str, bool]:
    rows = {r["scenario"]: r for r in out["scenarios"]}
    single = rows["single"]
    lines = [
        f"# Prompt cache across deployments ({out['date']})",
        "",
        f"{out['sessions']} sessions x {out['turns']} turns through one `llm-gateway serve`, "
        f"three fake Anthropic deployments A/B/C (each its own prompt cache, TTL {TTL_S:g} s, "
        f"minimum {MINIMUM} tokens), one virtual clock advanced {ROUND_S:g} s per round "
        f"(a round = one turn of every session, sent at once). Outage: A's server stopped "
        f"(connection refused) for rounds {out['outage_rounds'][0]}-{out['outage_rounds'][1]} "
        f"= {out['outage_virtual_s']:g} virtual s, then started again on the same port with its "
        f"cache kept. USD at Claude Sonnet list prices (input 3, cache write 3.75, cache read 0.30, "
        f"output 15 per million).",
        "",
        "| scenario | cached share | USD | USD vs single | misses / session | moves / session "
        "| extra misses / move (max) | sessions A/B/C | prompt tokens A/B/C |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in out["scenarios"]:
        spd = r["sessions_per_deployment"]
        ps = r["prompt_share"]
        lines.append(
            f"| {r['scenario']} | {pct(r['cached_share'])} | {r['usd']:.2f} "
            f"| {r['usd'] / single['usd']:.2f}x | {r['misses_mean']:.2f} | {r['moves_mean']:.2f} "
            f"| {fmt(r.get('extra_per_move_max'))} | {spd['A']}/{spd['B']}/{spd['C']} "
            f"| {100 * ps['A']:.0f}/{100 * ps['B']:.0f}/{100 * ps['C']:.0f} % |"
        )
    lines += ["", "Per scenario: requests the gateway retried (x-gateway-attempts > 1), "
              "client retries (non-200 answers), gateway-billed USD (x-gateway-cost-usd), "
              "wall time, gateway log events.", ""]  # fmt: skip
    for r in out["scenarios"]:
        ev = ", ".join(f"{k} {v}" for k, v in r["events"].items()) or "none"
        extra = ""
        if r.get("moved_sessions") is not None:
            extra = (f"; moved sessions {r['moved_sessions']}, extra misses / move mean "
                     f"{fmt(r.get('extra_per_move_mean'))}")  # fmt: skip
        if r["answered_twice_upstream"] or r["unattributed_records"]:
            extra += (f"; upstream answered a turn twice {r['answered_twice_upstream']}, "
                      f"records naming no session {r['unattributed_records']}")  # fmt: skip
        lines.append(
            f"- {r['scenario']}: retried {r['requests_with_retries']}, client retries "
            f"{r['client_retries']}, billed {r['gateway_cost_usd']:.2f} USD, "
            f"off first choice {r['off_first_choice']}, {r['wall_s']:.1f} s "
            f"(round median {r['round_s_median'] * 1000:.0f} ms){extra}; events: {ev}"
        )
    so = rows["session+outage"]
    first_out, last_out = out["outage_rounds"]
    gap = (last_out + 1 - (first_out - 1)) * ROUND_S
    lines += ["", f"A session back on A after the outage comes {gap:g} virtual s after its last "
              f"turn there (TTL {TTL_S:g} s): "
              + ("its entries, and the shared system prefix, have expired, so it writes its "
                 "whole prompt again: two misses per session that moved (one on leaving, one on "
                 "returning), one per move." if gap >= TTL_S else
                 "its entries are still live, so it reads what it had cached there and writes "
                 "what was added since (still a miss by the count above).")]  # fmt: skip
    moved = [p for p in so["sessions"] if p["moves"]]
    if moved:
        lines += ["", "session+outage, sessions that moved (deployment per turn, misses):", ""]
        lines += [f"- {p['session']:3d} `{p['path']}` misses {p['misses']}" for p in moved]
    lines += ["", f"Load check: {out['load_sessions']} sessions of one short request each "
              "(32 at once), requests counted per fake.", "",
              "| weights | affinity | requests A/B/C | share A/B/C | weight share A/B/C "
              "| deviation A/B/C | worst | bucket share A/B/C | on first choice |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for lc in out["load"]:
        bs = lc.get("bucket_share")
        lines.append(
            f"| {lc['weights']} | {lc['affinity']} | {'/'.join(map(str, lc['requests']))} "
            f"| {'/'.join(f'{100 * x:.1f}' for x in lc['share'])} % "
            f"| {'/'.join(f'{100 * x:.1f}' for x in lc['weight_share'])} % "
            f"| {'/'.join(f'{100 * x:+.1f}' for x in lc['relative_deviation'])} % "
            f"| {100 * lc['worst_deviation']:+.1f} % "
            f"| {'/'.join(f'{100 * x:.1f}' for x in bs) + ' %' if bs else '-'} "
            f"| {lc.get('on_first_choice', '-')} |"
        )
    # the goals
    none_, sess = rows["none"], rows["session"]
    nout = rows["none+outage"]
    ceiling = 0.95 * single["cached_share"]
    load_s = [lc for lc in out["load"] if lc["affinity"] == "session"]
    load_n = [lc for lc in out["load"] if lc["affinity"] == "none"]
    worst_s = max((abs(x) for lc in load_s for x in lc["relative_deviation"]), default=0.0)
    worst_n = max((abs(x) for lc in load_n for x in lc["relative_deviation"]), default=0.0)
    extra = so.get("extra_per_move_max")
    goals = [
        ("session: cached share >= 95 % of single's", sess["cached_share"] >= ceiling,
         f"{pct(sess['cached_share'])} vs {pct(ceiling)} (single {pct(single['cached_share'])}; "
         f"none {pct(none_['cached_share'])})"),
        ("load: every deployment within +-15 % of its weight's share",
         None if out["load_sessions"] < LOAD_JUDGED else worst_s <= 0.15,
         f"worst {100 * worst_s:.1f} % (none {100 * worst_n:.1f} %)"
         + (f"; not judged under {LOAD_JUDGED:,} sessions (sampling alone spreads more)"
            if out["load_sessions"] < LOAD_JUDGED else "")),
        ("session+outage: extra misses per move <= 1 (max over moved sessions)",
         extra is not None and extra <= 1.0,
         f"{fmt(extra)} (sessions that moved: {so.get('moved_sessions')}) "
         f"(none+outage {fmt(nout.get('extra_per_move_max'))})"
         + ("; no session moved: the outage tested nothing" if extra is None else "")),
    ]  # fmt: skip
    lines += ["", "Goals:", ""]
    ok = True
    for what, passed, detail in goals:
        ok &= passed is not False
        verdict = "SKIP" if passed is None else "PASS" if passed else "FAIL"
        lines.append(f"- {verdict} {what}: {detail}")
    out["goals"] = [{"goal": w, "pass": p, "detail": d} for w, p, d in goals]
    lines += ["", f"Wall time {out['wall_s']:.0f} s."]
    return "\n".join(lines) + "\n", ok


# --- main -------------------------------------------------------------------------------


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    procs.install_cleanup()
    rng = random.Random(args.seed)
    sids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(args.sessions)]
    now = [0.0]
    fakes = [FakeProvider() for _ in PROVIDERS]
    for f in fakes:
        f.prompt_cache = PromptCache(clock=lambda: now[0], ttl=TTL_S, minimum=MINIMUM)
        await f.start()
    workdir = Path(tempfile.mkdtemp(prefix="prompt-cache-bench-"))
    log_path = workdir / "gateway.log"
    t0 = time.monotonic()
    try:
        write_policies(workdir / "policies", [f.url for f in fakes])
        port = procs.free_port()
        gw, log_file = start_gateway(workdir / "policies", port, log_path)
        with log_file:
            try:
                procs.wait_http(gw, port, "/readyz", 30, "the gateway")
            except RuntimeError:
                log_file.flush()
                print(log_path.read_text()[-3000:], file=sys.stderr)
                raise
            url = f"http://127.0.0.1:{port}"
            rows = []
            for name, aff, outage in SCENARIOS:
                row = await scenario(
                    name, aff, outage, args, url, fakes, now, sids, (log_path, log_file)
                )
                print(f"{name}: cached {pct(row['cached_share'])}, {row['usd']:.2f} USD, "
                      f"{row['wall_s']:.1f} s", flush=True)  # fmt: skip
                rows.append(row)
                now[0] += 3600.0
            by = {r["scenario"]: r for r in rows}
            outage_cost(by["none+outage"], by["none"])
            outage_cost(by["session+outage"], by["session"])
            loads = []
            for label, weights in LOADS:
                for aff in ("session", "none"):
                    lc = await load_check(label, weights, aff, args.load_sessions, url, fakes, rng)
                    print(
                        f"load {label} {aff}: {lc['requests']} in {lc['wall_s']:.1f} s", flush=True
                    )
                    loads.append(lc)
            procs.stop(gw)
    finally:
        for f in fakes:
            await f.stop()
        procs.stop_all()
        if args.log and log_path.exists():
            shutil.copyfile(log_path, args.log)
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "sessions": args.sessions,
        "turns": args.turns,
        "load_sessions": args.load_sessions,
        "seed": args.seed,
        "round_virtual_s": ROUND_S,
        "ttl_s": TTL_S,
        "outage_rounds": [args.turns // 3, 2 * args.turns // 3 - 1],
        "outage_virtual_s": (2 * args.turns // 3 - args.turns // 3) * ROUND_S,
        "policy": FAST_POLICY,
        "price_per_million": PRICE,
        "scenarios": rows,
        "load": loads,
        "wall_s": time.monotonic() - t0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--load-sessions", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="9 sessions x 9 turns, 300 load sessions")
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--log", metavar="FILE", help="keep the gateway's log (JSON lines) here")
    args = p.parse_args()
    if args.quick:
        args.sessions, args.turns, args.load_sessions = 9, 9, 300
    if args.turns < 3:
        p.error("--turns must be at least 3 (the outage is the middle third)")
    out = asyncio.run(measure(args))
    text, ok = report(out)
    print(text)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d-%H%M")
        (RESULTS / f"{stamp}-prompt-cache.md").write_text(text)
        (RESULTS / f"{stamp}-prompt-cache.json").write_text(json.dumps(out, indent=1) + "\n")
        print(f"saved bench/results/{stamp}-prompt-cache.md and .json")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
