"""Process settings (SPEC §3): ``GATEWAY_`` environment variables; CLI flags override."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    policy_dir: Path = Path("./policies")
    state_url: str = ""
    # How often a replica that lost Redis tries it again (it serves on local state meanwhile).
    state_reconnect_s: float = Field(default=1.0, gt=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] | None = None  # None: console on a TTY, else json
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    admin_key: str = ""
    shutdown_grace_s: float = Field(default=30.0, ge=0)
    # How often the policy dir is polled for changes (a change must hold for one more
    # poll before it is loaded); 0 turns the file watcher off (SIGHUP and /admin/reload remain).
    reload_watch_s: float = Field(default=1.0, ge=0)
    demo: bool = False
    # Time a client may take to send its request headers/body before the gateway drops it
    # (slowloris protection); the upstream answer itself is governed by policy timeouts.
    client_read_timeout_s: float = Field(default=60.0, gt=0)
