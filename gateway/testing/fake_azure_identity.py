"""A fake Azure managed-identity endpoint (App Service style), for Entra ID credential tests.

    async with FakeAzureIdentity(lifetime=3.0) as azure:
        monkeypatch.setenv("IDENTITY_ENDPOINT", azure.endpoint)
        monkeypatch.setenv("IDENTITY_HEADER", azure.secret)

azure-identity's ``ManagedIdentityCredential`` (through ``DefaultAzureCredential``) then
asks ``GET /msi/token?api-version=2019-08-01&resource=<scope without /.default>`` with
the ``X-IDENTITY-HEADER`` header; the fake checks both and answers ``{"access_token",
"expires_on", "resource", "token_type"}`` as App Service does (``expires_on`` in epoch
seconds). A request without the right header or api-version gets 400.
"""

from __future__ import annotations

import secrets
from typing import Any

from aiohttp import web

from gateway.testing.token_service import TokenService

API_VERSION = "2019-08-01"


class FakeAzureIdentity(TokenService):
    """App Service's managed-identity token endpoint (see the module's docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.secret = secrets.token_hex(16)  # the IDENTITY_HEADER value
        self.rejected: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/msi/token", self._token)

    @property
    def endpoint(self) -> str:
        """The IDENTITY_ENDPOINT value."""
        return f"{self.url}/msi/token"

    async def _token(self, request: web.Request) -> web.Response:
        refused = await self.served(request)
        if refused is not None:
            return refused
        why = None
        if request.headers.get("X-IDENTITY-HEADER") != self.secret:
            why = "X-IDENTITY-HEADER missing or wrong"
        elif request.query.get("api-version") != API_VERSION:
            why = f"api-version is not {API_VERSION}"
        elif not request.query.get("resource"):
            why = "no resource"
        if why is not None:
            self.rejected.append(why)
            return web.json_response(
                {"error": "invalid_request", "error_description": why}, status=400
            )
        token, expires_at = self.issue("eyJ0")
        return web.json_response(
            {
                "access_token": token,
                "expires_on": str(int(expires_at)),
                "resource": request.query["resource"],
                "token_type": "Bearer",
                "client_id": "00000000-0000-0000-0000-000000000000",
            }
        )
