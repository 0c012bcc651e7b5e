"""A do-nothing OTLP/HTTP traces endpoint for the benchmark's tracing phase.

Accepts ``POST /v1/traces`` (protobuf), counts the bytes, answers 200; ``GET /count``
says how many exports and bytes arrived. Run: ``python bench/otlp_sink.py --port 18099``.
"""

from __future__ import annotations

import argparse

from aiohttp import web

SEEN = {"exports": 0, "bytes": 0}


async def traces(request: web.Request) -> web.Response:
    body = await request.read()
    SEEN["exports"] += 1
    SEEN["bytes"] += len(body)
    return web.Response(body=b"", content_type="application/x-protobuf")


async def count(request: web.Request) -> web.Response:
    return web.json_response(SEEN)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=18099)
    a = p.parse_args()
    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/count", count)
    web.run_app(app, host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
