"""A cloud call's target: its URL, headers and encoded body, authorized last.

The request of an attempt on a cloud deployment (or of the token count) is built by its
provider kind (:meth:`gateway.providers.kinds.Cloud.call`: the URL names the model, the body
is shaped for the cloud); here it gets the provider's headers, the client's
``anthropic-beta`` where the cloud takes it as a header, the request's id, its encoding
and, last, its authorization (a SigV4 signature, a bearer token), which covers all of
them.
"""

from __future__ import annotations

from typing import Any

import orjson
from yarl import URL

from gateway.errors import Category
from gateway.providers import Target, Wiring
from gateway.resilience.classify import transport_failure
from gateway.resilience.failure import Failure
from gateway.upstream.client import Body

__all__ = ["cloud_target"]


def cloud_target(
    wiring: Wiring, provider: str, url: URL, shaped: dict[str, Any], beta: str | None,
    request_id: str,
) -> tuple[Target, Body] | Failure:  # fmt: skip
    """The target and body of a call to ``url`` with the body ``shaped`` on ``provider``;
    a failure (auth) when its credential has nothing to sign with."""
    assert wiring.cloud is not None
    headers = dict(wiring.headers)
    if beta is not None and wiring.cloud.passes_beta():
        headers["anthropic-beta"] = beta
    headers["x-request-id"] = request_id
    raw = orjson.dumps(shaped)
    credential = wiring.credential
    if credential is not None:
        from gateway.errors import CredentialUnavailable

        try:
            credential.authorize("POST", url, headers, raw)
        except CredentialUnavailable:  # why is in the credentials_failed event only:
            # it may name the files and services looked at, not the client's business
            msg = f"provider {provider!r} has no usable credentials"
            return transport_failure(Category.auth, msg)
    return Target(url, headers), Body(raw)
