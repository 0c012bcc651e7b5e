"""Which cloud credential a provider needs, by its kind (``bedrock``, ``vertex``,
``azure``), and what installs the libraries of each (:func:`missing_extra`).

The cloud libraries are optional extras: a kind's module
(:mod:`~gateway.upstream.aws_credentials`, :mod:`~gateway.upstream.google_credentials`,
:mod:`~gateway.upstream.azure_credentials`) imports its library, and :func:`credential_of`
imports that module only when a policy names the kind. The kinds share
:mod:`gateway.upstream.credentials`.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from gateway.upstream.refresh import FETCH_TIMEOUT

if TYPE_CHECKING:
    from gateway.policy.schema import Provider
    from gateway.upstream.credentials import Credential, OnChange

#: Per kind: the libraries a credential needs, and the extra that installs them.
_EXTRAS = {
    "bedrock": (("botocore", "awscrt"), "aws"),
    "vertex": (("google.auth", "requests"), "gcp"),
    "azure": (("azure.identity",), "azure"),
}


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
    name: str, provider: Provider, on_change: OnChange | None = None, *,
    timeout: float = FETCH_TIMEOUT,
) -> Credential[Any] | None:  # fmt: skip
    """The credential provider ``name`` needs: AWS for ``bedrock`` without ``api_key_env``,
    Google for ``vertex``, Entra ID for ``azure`` without ``api_key_env``; None otherwise
    (a static key is sent as it is). ``timeout``: how long its first fetch may take.
    Imports the kind's library."""
    if provider.api == "bedrock" and provider.api_key_env is None:
        from gateway.upstream.aws_credentials import AwsCredential

        region, profile = provider.region or "", provider.aws_profile
        return AwsCredential(name, region, profile, on_change, timeout=timeout)
    if provider.api == "vertex":
        from gateway.upstream.google_credentials import GoogleCredential

        return GoogleCredential(name, on_change, timeout=timeout)
    if provider.api == "azure" and provider.api_key_env is None:
        from gateway.upstream.azure_credentials import AzureCredential

        return AzureCredential(name, on_change, timeout=timeout)
    return None
