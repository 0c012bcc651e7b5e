"""Every recipe of the README, followed in the README's order on one ``llm-gateway serve
--demo``, shows what the README says it shows.

The recipes are the fenced blocks of the README's Quickstart and Clients sections, read from
README.md itself; only the port is changed. Python snippets run as they are (a fresh
interpreter), curl commands run in bash, ``llm-gateway simulate`` runs as ``python -m
gateway``. The commands of the external clients (``claude``, ``codex``, ``llm``, ``openai``,
``aider``) are replayed as the requests those programs send, at their size
(tests/readme_clients.py), with the settings the README gives them. All of the README costs
the demo team about 0.08 USD: what one recipe spends must not change what a later one shows.
A command the test does not know fails it, so a new recipe needs a check here.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import yaml

from gateway.routing.load import bundled_policy_dir, load_policy_dir
from gateway.testing.sim import SimProvider
from gateway.web.routes import V1
from tests import readme_clients as rc
from tests.process import GatewayProcess
from tests.test_docs import ROOT, Block, blocks

README = "README.md"
README_TEXT = (ROOT / README).read_text(encoding="utf-8")
LONG_REPLY = SimProvider().reply["sim-long"]
#: What the external clients' recipes of the README cost the demo team, at the least, as
#: the real programs send them (Claude Code's first request alone is about 0.009 USD at the
#: demo's prices).
README_COST_USD = 0.077
_NO_REQUEST = {"pip", "mkdir", "echo"}  # installing, aider's cache file


def recipe_blocks() -> list[Block]:
    """The fenced blocks of the README's Quickstart and Clients sections, in order."""
    sections: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(README_TEXT.splitlines(), 1):
        fenced ^= line.lstrip().startswith("```")
        if not fenced and line.startswith("## "):
            sections.append((n, line[3:].strip()))

    def section(b: Block) -> str:
        return [title for n, title in sections if n < b.line][-1]

    return [b for b in blocks(README) if section(b) in ("Quickstart", "Clients")]


def shell_commands(text: str) -> list[str]:
    """A shell block's commands: continued lines and quoted newlines joined, ``&&`` split."""
    found: list[str] = []
    pending = ""
    for line in text.splitlines():
        pending += line + "\n"
        try:
            rc.shell_words(pending)
        except ValueError:  # an open quote: the command goes on
            continue
        if pending.rstrip().endswith("\\"):
            continue
        joined = pending.replace("\\\n", " ")
        found.extend(c.strip() for c in joined.split(" && ") if c.strip())
        pending = ""
    assert not pending.strip(), f"unterminated command: {pending}"
    return found


def headers_of(text: str) -> dict[str, str]:
    return {
        k.strip().lower(): v.strip()
        for k, _, v in (line.partition(":") for line in text.splitlines() if ":" in line)
    }


def check_promise(a: rc.Answer) -> None:
    """What the README's table says each demo model does, seen in one answer; and no answer
    is the budget's downgrade (the demo team has no budget)."""
    seen = f"{a.client} on {a.asked}: {dict(a.headers)} {a.text!r}"
    assert "budget_downgrade" not in a.recovery, seen
    answered_by = {"sim-down": "sim-ok", "sim-claude": "sim-gpt"}.get(a.asked, a.asked)
    assert a.model == answered_by, seen
    attempts = {"sim-flaky": "2", "sim-overloaded": "3"}.get(a.asked)
    if attempts:  # the 429 / the overloads were absorbed
        assert a.headers["x-gateway-attempts"] == attempts and "retry" in a.recovery, seen
    if a.asked == "sim-long":  # cut at 24 tokens: one whole answer (a stream's headers
        # left before the cut: the whole text and its end say it)
        assert a.text == LONG_REPLY and a.finish in ("end_turn", "stop"), seen
    assert a.text or a.tool, seen


class Followed:
    """The README followed on one gateway: its exports, client configs and keys so far."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.env: dict[str, str] = {}
        self.configs: dict[str, str] = {}
        self.llm_keys: dict[str, str] = {}
        self.answers: list[rc.Answer] = []

    def here(self, text: str) -> str:
        """The README's text for this test's gateway: its port for 8080."""
        for host in ("127.0.0.1", "localhost"):
            text = text.replace(f"{host}:8080", f"{host}:{self.port}")
        return text

    def block(self, b: Block) -> None:
        where = f"{README}:{b.line}"
        if b.lang == "python":
            self.python(b.text, where)
        elif b.lang in ("toml", "yaml"):
            self.configs[b.lang] = b.text
        elif b.lang == "bash" and "curl " in b.text:
            self.curl(b.text, where)
        elif b.lang == "bash":
            for command in shell_commands(b.text):
                self.command(command, where)
        else:
            raise AssertionError(f"{where}: a ```{b.lang} recipe this test cannot follow")

    # ---- what runs as written ----

    def python(self, code: str, where: str) -> None:
        out = _run([sys.executable, "-c", self.here(code)], where)
        if 'model="sim-down"' in code:  # answered by sim-ok, then sim-long's whole story
            first, _, rest = out.partition("\n")
            assert first.endswith("model sim-ok."), f"{where}: {out!r}"
            assert rest == LONG_REPLY, f"{where}: sim-long's story is not whole: {out!r}"
        elif 'model="sim-claude"' in code:  # sim-gpt answers, across formats
            assert re.fullmatch(r"sim-gpt \S.*\n", out), f"{where}: {out!r}"
        else:
            raise AssertionError(f"{where}: a Python recipe with no check here:\n{code}")

    def curl(self, script: str, where: str) -> None:
        out = _run(["bash", "-c", self.here(script)], where)
        if "budget-key" in script:  # three answers by sim-gpt, then downgraded to sim-ok
            answers = [headers_of(a) for a in out.strip().split("\n\n")]
            models = [a.get("x-gateway-model") for a in answers]
            assert models == ["sim-gpt"] * 3 + ["sim-ok"], f"{where}: {out}"
            assert [a.get("x-gateway-recovery") for a in answers][-1] == "budget_downgrade", out
        elif "/admin/budgets" in script:  # the day's total of the team with a budget
            teams = json.loads(out)["teams"]
            assert set(teams) == {"demo-budget"}, f"{where}: {out}"
            assert teams["demo-budget"]["state"] == "spent", f"{where}: {out}"
        elif '"model": "sim-flaky"' in script:  # the 429 was absorbed
            h = headers_of(out.partition("\r\n\r\n")[0])
            assert out.startswith("HTTP/1.1 200"), f"{where}: {out}"
            assert (h["x-gateway-attempts"], h["x-gateway-recovery"]) == ("2", "retry"), out
        else:
            raise AssertionError(f"{where}: a curl recipe with no check here:\n{script}")

    def command(self, command: str, where: str) -> None:
        inline, words = rc.shell_words(command)
        if not words or words[0] in _NO_REQUEST:
            return
        env = {**self.env, **inline}
        program, args = words[0], words[1:]
        if program == "export":
            self.env.update(w.split("=", 1) for w in args)  # type: ignore[misc]
        elif program == "llm-gateway" and args[:1] == ["serve"]:
            assert (inline, args) == served(), f"{where}: a second gateway"
        elif program == "llm-gateway" and args[:1] == ["simulate"]:
            out = _run([sys.executable, "-m", "gateway", *args], where)
            assert out.splitlines()[-1].startswith("answered after 4 attempt(s)"), out
        elif program == "llm" and args[:2] == ["keys", "set"]:
            self.llm_keys[args[2]] = args[args.index("--value") + 1]
        elif (replay := self.replays().get(program)) is not None:
            answers = replay(env, words)
            for a in answers:
                check_promise(a)
            self.answers.extend(answers)
        else:
            raise AssertionError(f"{where}: `{command}`: a command this test cannot follow")

    # ---- the external clients, replayed ----

    def replays(self) -> dict[str, Callable[[dict[str, str], list[str]], list[rc.Answer]]]:
        return {
            "claude": self.claude,
            "codex": self.codex,
            "llm": self.llm,
            "openai": lambda env, argv: rc.openai_cli(
                self.here(env["OPENAI_BASE_URL"]), env["OPENAI_API_KEY"], argv
            ),
            "aider": self.aider,
        }

    def claude(self, env: dict[str, str], argv: list[str]) -> list[rc.Answer]:
        base = self.here(env["ANTHROPIC_BASE_URL"])
        answers = rc.claude_code(base, env["ANTHROPIC_AUTH_TOKEN"], env, argv)
        prompt = argv[argv.index("-p") + 1]
        named = re.fullmatch(r"Use (\w+) to run `([^`]+)`", prompt)
        if named:  # the tool the prompt names is called with its command, then answered
            assert answers[1].tool == (named[1], {"command": named[2]}), answers[1]
            assert answers[2].text == "The tool returned: (no output)", answers[2]
        return answers

    def codex(self, env: dict[str, str], argv: list[str]) -> list[rc.Answer]:
        config = tomllib.loads(self.configs["toml"])
        provider = config["model_providers"][config["model_provider"]]
        assert provider["wire_api"] == "responses"
        (_, prompt) = rc.positional(argv[1:], with_value=set())
        key = env[provider["env_key"]]
        return rc.codex(self.here(provider["base_url"]), key, config["model"], prompt)

    def llm(self, env: dict[str, str], argv: list[str]) -> list[rc.Answer]:
        entries = {e["model_id"]: e for e in yaml.safe_load(self.configs["yaml"])}
        entry = entries[argv[argv.index("-m") + 1]]
        key = self.llm_keys[entry["api_key_name"]]
        answers = rc.llm_cli(self.here(entry["api_base"]), key, entry, argv)
        if "--functions" in argv:  # lookup_weather(city="Paris"), then its result
            assert answers[0].tool == ("lookup_weather", {"city": "Paris"}), answers[0]
            assert answers[-1].text == "The tool returned: sunny in Paris", answers[-1]
        return answers

    def aider(self, env: dict[str, str], argv: list[str]) -> list[rc.Answer]:
        model = argv[argv.index("--model") + 1].removeprefix("openai/")
        prompt = argv[argv.index("--message") + 1]
        base = self.here(env["OPENAI_API_BASE"])
        return rc.aider(base, env["OPENAI_API_KEY"], model, prompt)


def served() -> tuple[dict[str, str], list[str]]:
    """The README's ``llm-gateway serve`` command: its variables and arguments."""
    (command,) = [
        c
        for b in recipe_blocks()
        if b.lang == "bash"
        for c in shell_commands(b.text)
        if rc.shell_words(c)[1][:2] == ["llm-gateway", "serve"]
    ]
    env, words = rc.shell_words(command)
    return env, words[1:]


def _run(argv: list[str], where: str) -> str:
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{where}: exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def _costs(log: Path, team: str) -> list[tuple[str, float]]:
    """The id and cost of each request of ``team`` in the gateway's access log."""
    records = (json.loads(line) for line in log.read_text().splitlines() if line.startswith("{"))
    return [
        (r["request_id"], r["cost_usd"])
        for r in records
        if r.get("event") == "request_completed" and r.get("team") == team
    ]


async def test_every_readme_recipe_in_order_on_one_demo(tmp_path: Path) -> None:
    """Quickstart and Clients, in order: each recipe shows what the README says, although
    the recipes before it (the external clients' replays included) spent more than the
    whole README costs."""
    env, args = served()
    assert args == ["serve", "--demo"], args
    assert all(name.startswith("GATEWAY_") for name in env), env
    settings = {name.removeprefix("GATEWAY_").lower(): value for name, value in env.items()}
    log = tmp_path / "gateway.log"
    gw = await GatewayProcess(None, log=log, log_level="info", **settings).start()
    followed = Followed(gw.port)
    try:
        for b in recipe_blocks():
            await asyncio.to_thread(followed.block, b)
    finally:
        await gw.stop()
    clients = {a.client for a in followed.answers}
    assert clients == {"claude", "codex", "llm", "openai", "aider"}, clients
    replayed = {a.headers["x-request-id"] for a in followed.answers}
    spent = sum(cost for rid, cost in _costs(log, "demo") if rid in replayed)
    assert spent >= README_COST_USD, f"the replays cost the demo team only {spent:.6f} USD"


def test_only_the_budget_recipes_team_has_a_budget() -> None:
    """Any key but ``budget-key`` is the demo team, which has no budget: what the README's
    recipes spend, in any order and however often, changes nothing they show."""
    policies = load_policy_dir(bundled_policy_dir())
    assert policies.default_team == "demo" and policies.teams["demo"].budget is None
    assert policies.team_for_key("budget-key") == "demo-budget"
    assert [t for t, team in policies.teams.items() if team.budget] == ["demo-budget"]


def test_the_readme_has_a_budget_recipe_that_spends_a_team_of_its_own() -> None:
    """The budget is shown on its own team, and how to see /admin/budgets is said."""
    recipes = "".join(b.text for b in recipe_blocks())
    assert "budget-key" in recipes and "/admin/budgets" in recipes
    assert "GATEWAY_ADMIN_KEY" in served()[0]
    assert re.search(r"without (that variable|it)[^.]*answers? 404", README_TEXT)


def test_the_readme_says_what_its_python_snippets_need() -> None:
    """Each module a Python recipe imports is installed by a ``pip install`` said before it."""
    for b in recipe_blocks():
        if b.lang != "python":
            continue
        before = "\n".join(README_TEXT.splitlines()[: b.line - 1])
        installs = " ".join(re.findall(r"pip install ([\w .'\[\]<>=-]+)", before))
        for module in re.findall(r"^(?:from|import) (\w+)", b.text, re.MULTILINE):
            assert module in installs.split(), f"{README}:{b.line}: `{module}` is not installed"


def test_the_readme_names_every_endpoint() -> None:
    """The Clients section lists every ``/v1/`` path the gateway answers."""
    clients = README_TEXT.split("## Clients", 1)[1].split("\n### ", 1)[0]
    missing = [path for path in V1 if f"`{path}`" not in clients]
    assert not missing, f"the README's Clients section does not name {missing}"
