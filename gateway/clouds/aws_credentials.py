"""AWS credentials for Bedrock: botocore's default chain, signed with awscrt's SigV4.

botocore finds the credentials as every AWS SDK does (environment, the shared config and
credentials files and their profiles, web identity as on EKS, container and instance
credentials). Temporary ones are refreshed by botocore itself when asked for frozen
credentials near their expiry; that call runs in a thread, ahead of the expiry learnt
from botocore's public ``refresh_needed(seconds)``. Each attempt is signed by awscrt (AWS's
C signer, the one ``botocore[crt]`` uses) with the frozen credentials of the last fetch:
a few tens of microseconds, no I/O.

The signature covers ``host``, ``content-type`` and the ``x-amz-*`` headers it adds, the
method, the path and query exactly as given, and the body; any other header may be added
or changed after signing.
"""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import urlsplit

import botocore.session
from awscrt import auth, http

from gateway.clouds.credentials import Credential, Held, OnChange

#: What :meth:`AwsCredential.authorize` adds, as the signer names it and as sent.
_SIGNED = (("Authorization", "authorization"), ("X-Amz-Date", "x-amz-date"),
           ("X-Amz-Security-Token", "x-amz-security-token"))  # fmt: skip
#: How far ahead an expiry is looked for (seconds; 2**40 is beyond any credential).
_HORIZON_DOUBLINGS = 40
_BISECTIONS = 24


class AwsCredential(Credential[auth.AwsSigningConfig]):
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
        config = auth.AwsSigningConfig(
            algorithm=auth.AwsSigningAlgorithm.V4,
            signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
            credentials_provider=signer,
            region=self.region,
            service="bedrock",
        )
        left = seconds_left(self._found)
        return Held(config, None if left is None else self._clock() + left)

    def authorize(self, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
        """Sign one attempt (SigV4): adds ``authorization``, ``x-amz-date`` and, for
        temporary credentials, ``x-amz-security-token``."""
        config = self._current()
        parts = urlsplit(url)
        target = f"{parts.path or '/'}?{parts.query}" if parts.query else parts.path or "/"
        signed_headers = [("host", parts.netloc)]
        content_type = headers.get("content-type")
        if content_type is not None:
            signed_headers.append(("content-type", content_type))
        request = http.HttpRequest(
            method, target, http.HttpHeaders(signed_headers), io.BytesIO(body)
        )
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
