"""Process settings (docs/operations.md, Settings): ``GATEWAY_`` environment variables; CLI
flags override."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one request may contain (``max_*`` below; checked by
    :func:`gateway.web.shapes.check_shape`)."""

    messages: int = 10_000
    blocks: int = 25_000
    tools: int = 1_000
    depth: int = 200
    containers: int = 200_000


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
    # Worker processes serving the one port (docs/operations.md: Workers); "auto": one per
    # core this process may use. 1: a single process, as without the setting.
    workers: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = 1
    # --- the client edge (docs/security.md: limits) ---
    # Time a client may take to send its request body once its headers arrived (408 past it).
    client_read_timeout_s: float = Field(default=60.0, gt=0)
    # Time a connection may sit between requests, or take to send a request's headers,
    # before it is closed (aiohttp's keep-alive timer covers both).
    client_header_timeout_s: float = Field(default=15.0, gt=0)
    # A write to a client that takes none of it for this long ends the answer, and the
    # upstream request with it (a client that stopped reading a stream).
    client_write_timeout_s: float = Field(default=30.0, gt=0)
    # The request line and each header line; the number of headers (400 past them); the
    # whole head (request line and headers: the connection is dropped past it).
    max_header_field_bytes: int = Field(default=8190, ge=1024)
    max_headers: int = Field(default=100, ge=8)
    max_header_bytes: int = Field(default=64 * 1024, ge=8192)
    # What one request may contain (400 naming the limit past them; docs/operations.md:
    # Request limits): messages (Responses input items), content blocks in all, tools,
    # nesting depth (under orjson's 254, so that every body can be encoded again), and the
    # JSON objects and arrays of the body, counted on its bytes before it is parsed.
    max_messages: int = Field(default=10_000, ge=1)
    max_content_blocks: int = Field(default=25_000, ge=1)
    max_tools: int = Field(default=1_000, ge=1)
    max_json_depth: int = Field(default=200, ge=16, le=240)
    max_json_containers: int = Field(default=200_000, ge=1_000)
    # --- the provider edge ---
    upstream_max_field_bytes: int = Field(default=8190, ge=1024)  # a status or header line
    upstream_max_headers: int = Field(default=128, ge=8)
    upstream_max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)  # after decompression
    upstream_max_event_bytes: int = Field(default=8 * 1024 * 1024, gt=0)  # one SSE event
    # --- cloud credentials (docs/clouds.md: Credentials): how long a cloud provider's first
    # token may take (the port is open meanwhile) before its deployments are out (auth) ---
    cloud_token_timeout_s: float = Field(default=3.0, gt=0)
    # --- /metrics: a port of its own (unset: served on the main port; 0: any free port),
    # and a bearer token it requires ---
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = ""  # empty: the main host
    metrics_token: str = ""

    @cached_property
    def request_limits(self) -> RequestLimits:
        """The request limits above, as :func:`gateway.web.shapes.check_shape` takes them."""
        return RequestLimits(
            self.max_messages,
            self.max_content_blocks,
            self.max_tools,
            self.max_json_depth,
            self.max_json_containers,
        )

    def worker_count(self) -> int:
        """How many worker processes ``workers`` asks for ("auto": the cores we may use)."""
        if self.workers == "auto":
            return max(1, len(os.sched_getaffinity(0)))
        return self.workers
