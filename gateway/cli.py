"""The ``llm-gateway`` command: serve, check, schema, simulate, hash-key.

``python -m gateway`` is the same command. Heavy modules (the server, the
simulator) are imported only by the subcommand that needs them, so ``check``
and ``hash-key`` start fast and work without the server's dependencies.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any


def _version() -> str:
    try:
        return metadata.version("llm-gateway")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="llm-gateway",
        description="A reverse proxy for LLM APIs that recovers from provider failures by policy.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve(sub)
    _add_check(sub)
    sub.add_parser(
        "schema",
        help="print the JSON Schema of a policy file",
        description="Print the JSON Schema (draft 2020-12) of one policy file, for editors and CI.",
    )
    _add_simulate(sub)
    sub.add_parser(
        "hash-key",
        help="print the sha256: form of a key read on stdin",
        description="Read a client key on stdin and print the sha256: form for a team file.",
    )
    return parser


_Subparsers = argparse._SubParsersAction  # argparse's own name for what add_subparsers returns


def _add_serve(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the gateway",
        description="Run the gateway. Settings come from GATEWAY_* variables; flags override them.",
    )
    serve.add_argument(
        "--policies", metavar="DIR", type=Path, help="policy directory (GATEWAY_POLICY_DIR)"
    )
    serve.add_argument("--host", metavar="H", help="address to listen on (GATEWAY_HOST)")
    serve.add_argument("--port", metavar="P", type=int, help="port to listen on (GATEWAY_PORT)")
    serve.add_argument(
        "--workers",
        metavar="N",
        type=_workers,
        help='worker processes on the one port, or "auto": one per usable core (GATEWAY_WORKERS)',
    )
    serve.add_argument(
        "--demo",
        action="store_true",
        help="bundled policies and the simulated provider; any client key is accepted",
    )


def _add_check(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check",
        help="validate a policy directory",
        description=(
            "Validate every policy file; print file:line: message per problem (exit 1)."
            " Provider api_key_env variables that are unset are warnings"
            " (file:line: warning: message, exit 0)."
        ),
    )
    check.add_argument("dir", metavar="DIR", type=Path, help="policy directory (or one file)")
    check.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings (unset api_key_env variables) as errors: exit 1",
    )


def _add_simulate(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    simulate = sub.add_parser(
        "simulate",
        help="replay scripted upstream outcomes through the real decision code",
        description=(
            "Replay a scripted sequence of upstream outcomes through the real decision code"
            " on a virtual clock and print the timeline. No network."
        ),
    )
    simulate.add_argument(
        "--policies",
        metavar="DIR",
        type=Path,
        default=Path(os.environ.get("GATEWAY_POLICY_DIR", "./policies")),
        help="policy directory (default: GATEWAY_POLICY_DIR or ./policies)",
    )
    simulate.add_argument("--team", metavar="T", required=True, help="team whose route to use")
    simulate.add_argument("--model", metavar="M", required=True, help="public model name asked for")
    simulate.add_argument(
        "--script",
        metavar="S",
        required=True,
        help='upstream outcomes in order, e.g. "429:ra=3,500,500,200"',
    )
    simulate.add_argument(
        "--path", default="/v1/chat/completions", help="endpoint path (default %(default)s)"
    )
    simulate.add_argument(
        "--field",
        metavar="NAME=JSON",
        action="append",
        help=(
            "a field of the simulated request body (repeatable), e.g. temperature=1.5:"
            " an attempt on a model whose format cannot carry it is refused and moves on"
        ),
    )
    simulate.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        help="the client's own timeout (as x-gateway-timeout): shortens the deadline",
    )
    simulate.add_argument(
        "--seed", metavar="N", type=int, default=0, help="random seed for jitter (default 0)"
    )
    simulate.add_argument(
        "--deployment",
        metavar="NAME=S",
        action="append",
        help=(
            "a script for one deployment of a model that has several (repeatable), e.g."
            ' --deployment "openai#1=429:ra=30"; other deployments take --script'
        ),
    )
    simulate.add_argument(
        "--session",
        metavar="S",
        help=(
            "the client's session (as x-gateway-session): prints the deployments in the"
            " session's order, and the attempts go by it"
        ),
    )
    simulate.add_argument(
        "--stream",
        action="store_true",
        help="the simulated client asks for a stream (implied by cut@N, stall@N, badchunk@N)",
    )
    simulate.add_argument(
        "--conversation",
        choices=("short", "agent"),
        default="short",
        help=(
            "the simulated request: one short message (default), or a coding agent's"
            " transcript with long tool results that compaction can shrink"
        ),
    )


def _workers(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f'expected a number >= 1 or "auto", got {value!r}')
    return n


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = build_parser().parse_args(argv)
    command: str = args.command
    if command == "serve":
        return _serve(args)
    if command == "check":
        return _check(args.dir, strict=args.strict)
    if command == "schema":
        return _schema()
    if command == "simulate":
        from gateway.simulate import main as simulate_main

        return int(simulate_main(args))
    return _hash_key()


def _serve(args: argparse.Namespace) -> int:
    from gateway.settings import GatewaySettings
    from gateway.web.malloc import return_large_blocks

    return_large_blocks()  # what a large request frees is given back (docs/operations.md)

    overrides: dict[str, Any] = {}
    if args.workers is not None:
        overrides["workers"] = args.workers
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.policies is not None:
        overrides["policy_dir"] = args.policies
    if args.demo:
        overrides["demo"] = True
        if args.policies is None:
            from gateway.routing.load import bundled_policy_dir

            overrides["policy_dir"] = bundled_policy_dir()
    settings = GatewaySettings(**overrides)
    if settings.worker_count() > 1:
        # before gateway.web.app: prometheus_client must see its multiprocess directory
        from gateway.web.workers import supervise

        return supervise(settings)
    from gateway.web.app import serve

    result = serve(settings)
    return int(result) if isinstance(result, int) else 0


def _check(directory: Path, strict: bool = False) -> int:
    from gateway.errors import PolicyError
    from gateway.routing.load import check_policy_dir

    try:
        policy_set, warnings = check_policy_dir(directory)
    except PolicyError as exc:
        return _problems(exc.problems)
    if strict and warnings:
        return _problems(warnings)
    for w in warnings:
        print(f"{w.file}:{w.line}: warning: {w.message}", file=sys.stderr)
    counts = policy_set.counts()
    summary = ", ".join(f"{v} {k if v != 1 else _singular(k)}" for k, v in counts.items())
    print(f"{directory.as_posix()}: OK ({summary})")
    return 0


def _singular(noun: str) -> str:
    return noun.removesuffix("ies") + "y" if noun.endswith("ies") else noun.removesuffix("s")


def _problems(problems: Sequence[object]) -> int:
    for problem in problems:
        print(problem, file=sys.stderr)
    n = len(problems)
    print(f"{n} problem{'s' if n != 1 else ''} found", file=sys.stderr)
    return 1


def _schema() -> int:
    from gateway.policy.schema import policy_json_schema

    print(json.dumps(policy_json_schema(), indent=2))
    return 0


def _hash_key() -> int:
    from gateway.routing.policyset import hash_key

    if sys.stdin.isatty():
        key = getpass.getpass("key (not echoed): ")
    else:
        key = sys.stdin.readline().rstrip("\r\n")
    if not key:
        print("llm-gateway hash-key: no key on stdin", file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
