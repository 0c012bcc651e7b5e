"""A minimal aiohttp reverse proxy: the floor a gateway built on aiohttp can reach.

aiohttp server (uvloop, orjson parse of the body) + one pooled ``aiohttp.ClientSession``
upstream, streams relayed piece by piece: no policy, no logging, no metrics. The
runner measures it beside the gateway (row "minimal aiohttp proxy") so the gateway's
own cost is the difference, measured in the same run on the same machine.

Run: ``python bench/calibrate_proxy.py --port 18060 --upstream http://127.0.0.1:18090``
"""

from __future__ import annotations

import argparse

import aiohttp
import orjson
from aiohttp import web

SESSION = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM = web.AppKey("upstream", str)


async def proxy(request: web.Request) -> web.StreamResponse:
    raw = await request.read()
    body = orjson.loads(raw)
    session = request.app[SESSION]
    url = request.app[UPSTREAM] + request.path_qs
    headers = {"authorization": "Bearer sk-bench-upstream", "content-type": "application/json"}
    async with session.post(url, data=raw, headers=headers) as resp:
        if body.get("stream") is True:
            out = web.StreamResponse(status=resp.status)
            out.content_type = "text/event-stream"
            await out.prepare(request)
            async for piece in resp.content.iter_any():
                await out.write(piece)
            await out.write_eof()
            return out
        data = await resp.read()
        return web.Response(body=data, status=resp.status, content_type="application/json")


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _session(app: web.Application):  # type: ignore[no-untyped-def]
    app[SESSION] = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),
        skip_auto_headers=("User-Agent",),
    )
    yield
    await app[SESSION].close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=18060)
    p.add_argument("--upstream", default="http://127.0.0.1:18090")
    a = p.parse_args()
    import uvloop

    uvloop.install()
    app = web.Application()
    app[UPSTREAM] = a.upstream
    app.router.add_post("/v1/chat/completions", proxy)
    app.router.add_get("/readyz", ok)
    app.cleanup_ctx.append(_session)
    web.run_app(app, host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
