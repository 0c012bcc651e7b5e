"""The gateway's own credentials, kept out of any text that leaves it (pure).

A provider may quote the request it refused: its Authorization header, its
``x-api-key``, Bedrock's ``x-amz-security-token``, the SigV4 signature. The gateway's
credentials are exactly what it sent, so :func:`secrets_of` takes them from the headers
of the attempts it made (and the egress proxy's user and password), in every form in
which they can show up in a message: the header's value, the token after ``Bearer`` or
``Basic``, the access key id and signature of a SigV4 header, each also as JSON (``\\/``)
and percent-encoding write it. :func:`scrub` / :func:`scrub_bytes` replace each with
``***``.

It runs on error paths only: an answer that succeeded is never scanned. The relay of
a provider's error body, the error event of a stream, a translated error and the
messages the gateway words from a provider's message all go through it
(:meth:`gateway.live.attempter.HttpAttempter.scrubbed` and
:meth:`~gateway.live.attempter.HttpAttempter.secrets`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote

from gateway.upstream.egress_proxy import proxy_secrets

__all__ = ["MARK", "scrub", "scrub_bytes", "secrets_of"]

MARK = "***"
#: The names of headers that carry a credential (a provider's key, a token, a signature),
#: the provider's own extra headers of the policy included.
_SECRET_HEADER = re.compile(r"auth|key|token|secret|signature|credential|password|cookie", re.I)
#: Shorter values are not taken for secrets: replacing them would mangle the message.
_SHORTEST = 8


def secrets_of(
    sent: Iterable[tuple[Mapping[str, str], str | None]],
) -> tuple[str, ...]:
    """The forms of the credentials in ``sent`` (each attempt's headers and proxy URL),
    longest first."""
    found: set[str] = set()
    for headers, proxy in sent:
        for name, value in headers.items():
            if _SECRET_HEADER.search(name):
                found.update(f for f in _forms_of(value) if len(f) >= _SHORTEST)
        if proxy is not None:
            found.update(proxy_secrets(proxy))
    return _with_encodings(frozenset(found))


def _forms_of(value: str) -> list[str]:
    """A credential header's value, and the secrets inside it: the token of ``Bearer`` /
    ``Basic``, the access key id (``Credential=``) and ``Signature=`` of SigV4."""
    forms = [value]
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() in ("bearer", "basic"):
        token = rest.strip()
        return [value, token] if len(token) >= _SHORTEST else []
    if "=" in rest:
        for part in rest.split(","):
            name, _, item = part.strip().partition("=")
            if name == "Credential":
                forms.append(item.partition("/")[0])
            elif name == "Signature":
                forms.append(item)
    return forms


@functools.lru_cache(maxsize=256)
def _with_encodings(found: frozenset[str]) -> tuple[str, ...]:
    forms: set[str] = set()
    for secret in filter(None, found):
        forms.update((secret, secret.replace("/", "\\/"), quote(secret, safe="")))
    return tuple(sorted(forms, key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each of ``secrets`` replaced by :data:`MARK`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MARK)
    return text


def scrub_bytes(raw: bytes, secrets: tuple[str, ...]) -> bytes:
    """:func:`scrub` for a body as it came (UTF-8, or anything: compared byte for byte)."""
    for secret in secrets:
        form = secret.encode("utf-8", "replace")
        if form in raw:
            raw = raw.replace(form, MARK.encode())
    return raw
