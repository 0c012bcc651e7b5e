"""Typed keys for what the app and each request carry (aiohttp ``AppKey`` / ``RequestKey``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.observe.events import RequestLog

if TYPE_CHECKING:
    from gateway.app import Gateway

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")
LOG: web.RequestKey[RequestLog] = web.RequestKey("gateway.request_log", RequestLog)
