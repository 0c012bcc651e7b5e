"""AWS credentials for Bedrock: botocore's default chain, signed with awscrt's SigV4.

botocore finds the credentials as every AWS SDK does (environment, the shared config and
credentials files and their profiles, web identity as on EKS, container and instance
credentials). Temporary ones are refreshed by botocore itself when asked for frozen
credentials near their expiry; that call runs in a thread, ahead of the expiry learnt
from botocore's public ``refresh_needed(seconds)``. Each attempt is signed by awscrt (AWS's
C signer, the one ``botocore[crt]`` uses) with the frozen credentials of the last fetch:
a few tens of microseconds, no I/O.

The signature covers ``host`` (as aiohttp writes it: no default port), ``content-type``
and the ``x-amz-*`` headers it adds, the method, the path and query exactly as encoded in
the URL, and the body (its SHA-256 taken by ``hashlib`` and handed to awscrt, rather than
read back by awscrt through a Python stream, a call into Python per read and per seek);
any other header may be added or changed after signing.
"""

from __future__ import annotations

from hashlib import sha256
from typing import Any

import botocore.session
from awscrt import auth, http
from yarl import URL

from gateway.upstream.credentials import Credential, Held, OnChange

#: What :meth:`AwsCredential.authorize` adds, as the signer names it and as sent.
_SIGNED = (("Authorization", "authorization"), ("X-Amz-Date", "x-amz-date"),
           ("X-Amz-Security-Token", "x-amz-security-token"))  # fmt: skip
#: How far ahead an expiry is looked for (seconds; 2**40 is beyond any credential).
_HORIZON_DOUBLINGS = 40
_BISECTIONS = 24


class AwsCredential(Credential[auth.AwsCredentialsProvider]):
    """SigV4 for service ``bedrock`` in ``region``, with the credentials of ``profile``
    (None: the default chain)."""

    cloud = "AWS"
    loggers = ("botocore",)
    looked_for = (
        "the AWS_* environment, the shared credentials and config files{profile}, web"
        " identity, container and instance credentials"
    )

    def __init__(
        self,
        provider: str,
        region: str,
        profile: str | None = None,
        on_change: OnChange | None = None,
        **timing: Any,
    ) -> None:
        self.looked_for = self.looked_for.format(profile=f" (profile {profile})" if profile else "")
        super().__init__(provider, on_change, **timing)
        self.region = region
        self._profile = profile

    def _fetch(self) -> Held[auth.AwsSigningConfig]:
        if self._found is None:
            found = botocore.session.Session(profile=self._profile).get_credentials()
            if found is None:
                raise LookupError("none found")
            self._found = found
        frozen = self._found.get_frozen_credentials()
        if not frozen.access_key or not frozen.secret_key:
            raise LookupError("an access key or secret key is empty")
        signer = auth.AwsCredentialsProvider.new_static(
            frozen.access_key, frozen.secret_key, frozen.token or None
        )
        left = seconds_left(self._found)
        return Held(signer, None if left is None else self._clock() + left)

    def authorize(self, method: str, url: URL, headers: dict[str, str], body: bytes) -> None:
        """Sign one attempt (SigV4): adds ``authorization``, ``x-amz-date`` and, for
        temporary credentials, ``x-amz-security-token``."""
        config = auth.AwsSigningConfig(
            algorithm=auth.AwsSigningAlgorithm.V4,
            signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
            credentials_provider=self._current(),
            region=self.region,
            service="bedrock",
            signed_body_value=sha256(body).hexdigest(),
        )
        signed_headers = [("host", url.host_port_subcomponent or "")]
        content_type = headers.get("content-type")
        if content_type is not None:
            signed_headers.append(("content-type", content_type))
        request = http.HttpRequest(method, url.raw_path_qs, http.HttpHeaders(signed_headers))
        signed = auth.aws_sign_request(request, config).result().headers
        for name, sent in _SIGNED:
            value = signed.get(name)
            if value is not None:
                headers[sent] = value


def seconds_left(credentials: Any) -> float | None:
    """How long botocore's ``credentials`` stay valid (seconds, to a few milliseconds), from
    its public ``refresh_needed(seconds)`` (True when fewer than that many are left); None
    for credentials that do not expire."""
    refresh_needed = getattr(credentials, "refresh_needed", None)
    if refresh_needed is None or refresh_needed(0.0):
        return None if refresh_needed is None else 0.0
    low, high = 0.0, 1.0
    for _ in range(_HORIZON_DOUBLINGS):
        if refresh_needed(high):
            break
        low, high = high, high * 2
    else:
        return None
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if refresh_needed(middle):
            high = middle
        else:
            low = middle
    return low
