"""TLS of the egress layer: the ``ssl`` argument for a provider (its CA file, client
certificate, ``tls_verify``, the environment's trust variables), as cached contexts.

The rules are described in :mod:`gateway.upstream.egress`, which is the API.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.errors import EgressError
from gateway.policy.cert_files import ENCRYPTED_KEY, pem_reason

if TYPE_CHECKING:
    from gateway.policy.schema import Provider

_ALPN = ("http/1.1",)  # what aiohttp's own contexts announce


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    """What identifies a file's content cheaply (a rotated certificate gets a new context)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class _Trust:
    """Everything an SSL context is built from (the cache key)."""

    ca_file: str | None
    client_cert: str | None
    client_key: str | None
    verify: bool
    cert_file: str | None  # SSL_CERT_FILE
    cert_dir: str | None  # SSL_CERT_DIR
    bundle: str | None  # REQUESTS_CA_BUNDLE, when SSL_CERT_FILE is not set
    stamps: tuple[tuple[int, int, int] | None, ...]  # of the files, in the order above


def refuse_password() -> bytes:
    raise EgressError(ENCRYPTED_KEY)


def existing_dirs(spec: str | None) -> str | None:
    if not spec:
        return None
    dirs = [d for d in spec.split(os.pathsep) if d and os.path.isdir(d)]
    return os.pathsep.join(dirs) or None


def _default_store(trust: _Trust) -> ssl.SSLContext:
    """The system store, with ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` of *this* env applied.

    OpenSSL reads those from the process environment; the env given to
    :func:`egress_for` is the one that counts, so its values are applied explicitly.
    """
    if trust.cert_file is None and trust.cert_dir is None:
        return ssl.create_default_context()
    paths = ssl.get_default_verify_paths()
    cafile = trust.cert_file or paths.openssl_cafile
    capath = existing_dirs(trust.cert_dir or paths.openssl_capath)
    if cafile and not os.path.isfile(cafile):
        cafile = ""
    if not cafile and not capath:  # nothing to trust: verification fails, as with OpenSSL
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return ssl.create_default_context(cafile=cafile or None, capath=capath)


@functools.lru_cache(maxsize=64)
def _context(trust: _Trust) -> ssl.SSLContext:
    try:
        if not trust.verify:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif trust.ca_file:
            ctx = ssl.create_default_context(cafile=trust.ca_file)
        else:
            ctx = _default_store(trust)
            if trust.bundle and os.path.isdir(trust.bundle):
                ctx.load_verify_locations(capath=trust.bundle)
            elif trust.bundle and os.path.isfile(trust.bundle):
                ctx.load_verify_locations(cafile=trust.bundle)
    except (OSError, ssl.SSLError) as exc:
        where = trust.ca_file or trust.bundle or trust.cert_file or trust.cert_dir
        raise EgressError(f"cannot load the CA certificates {where}: {pem_reason(exc)}") from None
    if trust.client_cert:
        try:
            ctx.load_cert_chain(trust.client_cert, trust.client_key, password=refuse_password)
        except (OSError, ssl.SSLError) as exc:
            raise EgressError(f"cannot load client_cert / client_key: {pem_reason(exc)}") from None
    ctx.set_alpn_protocols(_ALPN)
    return ctx


def ssl_for(provider: Provider, env: Mapping[str, str]) -> ssl.SSLContext | bool:
    verify = provider.tls_verify
    if not verify and not provider.client_cert:
        return False
    cert_file = cert_dir = bundle = None
    if verify and not provider.ca_file:  # the provider's own CA replaces every default
        cert_file = env.get("SSL_CERT_FILE") or None
        cert_dir = env.get("SSL_CERT_DIR") or None
        bundle = None if cert_file else env.get("REQUESTS_CA_BUNDLE") or None
        if not (provider.client_cert or cert_file or cert_dir or bundle):
            return True
    ca_file = provider.ca_file if verify else None
    files = (ca_file, provider.client_cert, provider.client_key, cert_file, bundle)
    trust = _Trust(
        ca_file=ca_file,
        client_cert=provider.client_cert,
        client_key=provider.client_key,
        verify=verify,
        cert_file=cert_file,
        cert_dir=cert_dir,
        bundle=bundle,
        stamps=tuple(_stamp(f) for f in files),
    )
    return _context(trust)
