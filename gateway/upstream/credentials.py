"""Cloud credentials: found at start, kept fresh in the background, applied to each attempt.

A provider of ``api: bedrock`` without ``api_key_env`` signs with AWS credentials, one of
``api: vertex`` sends a Google OAuth token, one of ``api: azure`` without ``api_key_env``
a Microsoft Entra ID token. Each is a :class:`Credential`: :meth:`Credential.start` finds
it (the cloud library's blocking call runs in a thread of its own, never on the event
loop) and a background task fetches it again ahead of its expiry
(:mod:`gateway.upstream.refresh`); :meth:`Credential.authorize` adds the headers of one
attempt from what is held, with no I/O. When nothing usable is held, ``problem`` says
why (naming the provider and where the credentials were looked for, never a secret) and
the ``on_change`` callback hears of it, and again when the credentials are back.

A fetch has a deadline: a first token that has not come within ``timeout``, or a token
that expires while its refresh has not answered, is a problem at that moment. The fetch
goes on in its thread (one at a time per credential) and its answer is taken when it
comes. Each fetch runs in a daemon thread, so a token service that never answers holds
up neither the gateway's start nor its exit; the libraries' own requests are given
:data:`REQUEST_TIMEOUT_S` where they take one (Google, Azure; botocore bounds its own).

The cloud libraries are optional extras: a kind's module imports its library, and
:func:`gateway.upstream.credential_kinds.credential_of` imports that module only when a
policy names the kind. This module is what the kinds share; it imports none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from gateway.errors import CredentialUnavailable
from gateway.upstream.refresh import (
    FETCH_TIMEOUT,
    RETRY_CAP,
    RETRY_FIRST,
    refresh_delay,
    retry_delay,
    unusable_at,
)

if TYPE_CHECKING:
    from yarl import URL


#: Called with the provider's name and its new ``problem`` (None: usable again).
OnChange = Callable[[str, "str | None"], None]

#: The longest piece of a library's error message a problem repeats.
_MESSAGE_CHARS = 600
#: The longest a cloud library's own request for a token waits for an answer (seconds;
#: Google's default is 120, azure-core's 300): a request that hung ends as a failed fetch,
#: tried again with backoff.
REQUEST_TIMEOUT_S = 15.0


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

    ``clock`` is the wall clock expiries are compared with; ``timeout`` how long a first
    fetch may take before the credential is unusable; ``retry_first`` and ``retry_cap`` the
    backoff of a failed fetch (:func:`gateway.upstream.refresh.retry_delay`).
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
        timeout: float = FETCH_TIMEOUT,
        retry_first: float = RETRY_FIRST,
        retry_cap: float = RETRY_CAP,
    ) -> None:
        self.provider = provider
        self.problem: str | None = f"{provider}: {self.cloud} credentials not looked for yet"
        self._on_change = on_change
        self._reported: str | None = None  # the last problem on_change heard (None at first)
        self._clock = clock
        self.timeout = timeout
        self._retry = (retry_first, retry_cap)
        self._held: Held[T] | None = None
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._fetching: asyncio.Future[Held[T]] | None = None  # the fetch in its thread
        self._settled = asyncio.Event()  # the first fetch answered, or its deadline passed
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
        """Find the credentials (in a thread) and keep them fresh in a background task;
        returns once the first fetch answered or its deadline passed (``problem`` then
        says whether they are usable; a late answer is still taken). Never raises: a
        failure sets ``problem`` and is tried again with backoff."""
        if self._task is None:
            self._task = asyncio.create_task(
                self._keep_fresh(), name=f"credentials of {self.provider}"
            )
        await self._settled.wait()

    async def close(self) -> None:
        """Stop the background task (a fetch still running in its thread is left to end
        on its own; its answer is dropped)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._fetching is not None:
            self._fetching.cancel()
            self._fetching = None

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
        try:
            while True:
                await self._attempt()
                self._settled.set()
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
        finally:
            self._settled.set()  # whoever waits in start() is not left waiting

    async def _attempt(self) -> None:
        """One fetch, waited for until its answer; past its deadline (nothing usable
        held) the problem is known at once, and the answer still taken when it comes."""
        fetching = self._fetching = self._in_thread()
        old = self._held
        give_up = unusable_at(
            self._clock(), self.timeout, old is not None, old.expires_at if old else None
        )
        while not fetching.done():
            left = give_up - self._clock()
            await asyncio.wait({fetching}, timeout=None if math.isinf(left) else max(left, 0.0))
            if not fetching.done():
                self._set_problem(self._describe(self._late(old)))
                self._settled.set()
                give_up = math.inf
        self._fetching = None
        try:
            held = fetching.result()
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

    def _late(self, old: Held[T] | None) -> TimeoutError:
        """What a fetch that has not answered is, once nothing usable is held."""
        if old is None:
            return TimeoutError(f"no answer within {self.timeout:g} s")
        return TimeoutError("the credentials expired while their refresh had no answer")

    def _in_thread(self) -> asyncio.Future[Held[T]]:
        """:meth:`_fetch` in a daemon thread of its own (never joined: a fetch that hangs
        holds up neither the event loop nor the process's exit); its answer as a future."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Held[T]] = loop.create_future()

        def settle(held: Held[T] | None, exc: BaseException | None) -> None:
            if future.done():  # closed meanwhile
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(held)  # type: ignore[arg-type]

        def fetch() -> None:
            try:
                held, exc = self._fetch(), None
            except Exception as e:
                held, exc = None, e
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, held, exc)

        name = f"cloud credentials of {self.provider}"
        threading.Thread(target=fetch, name=name, daemon=True).start()
        return future

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
