"""What the fake cloud token services share: a local aiohttp server that issues
short-lived secrets, answers slowly or refuses on demand, records what it was asked, and
knows which of its tokens are still valid.

:mod:`gateway.testing.fake_google_token`, :mod:`gateway.testing.fake_azure_identity` and
:mod:`gateway.testing.fake_aws_credentials` are token services; ``GET /check`` on any of
them answers 200 for ``Authorization: Bearer <a token it issued that has not expired>``
and 401 otherwise (a stand-in for the cloud's API in credential tests).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from aiohttp import web


@dataclass(frozen=True)
class TokenRequest:
    """One request a token service received, its headers by lowercase name (they and the
    form may hold secrets of the test, never of anyone else)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    form: dict[str, str]


class TokenService:
    """A token service on ``127.0.0.1`` (an ephemeral port; see :attr:`url`).

    ``lifetime``: seconds a token is valid; ``delay``: seconds each token request waits
    before it is answered; ``refuse``: a status the token routes answer with instead
    (None: they serve); ``hang``: while True, token requests get no answer at all (those
    waiting are answered once it is set back to False, as a token service that was stuck).
    All four may be changed while it runs.
    """

    def __init__(
        self, lifetime: float = 3600.0, delay: float = 0.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.lifetime = lifetime
        self.delay = delay
        self.refuse: int | None = None
        self.requests: list[TokenRequest] = []
        self.issued: dict[str, float] = {}  # token -> its expiry (epoch seconds)
        self._clock = clock
        self._answering = asyncio.Event()
        self._answering.set()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def hang(self) -> bool:
        """Whether token requests get no answer (they wait until it is False again)."""
        return not self._answering.is_set()

    @hang.setter
    def hang(self, on: bool) -> None:
        if on:
            self._answering.clear()
        else:
            self._answering.set()

    def routes(self, app: web.Application) -> None:
        """Add the service's own routes (a subclass's)."""

    def issue(self, prefix: str = "tok") -> tuple[str, float]:
        """A new token and its expiry (epoch seconds)."""
        token = f"{prefix}-{secrets.token_urlsafe(24)}"
        expires_at = self._clock() + self.lifetime
        self.issued[token] = expires_at
        return token, expires_at

    def valid(self, token: str) -> bool:
        """Whether ``token`` was issued here and has not expired."""
        expires_at = self.issued.get(token)
        return expires_at is not None and self._clock() < expires_at

    async def served(self, request: web.Request) -> web.Response | None:
        """Record ``request``, wait :attr:`delay` (and while :attr:`hang` holds); an error
        response when refusing."""
        form = dict(await request.post()) if request.method == "POST" else {}
        self.requests.append(
            TokenRequest(
                request.method,
                request.path,
                dict(request.query),
                {name.lower(): value for name, value in request.headers.items()},
                {k: str(v) for k, v in form.items()},
            )
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        await self._answering.wait()
        if self.refuse is not None:
            return web.json_response(
                {"error": "unavailable", "error_description": "refused by the test"},
                status=self.refuse,
            )
        return None

    async def _check(self, request: web.Request) -> web.Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and self.valid(token)
        return web.Response(status=200 if ok else 401)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/check", self._check)
        self.routes(app)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``."""
        if self._port is None:
            raise RuntimeError("the token service is not started")
        return f"127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}"
