"""The optional LiteLLM proxy peer (``--litellm``): its own venv, a config pointing at the
bench upstream, and the environment that keeps it offline and quiet."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venv-litellm"
SPEC = "litellm[proxy]"


def executable() -> Path:
    return VENV / "bin" / "litellm"


def ensure_installed(log: Callable[[str], None]) -> Path | None:
    """Create the venv and install LiteLLM once (needs the network: call outside the netns)."""
    exe = executable()
    if exe.exists():
        return exe
    log(f"installing {SPEC} into {VENV} (one time; this can take a few minutes)")
    try:
        if not (VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True, timeout=600)
        subprocess.run([*pip, SPEC], check=True, timeout=1800)
    except (subprocess.SubprocessError, OSError) as e:
        log(f"LiteLLM install failed, skipping the LiteLLM rows: {e}")
        return None
    if not exe.exists():
        log("LiteLLM installed but no 'litellm' command found; skipping")
        return None
    return exe


def version() -> str:
    try:
        out = subprocess.run(
            [str(VENV / "bin" / "python"), "-m", "pip", "show", "litellm"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return "?"
    for line in out.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def write_config(upstream_port: int) -> Path:
    cfg = f"""
model_list:
  - model_name: bench-model
    litellm_params:
      model: openai/bench-model
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: sk-bench-upstream
litellm_settings:
  telemetry: false
  drop_params: true
  set_verbose: false
  num_retries: 0
  request_timeout: 60
general_settings:
  disable_spend_logs: true
  disable_reset_budget: true
"""
    fd, path = tempfile.mkstemp(prefix="bench-litellm-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(cfg)
    return Path(path)


def argv(config: Path, port: int) -> list[str]:
    return [
        str(executable()),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
            "DISABLE_ADMIN_UI": "True",
            "NO_DOCS": "True",
            # no master key (so no auth work at all, which favours LiteLLM slightly); 1.108+
            # refuses to start without one unless told this is local development
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        }
    )
    e.pop("DATABASE_URL", None)
    return e
