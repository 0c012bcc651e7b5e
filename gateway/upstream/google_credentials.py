"""Google credentials for Vertex AI: Application Default Credentials, an OAuth token.

google-auth finds them as every Google client does: a service-account or
external-account (workload identity federation) file named by
``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application-default credentials, or the
metadata server (GCE, GKE workload identity, Cloud Run). The token is fetched and
refreshed by google-auth's blocking ``refresh`` in a thread, each of its requests given
:data:`~gateway.upstream.credentials.REQUEST_TIMEOUT_S` (google-auth's own default is two
minutes); each attempt sends the held token as a bearer token.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import google.auth
import google.auth.transport.requests

from gateway.upstream.credentials import REQUEST_TIMEOUT_S, BearerCredential, Held

#: The scope a Vertex AI token is asked for.
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class _Request(google.auth.transport.requests.Request):
    """google-auth's transport, with no request waiting longer than
    :data:`REQUEST_TIMEOUT_S` for an answer (the token endpoint is called with none)."""

    def __call__(
        self, url: str, method: str = "GET", body: Any = None, headers: Any = None,
        timeout: float | None = None, **kwargs: Any,
    ) -> Any:  # fmt: skip
        limit = REQUEST_TIMEOUT_S if timeout is None else min(timeout, REQUEST_TIMEOUT_S)
        call = super().__call__
        return call(url, method, body, headers, timeout=limit, **kwargs)  # type: ignore[no-untyped-call]


class GoogleCredential(BearerCredential):
    """A Vertex AI provider's OAuth token."""

    cloud = "Google"
    looked_for = (
        "GOOGLE_APPLICATION_CREDENTIALS, gcloud application-default credentials and the"
        " metadata server"
    )
    loggers = ("google.auth", "google_auth_httplib2", "urllib3")

    def _fetch(self) -> Held[str]:
        if self._found is None:
            self._found, _ = google.auth.default(scopes=[SCOPE])
        found = self._found
        found.refresh(_Request())
        if not found.token:
            raise LookupError("google-auth gave no token")
        expiry = found.expiry  # naive UTC, or None
        expires_at = None if expiry is None else expiry.replace(tzinfo=dt.UTC).timestamp()
        return Held(f"Bearer {found.token}", expires_at)
