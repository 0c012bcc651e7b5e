"""Typed keys for what the app and each request carry (aiohttp ``AppKey`` / request keys)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.app import Gateway

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")
LOG = "gateway.request_log"
