"""The type every cloud provider kind is (:class:`Cloud`: where a call goes, with which
body), and what authorizes a cloud call (:class:`Authorizer`). The kinds themselves are
:mod:`gateway.providers.kinds` (Bedrock, Azure) and :mod:`gateway.providers.google`
(Vertex AI, AI Studio). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from yarl import URL

from gateway.formats import Format

#: How a dropped beta is named in ``x-gateway-dropped``: ``anthropic-beta:<flag>``.
DROPPED_BETA = "anthropic-beta:"


class Authorizer(Protocol):
    """What authorizes a cloud attempt (gateway/upstream/credentials.py): a SigV4 signature
    or a current token, added to ``headers`` in place; no I/O. Raises
    ``CredentialUnavailable`` when there is none to use."""

    provider: str
    problem: str | None

    def authorize(self, method: str, url: URL, headers: dict[str, str], body: bytes) -> None: ...


class Cloud:
    """One cloud provider of a policy set, resolved: where its requests go."""

    #: The provider kind (the policy's ``api``).
    api = ""
    #: The ``anthropic-beta`` flags the cloud takes with Claude's Messages body.
    betas: frozenset[str] = frozenset()

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def key_headers(self, key: str) -> dict[str, str]:
        """The header carrying the provider's static key."""
        return {"authorization": f"Bearer {key}"}

    def dialect(
        self, body: dict[str, Any], beta: str | None
    ) -> tuple[dict[str, Any], str | None, list[str]]:
        """A client's Messages ``body`` and ``anthropic-beta`` header as this cloud takes
        Claude's Messages: its ``role: system`` turns folded into ``system`` (as
        translation places them), of the betas only those in :attr:`betas`; and the names
        of what was dropped (``anthropic-beta:<flag>``, ``system.<block type>``). A body
        without system turns is returned as it is (one look at each turn's role)."""
        dropped: list[str] = []
        if beta:
            allowed, kept = self.betas, []
            for flag in beta.split(","):
                flag = flag.strip()
                if flag in allowed:
                    kept.append(flag)
                elif flag:
                    dropped.append(DROPPED_BETA + flag)
            beta = ",".join(kept) if kept else None
        messages = body.get("messages")
        if type(messages) is list:
            for m in messages:  # (a plain loop: about 10% cheaper than any() here)
                if type(m) is dict and m.get("role") == "system":
                    from gateway.translate.requests.anthropic import fold_system

                    return fold_system(body, dropped), beta, dropped
        return body, beta, dropped

    def call(
        self,
        path: str,
        fmt: Format,
        model: str,
        body: dict[str, Any],
        stream: bool,
        beta: str | None,
    ) -> tuple[URL, dict[str, Any]]:
        """The URL and body of a request in ``fmt`` for ``model`` (its ``upstream_model``)
        that a client sent to ``path`` (the gateway endpoint; for a translated request,
        its format's own); ``beta``: the client's ``anthropic-beta`` header."""
        raise NotImplementedError

    def count(
        self, model: str, fmt: Format, body: dict[str, Any], beta: str | None
    ) -> tuple[URL, dict[str, Any]]:
        """The URL and body of the token count of a request ``body`` in ``fmt`` on
        ``model`` (a model this cloud counts in that format: :func:`counts`)."""
        raise NotImplementedError

    def eventstream(self, fmt: Format, stream: bool) -> bool:
        """A stream of this call comes in AWS event-stream frames."""
        return False

    def passes_beta(self) -> bool:
        """The client's ``anthropic-beta`` header goes along as a header."""
        return False

    def error_body(self, headers: Mapping[str, str], raw: bytes) -> bytes:
        """An error answer's body, in the shape of the format spoken (as it came here)."""
        return raw


def _without(body: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in names}


def without(body: dict[str, Any], *names: str) -> dict[str, Any]:
    """``body`` without the keys ``names`` (a new dict; the values are not copied)."""
    return {k: v for k, v in body.items() if k not in names}


__all__ = ["DROPPED_BETA", "Authorizer", "Cloud", "without"]
