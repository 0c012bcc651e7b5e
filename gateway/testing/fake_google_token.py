"""A fake Google token service: the OAuth token endpoint of a service-account file and
the metadata server's token routes, for Vertex AI credential tests.

    async with FakeGoogleToken(lifetime=2.0) as google:
        path = google.service_account_file(tmp_path)   # its token_uri is the fake
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))

``POST /token`` takes the JWT-bearer grant google-auth sends for a service account and
checks the assertion is a JWT signed by the file's key, for Google's token endpoint (or
this one) and with a scope; it answers ``{"access_token", "expires_in", "token_type"}``.

The metadata server (``GCE_METADATA_HOST`` and ``GCE_METADATA_IP`` set to :attr:`host`)
answers the ping on ``/``, the project id, the default service account's info and
``/computeMetadata/v1/instance/service-accounts/default/token``, each only with
``Metadata-Flavor: Google``. google-auth reads ``GCE_METADATA_HOST`` when it is first
imported: set it before (a subprocess does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

from gateway.testing.token_service import TokenService

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
EMAIL = "gateway-test@fake-project.iam.gserviceaccount.com"
PROJECT = "fake-project"
#: The audience google-auth gives a service account's assertion, whatever its token_uri.
AUDIENCE = "https://oauth2.googleapis.com/token"
_SA_ROOT = "/computeMetadata/v1/instance/service-accounts/default"


class FakeGoogleToken(TokenService):
    """Google's token endpoint and metadata server (see the module's docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._public_keys: list[str] = []
        self.rejected: list[str] = []  # why each refused assertion was refused

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/token", self._token)
        app.router.add_get("/", self._ping)
        app.router.add_get("/computeMetadata/v1/project/project-id", self._project)
        app.router.add_get(_SA_ROOT + "/", self._account)
        app.router.add_get(_SA_ROOT + "/token", self._metadata_token)

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def service_account_file(self, folder: Path) -> Path:
        """Write a service-account JSON file with a fresh RSA key whose ``token_uri`` is
        this fake (which then accepts assertions signed by that key)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        public = (
            key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )
        self._public_keys.append(public)
        path = folder / "service-account.json"
        path.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": PROJECT,
                    "private_key_id": "fake-key-id",
                    "private_key": private,
                    "client_email": EMAIL,
                    "client_id": "1234567890",
                    "token_uri": self.token_uri,
                }
            )
        )
        return path

    def _granted(self, assertion: str) -> str | None:
        """Why ``assertion`` is refused, or None when it is a valid grant."""
        for public in self._public_keys:
            try:
                claims = jwt.decode(assertion, certs=public, audience=[AUDIENCE, self.token_uri])  # type: ignore[no-untyped-call]
            except ValueError:
                continue
            if claims.get("iss") != EMAIL:
                return "wrong issuer"
            if not claims.get("scope"):
                return "no scope"
            return None
        return "not a JWT signed by a service-account key of this fake"

    def _answer(self) -> web.Response:
        token, _ = self.issue("ya29")
        return web.json_response(
            {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}
        )

    async def _token(self, request: web.Request) -> web.Response:
        refused = await self.served(request)
        if refused is not None:
            return refused
        form = self.requests[-1].form
        why = (
            "wrong grant_type"
            if form.get("grant_type") != JWT_BEARER
            else self._granted(form.get("assertion", ""))
        )
        if why is not None:
            self.rejected.append(why)
            return web.json_response(
                {"error": "invalid_grant", "error_description": why}, status=400
            )
        return self._answer()

    @staticmethod
    def _metadata(request: web.Request, answer: web.Response) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            answer = web.Response(status=403, text="Metadata-Flavor: Google missing")
        answer.headers["Metadata-Flavor"] = "Google"
        return answer

    async def _ping(self, request: web.Request) -> web.Response:
        return self._metadata(request, web.Response(text="ok"))

    async def _project(self, request: web.Request) -> web.Response:
        return self._metadata(request, web.Response(text=PROJECT))

    async def _account(self, request: web.Request) -> web.Response:
        info = {
            "aliases": ["default"],
            "email": EMAIL,
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
        return self._metadata(request, web.json_response(info))

    async def _metadata_token(self, request: web.Request) -> web.Response:
        refused = await self.served(request)
        return self._metadata(request, refused if refused is not None else self._answer())
