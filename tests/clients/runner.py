"""Installing the real clients into a cache folder, and running a scenario offline.

The cache folder is ``$LLM_GATEWAY_CLIENTS_CACHE`` or ``~/.cache/llm-gateway-clients``:
one venv per Python client (``venv-llm``, ``venv-openai``, ``venv-aider``), so none
of them touches the project's own dependencies, and ``node/`` (``npm --prefix``)
for Claude Code and the Codex CLI. An install that fails (no registry) makes the
tests of that client skip with the installer's last lines as the reason.

A scenario runs under ``unshare -n`` with only the loopback interface up: the fake
provider, the gateway and the client share that namespace, so nothing can leave
the machine. Where unshare is not allowed the tests skip, unless
``LLM_GATEWAY_CLIENTS_NO_NETNS=1`` says to run them on the host's loopback.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.clients.scenario import Outcome, Scenario

ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    path = Path(
        os.environ.get("LLM_GATEWAY_CLIENTS_CACHE")
        or Path.home() / ".cache" / "llm-gateway-clients"
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One installer at a time per tool (pytest-xdist workers, parallel runs)."""
    with open(cache_dir() / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _run_install(argv: list[str], log: Path, timeout: float) -> str | None:
    """None when it worked, else the reason (the last lines of its output)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{argv[0]}: {e}"
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode == 0:
        return None
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    lines = [ln for ln in lines if "is ignored: it is neither" not in ln]
    return " | ".join(lines[-4:]) or f"exit code {proc.returncode}"


@functools.cache
def python_client(name: str, requirement: str, executable: str) -> Path:
    """The path of ``executable`` in the venv ``venv-<name>`` (created and filled once)."""
    venv = cache_dir() / f"venv-{name}"
    exe = venv / "bin" / executable
    marker = venv / ".installed"
    with _locked(f"venv-{name}"):
        if not (marker.exists() and marker.read_text() == requirement and exe.exists()):
            if not (venv / "bin" / "python").exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
            reason = _run_install(
                [*pip, "--disable-pip-version-check", requirement],
                cache_dir() / f"install-{name}.log",
                timeout=1200,
            )
            if reason is not None or not exe.exists():
                pytest.skip(f"could not install {requirement!r} (no registry access?): {reason}")
            marker.write_text(requirement)
    return exe


@functools.cache
def node_client(package: str, executable: str) -> Path:
    """The path of ``executable`` of the npm ``package`` installed under ``node/``."""
    prefix = cache_dir() / "node"
    exe = prefix / "node_modules" / ".bin" / executable
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (Node.js 18+ needed for this client)")
    with _locked("node"):
        if not exe.exists():
            reason = _run_install(
                ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", package],
                cache_dir() / f"install-{executable}.log",
                timeout=1800,
            )
            if reason is not None or not exe.exists():
                pytest.skip(f"could not install {package} (no registry access?): {reason}")
    return exe


@functools.cache
def netns_prefix() -> list[str] | None:
    """The command prefix that runs a program in a new network namespace, lo up."""
    probe = ["unshare", "-n", "sh", "-c", "ip link set lo up && exec true"]
    if shutil.which("unshare") and shutil.which("ip"):
        try:
            ok = subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    if os.environ.get("LLM_GATEWAY_CLIENTS_NO_NETNS") == "1":
        return []
    return None


def run_scenario(sc: Scenario, tmp_path: Path) -> Outcome:
    """Run ``sc`` offline (see the module docstring) and return what happened."""
    prefix = netns_prefix()
    if prefix is None:
        pytest.skip(
            "cannot create a network namespace (`unshare -n` needs root or user namespaces); "
            "set LLM_GATEWAY_CLIENTS_NO_NETNS=1 to run the clients on the host's loopback"
        )
    src, dst = tmp_path / "scenario.pickle", tmp_path / "outcome.pickle"
    src.write_bytes(pickle.dumps(sc))
    env = {**os.environ, "LLM_GATEWAY_CLIENTS_NETNS": "unshare" if prefix else "host"}
    budget = sum(c.timeout for c in sc.commands) + 60
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "tests.clients.scenario", str(src), str(dst)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=budget,
    )
    if proc.returncode != 0 or not dst.exists():
        raise AssertionError(f"the scenario runner failed:\n{proc.stdout}\n{proc.stderr}")
    outcome: Outcome = pickle.loads(dst.read_bytes())
    return outcome
