"""One client scenario, run inside a network namespace of its own.

``python -m tests.clients.scenario IN.pickle OUT.pickle`` (started by
:func:`tests.clients.runner.run_scenario`, normally under ``unshare -n`` with only
the loopback interface up) starts the scripted fake provider and the real gateway
in front of it (``tests.harness``), applies the scenario's script, runs the
client commands one after the other with the gateway's address filled in, and
writes what happened: each command's exit code and output, every request the
fake provider received and every request the gateway answered.

The fake, the gateway and the client share the namespace, so nothing the client
does can leave the machine: any other address is unreachable.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.testing import FakeProvider, ScriptEntry
from gateway.web import routes
from gateway.web.app import create_app


def _without_sdks() -> None:
    """Skip importing the openai/anthropic SDKs that tests.harness imports (~3 s a run).

    The scenario process never makes SDK clients (the client is a real program), so
    stand-ins with the class names the harness refers to are enough. Only done when
    the SDKs are not imported yet, i.e. in the scenario's own process.
    """
    import types

    for name, classes in (
        ("openai", ("OpenAI", "AsyncOpenAI")),
        ("anthropic", ("AsyncAnthropic",)),
    ):
        if name not in sys.modules:
            module = types.ModuleType(name)
            for cls in classes:
                setattr(module, cls, type(cls, (), {}))
            sys.modules[name] = module


if __name__ == "__main__":
    _without_sdks()

from tests.harness import (  # noqa: E402
    CLIENT_KEY,
    PROVIDER_KEY,
    PROVIDER_KEY_ENV,
    Harness,
    policy_files,
    write_policies,
)
from tests.waiting import eventually  # noqa: E402

#: Models the client scenarios add to the harness's (all served by the fake).
EXTRA_MODELS = {
    # Claude Code's small/fast model (titles, quota checks) gets its own name so its
    # requests never consume the script of the main model.
    "claude-haiku-test": {"provider": "fake-anthropic"},
}


@dataclass
class Command:
    """A client command. ``{url}``, ``{work}``, ``{home}`` and ``{key}`` are filled in."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    timeout: float = 120.0


@dataclass
class Scenario:
    commands: list[Command]
    #: (model or None, entry) pairs pushed onto the fakes' scripts before the commands run
    #: (a cloud model's upstream name: on the fake cloud serving it; use no ``None`` then).
    script: list[tuple[str | None, ScriptEntry]] = field(default_factory=list)
    #: Deep-merged over the harness's fast test policy.
    policy: dict[str, Any] | None = None
    #: Files written under the work dir before the commands run (content is templated).
    files: dict[str, str] = field(default_factory=dict)
    #: Full replies per (upstream) model.
    replies: dict[str, str] = field(default_factory=dict)
    chunks: int = 8
    #: Models added to the policy's (e.g. Claude on the fake clouds, below).
    models: dict[str, Any] = field(default_factory=dict)
    #: Also start the fake Bedrock (every request's SigV4 signature checked) and the fake
    #: Vertex (Google tokens from a fake token service), as providers ``bedrock-us`` and
    #: ``vertex-eu``; their requests are in ``fake_requests`` with ``cloud`` set.
    clouds: bool = False


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    seconds: float


@dataclass
class GatewayRequest:
    method: str
    path: str
    query: str
    status: int
    headers: dict[str, str]  # the gateway's response headers (lower-cased)
    request_headers: dict[str, str]  # what the client sent (lower-cased, credentials masked)


@dataclass
class Outcome:
    commands: list[CommandResult]
    fake_requests: list[dict[str, Any]]
    gateway_requests: list[GatewayRequest]
    files: dict[str, str]  # every small text file under the work dir afterwards
    metrics: str
    gateway_url: str
    namespace: str


_MASKED = {"authorization", "x-api-key"}


class RecordingHarness(Harness):
    """The test harness, plus a record of every response the gateway starts."""

    async def start(self) -> RecordingHarness:
        self.seen: list[GatewayRequest] = []
        self.handling = 0  # requests being handled (recorded in ``seen`` when answered)
        make_handler = routes.make_handler

        def recording_handler(gw: Any, paths: Any) -> Any:
            handle = make_handler(gw, paths)

            async def recording(request: web.BaseRequest) -> web.StreamResponse:
                self.handling += 1
                try:
                    response = await handle(request)
                finally:
                    self.handling -= 1
                self.seen.append(
                    GatewayRequest(
                        method=request.method,
                        path=request.path,
                        query=request.query_string,
                        status=response.status,
                        headers={k.lower(): v for k, v in response.headers.items()},
                        request_headers={
                            k.lower(): ("***" if k.lower() in _MASKED else v)
                            for k, v in request.headers.items()
                        },
                    )
                )
                return response

            return recording

        routes.make_handler = recording_handler  # this process runs one scenario only
        self.app = create_app(self.settings, metrics=self.metrics)
        port = await self.app.start("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{port}"
        return self


def _fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


async def _run_command(cmd: Command, values: dict[str, str], cwd: Path) -> CommandResult:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": values["home"],
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": values["tmp"],
    }
    env.update({k: _fill(v, values) for k, v in cmd.env.items()})
    argv = [_fill(a, values) for a in cmd.argv]
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if cmd.stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    stdin = _fill(cmd.stdin, values).encode() if cmd.stdin is not None else None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), cmd.timeout)
        code: int | None = proc.returncode
    except TimeoutError:
        os.killpg(proc.pid, 9)
        out, err = await proc.communicate()
        code = None
    return CommandResult(
        argv, code, out.decode(errors="replace"), err.decode(errors="replace"),
        time.monotonic() - started,
    )  # fmt: skip


def _collect_files(work: Path) -> dict[str, str]:
    files = {}
    for path in work.rglob("*"):
        rel = path.relative_to(work)
        if rel.parts[0] in ("home", "tmp") or not path.is_file():
            continue
        if path.stat().st_size <= 65536:
            files[str(rel)] = path.read_text(errors="replace")
    return files


async def _start_clouds(stack: AsyncExitStack, work: Path) -> dict[str, FakeProvider]:
    """The fake Bedrock and Vertex, running, with this process's credentials for them
    (an AWS key pair; a Google service account whose token service is a fake too)."""
    from gateway.testing.fake_bedrock import FakeBedrock
    from gateway.testing.fake_google_token import FakeGoogleToken
    from gateway.testing.fake_vertex import FakeVertex

    bedrock = await stack.enter_async_context(FakeBedrock(region="us-east-1"))
    google = await stack.enter_async_context(FakeGoogleToken())
    vertex = FakeVertex(tokens=google.valid, project="acme-ml", region="europe-west1")
    await vertex.start()
    stack.push_async_callback(vertex.stop)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        os.environ.pop(name, None)
    os.environ.update(
        AWS_ACCESS_KEY_ID=bedrock.access_key,
        AWS_SECRET_ACCESS_KEY=bedrock.secret_key,
        AWS_SHARED_CREDENTIALS_FILE=str(work / "no-aws-credentials"),
        AWS_CONFIG_FILE=str(work / "no-aws-config"),
        AWS_EC2_METADATA_DISABLED="true",
        GOOGLE_APPLICATION_CREDENTIALS=str(google.service_account_file(work.parent)),
    )
    return {"bedrock": bedrock, "vertex": vertex}


def _cloud_providers(fakes: dict[str, FakeProvider]) -> dict[str, Any]:
    return {
        "bedrock-us": {"api": "bedrock", "region": "us-east-1", "base_url": fakes["bedrock"].url},
        "vertex-eu": {"api": "vertex", "project": "acme-ml", "region": "europe-west1",
                      "base_url": fakes["vertex"].url},
    }  # fmt: skip


def _records(fake: FakeProvider, cloud: str | None) -> list[dict[str, Any]]:
    return [
        {
            "method": r.method,
            "path": r.path,
            "query": r.query_string,
            "headers": r.headers,
            "body": r.body,
            "model": r.model,
            "cloud": cloud,
        }
        for r in fake.requests
    ]


async def run(sc: Scenario, work: Path) -> Outcome:
    async with AsyncExitStack() as stack:
        return await _run(sc, work, stack)


async def _run(sc: Scenario, work: Path, stack: AsyncExitStack) -> Outcome:
    os.environ[PROVIDER_KEY_ENV] = PROVIDER_KEY
    clouds = await _start_clouds(stack, work) if sc.clouds else {}
    fake = FakeProvider(chunks=sc.chunks)
    await fake.start()
    try:
        files = policy_files(fake.url, sc.policy)
        files["platform.yaml"]["models"].update(EXTRA_MODELS, **sc.models)
        if clouds:
            files["platform.yaml"]["providers"].update(_cloud_providers(clouds))
        with tempfile.TemporaryDirectory() as policy_dir:
            gw = await RecordingHarness(fake, write_policies(Path(policy_dir), files)).start()
            try:
                for f in (fake, *clouds.values()):  # a model's entries: on the fake serving it
                    for model, entry in sc.script:
                        f.push(entry, model=model)
                    f.reply.update(sc.replies)
                home, tmp = work / "home", work / "tmp"
                home.mkdir(parents=True, exist_ok=True)
                tmp.mkdir(parents=True, exist_ok=True)
                values = {
                    "url": gw.url,
                    "work": str(work),
                    "home": str(home),
                    "tmp": str(tmp),
                    "key": CLIENT_KEY,
                }
                for rel, content in sc.files.items():
                    path = work / _fill(rel, values)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(_fill(content, values))
                results = [await _run_command(c, values, work) for c in sc.commands]
                # the gateway has answered every request (the clients have exited) ...
                await eventually(lambda: gw.handling == 0, what="the gateway's last answer")
                await asyncio.sleep(0)  # ... and one loop pass runs its queued access logs
                from prometheus_client import generate_latest

                return Outcome(
                    commands=results,
                    fake_requests=_records(fake, None)
                    + [r for name, f in clouds.items() for r in _records(f, name)],
                    gateway_requests=gw.seen,
                    files=_collect_files(work),
                    metrics=generate_latest(gw.metrics.registry).decode(),
                    gateway_url=gw.url,
                    namespace=os.environ.get("LLM_GATEWAY_CLIENTS_NETNS", "host"),
                )
            finally:
                await gw.stop()
    finally:
        await fake.stop()


def main() -> None:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    # Under ``-m`` this module is ``__main__``: use the importable one, so that the
    # pickled outcome names classes the test process can load.
    from tests.clients import scenario as module

    sc = pickle.loads(src.read_bytes())
    work = dst.parent / "work"
    work.mkdir(exist_ok=True)
    outcome = asyncio.run(module.run(sc, work))
    dst.write_bytes(pickle.dumps(outcome))


if __name__ == "__main__":
    main()
