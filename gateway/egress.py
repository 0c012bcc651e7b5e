"""How the gateway reaches a provider: through which proxy, trusting which certificates.

:func:`egress_for` turns a provider's policy settings (``proxy``, ``ca_file``,
``client_cert`` / ``client_key``, ``tls_verify``) and the environment into an
:class:`Egress`: the proxy URL to pass per request (or ``None``) and the ``ssl``
argument of the HTTP client. The HTTP client is called with ``trust_env=False``:
the environment is read here, once, with the rules of the standard library.

**Proxy.** An explicit ``proxy`` always wins. Otherwise the proxy of the base
URL's scheme comes from the environment as :func:`urllib.request.getproxies`
reads it (``https_proxy`` / ``HTTPS_PROXY`` for ``https://`` URLs, ``http_proxy``
/ ``HTTP_PROXY`` for ``http://``; the lower-case name wins when both are set; a
value without a scheme means ``http://``), unless ``no_proxy`` / ``NO_PROXY``
bypasses the host (:func:`urllib.request.proxy_bypass_environment`: ``*``,
host names and domain suffixes, ``host:port``; here also IP networks such as
``10.0.0.0/8``, like curl and requests). Only ``http://`` proxies are accepted;
they carry ``https://`` requests with ``CONNECT``. The built-in ``sim`` provider
is served in-process and is always reached directly.

**Trust.** For an ``https://`` base URL, with ``ca_file`` the bundle replaces the
system store for that provider. Without it, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
replace OpenSSL's default file / directory (as OpenSSL does), and
``REQUESTS_CA_BUNDLE`` (a file or a hashed directory; ignored when
``SSL_CERT_FILE`` is set) is added to the default store. ``client_cert`` +
``client_key`` are presented for mutual TLS. ``tls_verify: false`` turns
verification off. ``Egress.ssl`` is ``True`` (the HTTP client's default context)
when nothing of this applies, ``False`` only for ``tls_verify: false`` without a
client certificate, else a context built here and cached: the same settings, the
same environment and unchanged files give the same object.

Nothing here writes a proxy's user or password anywhere: :attr:`Egress.label`,
``repr(Egress)``, :func:`redact_url` and every error message leave them out. The
HTTP client's own errors may not (aiohttp's proxy errors show both): pass their
text through :meth:`Egress.scrub` before logging it.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from gateway.policy.schema import Provider

__all__ = [
    "EGRESS_FIELDS",
    "FILE_FIELDS",
    "Egress",
    "EgressError",
    "check_files",
    "check_proxy_url",
    "egress_for",
    "redact_url",
    "warnings",
]

#: The provider settings that shape the connection (none applies to ``api: sim``).
EGRESS_FIELDS = ("proxy", "ca_file", "client_cert", "client_key", "tls_verify")
#: The provider settings naming files (the policy loader makes them absolute).
FILE_FIELDS = ("ca_file", "client_cert", "client_key")
_ALPN = ("http/1.1",)  # what aiohttp's own contexts announce


class EgressError(ValueError):
    """The environment or a certificate file does not allow reaching a provider.

    The message never holds a proxy's credentials.
    """


@dataclass(frozen=True, slots=True, repr=False)
class Egress:
    """How to reach one provider: pass ``proxy=`` and ``ssl=`` with each request."""

    #: ``http://[user:pass@]host[:port]`` or ``None`` (direct). Holds credentials:
    #: pass it to the client, never log it (log :attr:`label`).
    proxy: str | None
    #: ``True``: the client's default verified context; ``False``: no verification
    #: (``tls_verify: false``); or a context with the provider's CA / client certificate.
    ssl: ssl.SSLContext | bool

    @property
    def label(self) -> str:
        """``proxy.corp:3128`` or ``direct``, for logs: never credentials."""
        if self.proxy is None:
            return "direct"
        return _host_port(self.proxy)

    def __repr__(self) -> str:
        trust = self.ssl if isinstance(self.ssl, bool) else "SSLContext"
        return f"Egress(proxy={self.label!r}, ssl={trust})"

    def scrub(self, text: str) -> str:
        """``text`` without this proxy's credentials (plain, percent-encoded or Basic token).

        Needed before logging an HTTP client error: aiohttp's ``ClientHttpProxyError``
        shows the proxy URL with its password in ``str()`` and the
        ``Proxy-Authorization`` header in ``repr()``.
        """
        if self.proxy is None:
            return text
        return _scrub(text, self.proxy)


# ---- proxy URLs ------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """``http://user:pass@proxy:3128/`` -> ``http://***@proxy:3128/``; other URLs unchanged.

    Works on any string (no parsing that could fail), so it is safe in error paths.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{sep}{authority}{slash}{path}"


@functools.lru_cache(maxsize=64)
def _secrets(url: str) -> tuple[str, ...]:
    """The forms in which a proxy URL's credentials can show up in a message, longest first."""
    authority = url.partition("://")[2].partition("/")[0]
    if "@" not in authority:
        return ()
    raw = authority.rpartition("@")[0]
    user, _, password = raw.partition(":")
    plain = f"{unquote(user)}:{unquote(password)}"
    token = base64.b64encode(plain.encode("utf-8")).decode("ascii")
    forms = {raw, plain, token}
    forms.update(p for p in (password, unquote(password)) if len(p) >= 4)
    return tuple(sorted(forms, key=len, reverse=True))


def _scrub(text: str, url: str) -> str:
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port or 80}"


def check_proxy_url(url: str) -> str:
    """Return ``url`` if it is a usable ``http://`` proxy URL, else raise ``ValueError``.

    The message says what is wrong without repeating the URL (it may hold a password).
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ValueError(
            "a proxy is a URL like http://proxy.corp:3128 (or http://user:pass@proxy.corp:3128)"
        )
    if scheme.lower() != "http":
        shown = scheme if scheme.isascii() and scheme.isalnum() else "this"
        raise ValueError(
            f"only http:// proxies are supported, not {shown}:// (an http:// proxy also"
            " carries https:// requests, with CONNECT)"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("the proxy URL has an invalid host or port") from None
    if not parts.hostname:
        raise ValueError("the proxy URL has no host")
    if port == 0:
        raise ValueError("the proxy URL has an invalid host or port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a proxy URL is scheme, host and port only (no path or query)")
    return url


def _env_proxies(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``{scheme: (variable, value)}``: :func:`urllib.request.getproxies_environment` on ``env``."""
    proxies: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        key = name.lower()
        if value and key.endswith("_proxy"):
            proxies[key[:-6]] = (name, value)
    if "REQUEST_METHOD" in env:  # a CGI script: HTTP_PROXY may come from a request header
        proxies.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy"):  # the lower-case spelling wins
            if value:
                proxies[name.lower()[:-6]] = (name, value)
            else:
                proxies.pop(name.lower()[:-6], None)
    return proxies


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``no_proxy`` exempts ``host``: the standard library's rules, plus IP networks."""
    shown = f"[{host}]" if ":" in host else host
    hostport = shown if port is None else f"{shown}:{port}"
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if bypass(hostport, {"no": no_proxy}):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for entry in no_proxy.split(","):
        entry = entry.strip().strip("[]")
        if not entry:
            continue
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _proxy_for(
    provider: Provider, scheme: str, host: str, port: int | None, env: Mapping[str, str]
) -> str | None:
    if provider.proxy is not None:
        return provider.proxy
    proxies = _env_proxies(env)
    found = proxies.get(scheme)
    if found is None:
        return None
    no_proxy = proxies.get("no")
    if no_proxy is not None and _bypassed(host, port, no_proxy[1]):
        return None
    variable, value = found
    url = value if "://" in value else f"http://{value}"
    try:
        return check_proxy_url(url)
    except ValueError as exc:
        raise EgressError(f"{variable}: {exc}") from None


# ---- TLS -----------------------------------------------------------------------------


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


def _no_password() -> bytes:
    raise EgressError("client_key is encrypted: give an unencrypted PEM key")


def _existing_dirs(spec: str | None) -> str | None:
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
    capath = _existing_dirs(trust.cert_dir or paths.openssl_capath)
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
        raise EgressError(f"cannot load the CA certificates {where}: {_reason(exc)}") from None
    if trust.client_cert:
        try:
            ctx.load_cert_chain(trust.client_cert, trust.client_key, password=_no_password)
        except (OSError, ssl.SSLError) as exc:
            raise EgressError(f"cannot load client_cert / client_key: {_reason(exc)}") from None
    ctx.set_alpn_protocols(_ALPN)
    return ctx


def _reason(
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


def _ssl_for(provider: Provider, env: Mapping[str, str]) -> ssl.SSLContext | bool:
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


# ---- the API -------------------------------------------------------------------------


def egress_for(provider: Provider, base_url: str, env: Mapping[str, str]) -> Egress:
    """The proxy and TLS settings to reach ``base_url`` of ``provider`` (see the module doc).

    ``base_url`` is the URL actually called (the ``sim`` provider's is only known at
    start). Call it once per provider and policy set, not per request: it reads files
    (cached while they are unchanged). Raises :class:`EgressError` for an environment
    proxy that is not ``http://`` or a certificate file that cannot be loaded.
    """
    if provider.api == "sim":
        return Egress(None, True)
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    proxy = _proxy_for(provider, scheme, parts.hostname or "", port, env)
    return Egress(proxy, _ssl_for(provider, env) if scheme == "https" else True)


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
                provider.client_cert, provider.client_key, password=_no_password
            )
        except EgressError as exc:
            found.append(("client_key", str(exc)))
        except (OSError, ssl.SSLError) as exc:
            reason = _reason(exc, "they are not a PEM certificate and its PEM private key")
            found.append(("client_cert", f"cannot use client_cert with client_key: {reason}"))
    return found


def warnings(providers: Mapping[str, Provider], env: Mapping[str, str] | None = None) -> list[str]:
    """What an operator should hear at start (one line each, no secrets).

    With ``env``, also environment trust settings that point at nothing.
    """
    out: list[str] = []
    for name, p in sorted(providers.items()):
        if p.api == "sim":
            continue
        if not p.tls_verify:
            out.append(
                f"provider '{name}': tls_verify is false: its TLS certificates are not checked"
            )
            if p.ca_file:
                out.append(f"provider '{name}': ca_file is ignored: tls_verify is false")
        tls_set = [f for f in FILE_FIELDS if getattr(p, f)]
        tls_set += [] if p.tls_verify else ["tls_verify"]
        if tls_set and urlsplit(p.base_url).scheme.lower() == "http":
            out.append(
                f"provider '{name}': base_url is http://, so {', '.join(tls_set)}"
                f" {'has' if len(tls_set) == 1 else 'have'} no effect"
            )
    if env is not None:
        for variable in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            path = env.get(variable)
            if path and not os.path.exists(path):
                out.append(f"{variable}={path}: no such file; it is ignored")
        cert_dir = env.get("SSL_CERT_DIR")
        if cert_dir and _existing_dirs(cert_dir) is None:
            out.append(f"SSL_CERT_DIR={cert_dir}: no such directory; it is ignored")
    return out
