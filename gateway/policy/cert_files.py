"""The certificate files a provider names (``ca_file``, ``client_cert``, ``client_key``),
checked when a policy file is read: readable, and loadable as what they claim to be. The
policy loader calls it; the egress layer (:mod:`gateway.upstream.egress_tls`) words its own
load errors with :func:`pem_reason`. Loads ``ssl``, so the policy schema (which the pure
core reads) does not import it.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from gateway.errors import KeyNeedsPassword
from gateway.policy.egress import FILE_FIELDS

if TYPE_CHECKING:
    from gateway.policy.schema import Provider

#: What is said of a client key that needs a password.
ENCRYPTED_KEY = "client_key is encrypted: give an unencrypted PEM key"


def _refuse_password() -> bytes:
    raise KeyNeedsPassword


def check_files(provider: Provider) -> list[tuple[str, str]]:
    """``(field, message)`` for each certificate file of ``provider`` that cannot be used.

    Paths are used as given (the policy loader makes them absolute first). A CA file
    must hold at least one PEM certificate; the client certificate and key must load
    together (matching, key not encrypted).
    """
    found: list[tuple[str, str]] = []
    unreadable: set[str] = set()
    for name in FILE_FIELDS:
        path = getattr(provider, name)
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as exc:
            found.append((name, f"cannot read {path}: {exc.strerror or exc}"))
            unreadable.add(name)
    if provider.ca_file and "ca_file" not in unreadable:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=provider.ca_file)
        except (OSError, ssl.SSLError):
            found.append(("ca_file", f"{provider.ca_file} holds no PEM certificate"))
    if (
        provider.client_cert
        and provider.client_key
        and not {"client_cert", "client_key"} & unreadable
    ):
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
                provider.client_cert, provider.client_key, password=_refuse_password
            )
        except KeyNeedsPassword:
            found.append(("client_key", ENCRYPTED_KEY))
        except (OSError, ssl.SSLError) as exc:
            reason = pem_reason(exc, "they are not a PEM certificate and its PEM private key")
            found.append(("client_cert", f"cannot use client_cert with client_key: {reason}"))
    return found


def pem_reason(
    exc: OSError | ssl.SSLError, not_pem: str = "not a PEM file of the expected kind"
) -> str:
    """What went wrong loading a PEM file, in words (``not_pem``: when it is no PEM of the
    kind asked for)."""
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        if reason == "KEY_VALUES_MISMATCH":
            return "client_key does not match client_cert"
        if reason in ("NO_CERTIFICATE_OR_CRL_FOUND", "NO_START_LINE", "PEM_LIB") or not reason:
            return not_pem
        return reason.replace("_", " ").lower()
    if exc.filename is not None:
        return f"cannot read {exc.filename}: {exc.strerror or exc}"
    return exc.strerror or str(exc)
