"""Cloud credentials: found at start, kept fresh in the background, applied to each attempt.

A provider of ``api: bedrock`` without ``api_key_env`` signs with AWS credentials, one of
``api: vertex`` sends a Google OAuth token, one of ``api: azure`` without ``api_key_env``
a Microsoft Entra ID token. Each is a :class:`Credential`: :meth:`Credential.start` finds
it (the cloud library's blocking call runs in a thread of its own, never on the event
loop) and a background task fetches it again ahead of its expiry
(:mod:`gateway.clouds.refresh`); :meth:`Credential.authorize` adds the headers of one
attempt from what is held, with no I/O. When nothing usable is held, ``problem`` says
why (naming the provider and where the credentials were looked for, never a secret) and
the ``on_change`` callback hears of it, and again when the credentials are back.

The cloud libraries are optional extras: a kind's module imports its library, and
:func:`credential_of` imports that module only when a policy names the kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from gateway.clouds.refresh import RETRY_CAP, RETRY_FIRST, refresh_delay, retry_delay

if TYPE_CHECKING:
    from yarl import URL

    from gateway.policy.schema import Provider

#: Called with the provider's name and its new ``problem`` (None: usable again).
OnChange = Callable[[str, "str | None"], None]

#: Per kind: the libraries a credential needs, and the extra that installs them.
_EXTRAS = {
    "bedrock": (("botocore", "awscrt"), "aws"),
    "vertex": (("google.auth", "requests"), "gcp"),
    "azure": (("azure.identity",), "azure"),
}
#: The longest piece of a library's error message a problem repeats.
_MESSAGE_CHARS = 600
#: Threads of their own for the libraries' blocking fetches (an instance metadata lookup
#: may wait seconds), so that they never hold up what the event loop's default executor
#: runs for requests (aiohttp's DNS lookups).
_FETCHERS = 4
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(_FETCHERS, thread_name_prefix="cloud-credentials")
    return _POOL


class CredentialUnavailable(Exception):
    """No usable credential for a provider; the message says why, never a secret."""


T = TypeVar("T")


class Held(Generic[T]):
    """What a credential holds between two fetches: what :meth:`Credential.authorize`
    applies (a header value, a signer), and when it expires (epoch seconds; None: never).
    Never printed: ``repr()`` shows only the expiry."""

    __slots__ = ("expires_at", "value")

    def __init__(self, value: T, expires_at: float | None) -> None:
        self.value = value
        self.expires_at = expires_at

    def __repr__(self) -> str:
        return f"Held(expires_at={self.expires_at!r})"

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class Credential(Generic[T]):
    """One cloud provider's credentials (a subclass per cloud implements :meth:`_fetch`
    and :meth:`authorize`).

    ``clock`` is the wall clock expiries are compared with; ``retry_first`` and
    ``retry_cap`` the backoff of a failed fetch (:func:`gateway.clouds.refresh.retry_delay`).
    """

    #: The cloud, as messages name it ("AWS"); where its credentials are looked for; the
    #: loggers of its library (kept quiet below ERROR: see :func:`quiet_library_logs`).
    cloud = ""
    looked_for = ""
    loggers: tuple[str, ...] = ()

    def __init__(
        self,
        provider: str,
        on_change: OnChange | None = None,
        *,
        clock: Callable[[], float] = time.time,
        retry_first: float = RETRY_FIRST,
        retry_cap: float = RETRY_CAP,
    ) -> None:
        self.provider = provider
        self.problem: str | None = f"{provider}: {self.cloud} credentials not looked for yet"
        self._on_change = on_change
        self._reported: str | None = None  # the last problem on_change heard (None at first)
        self._clock = clock
        self._retry = (retry_first, retry_cap)
        self._held: Held[T] | None = None
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._found: Any = None  # the library's credentials once found (used in threads only)
        quiet_library_logs(*self.loggers)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, problem={self.problem!r})"

    # -- what a cloud implements -------------------------------------------------------

    def _fetch(self) -> Held[T]:
        """Find or refresh the credentials (blocking: runs in a thread); raises when none."""
        raise NotImplementedError

    def authorize(self, method: str, url: URL, headers: dict[str, str], body: bytes) -> None:
        """Add the auth headers of one attempt to ``headers`` (no I/O); raises
        :class:`CredentialUnavailable` when no usable credential is held."""
        raise NotImplementedError

    # -- the life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Find the credentials (in a thread), then keep them fresh in a background task.
        Never raises: a failure sets ``problem`` and is tried again with backoff."""
        await self._attempt()
        if self._task is None:
            self._task = asyncio.create_task(
                self._keep_fresh(), name=f"credentials of {self.provider}"
            )

    async def close(self) -> None:
        """Stop the background task."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def check(self) -> str | None:
        """Find the credentials now, blocking (``check --strict``): the problem, or None.
        Changes nothing of what is held."""
        try:
            self._fetch()
        except Exception as exc:
            return self._describe(exc)
        return None

    def _current(self) -> T:
        """What :meth:`authorize` applies: the held value while it has not expired."""
        held = self._held
        if held is None or held.expired(self._clock()):
            raise CredentialUnavailable(
                self.problem or f"{self.provider}: the {self.cloud} credentials have expired"
            )
        return held.value

    async def _keep_fresh(self) -> None:
        while True:
            held = self._held
            expires_at = held.expires_at if held is not None else None
            now = self._clock()
            if self._failures:
                delay = retry_delay(self._failures, expires_at, now, *self._retry)
            else:
                delay = refresh_delay(expires_at, now)
            if math.isinf(delay):
                return
            await asyncio.sleep(delay)
            await self._attempt()

    async def _attempt(self) -> None:
        try:
            held = await asyncio.get_running_loop().run_in_executor(_pool(), self._fetch)
            if held.expired(self._clock()):
                raise LookupError(
                    "the credentials fetched have already expired (is the clock right?)"
                )
        except Exception as exc:
            self._failures += 1
            old = self._held
            if old is None or old.expired(self._clock()):
                self._held = None
                self._set_problem(self._describe(exc))
            return
        self._failures = 0
        self._held = held
        self._set_problem(None)

    def _set_problem(self, problem: str | None) -> None:
        self.problem = problem
        if problem != self._reported:
            self._reported = problem
            if self._on_change is not None:
                self._on_change(self.provider, problem)

    def _describe(self, exc: BaseException) -> str:
        """The problem of a failed fetch: the provider, where credentials were looked for,
        and the library's reason (on one line, shortened)."""
        reason = " ".join(str(exc).split())
        if len(reason) > _MESSAGE_CHARS:
            reason = reason[:_MESSAGE_CHARS] + "..."
        said = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
        return (
            f"{self.provider}: no usable {self.cloud} credentials"
            f" (looked for {self.looked_for}): {said}"
        )


class BearerCredential(Credential[str]):
    """A credential sent as a bearer token (Google, Azure): the held value is the whole
    ``authorization`` header."""

    def authorize(self, method: str, url: URL, headers: dict[str, str], body: bytes) -> None:
        """Add ``authorization: Bearer <token>``."""
        headers["authorization"] = self._current()


def quiet_library_logs(*names: str) -> None:
    """Keep a cloud library's own log records below ERROR out of the gateway's log: its
    warnings repeat what ``problem`` says, and its debug records may hold request details."""
    for name in names:
        logger = logging.getLogger(name)
        if logger.level < logging.ERROR:
            logger.setLevel(logging.ERROR)


def missing_extra(api: str) -> str | None:
    """The command that installs what a provider kind's credentials need, when one of its
    libraries is not importable; None when they are (or the kind needs no cloud library)."""
    if api not in _EXTRAS:
        return None
    modules, extra = _EXTRAS[api]
    return None if all(map(_importable, modules)) else f"pip install 'llm-gateway[{extra}]'"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package (google, azure) is missing
        return False


def credential_of(
    name: str, provider: Provider, on_change: OnChange | None = None
) -> Credential[Any] | None:
    """The credential provider ``name`` needs: AWS for ``bedrock`` without ``api_key_env``,
    Google for ``vertex``, Entra ID for ``azure`` without ``api_key_env``; None otherwise
    (a static key is sent as it is). Imports the kind's library."""
    if provider.api == "bedrock" and provider.api_key_env is None:
        from gateway.clouds.aws_credentials import AwsCredential

        return AwsCredential(name, provider.region or "", provider.aws_profile, on_change)
    if provider.api == "vertex":
        from gateway.clouds.google_credentials import GoogleCredential

        return GoogleCredential(name, on_change)
    if provider.api == "azure" and provider.api_key_env is None:
        from gateway.clouds.azure_credentials import AzureCredential

        return AzureCredential(name, on_change)
    return None
