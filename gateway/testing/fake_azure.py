"""A scripted fake Azure OpenAI: deployment URLs with ``api-version``, ``api-key`` or
Microsoft Entra ID tokens, Azure's refusals, rate limits and content filter.

It is a :class:`~gateway.testing.FakeProvider` (same answers, script steps, records)
served on Azure's paths, with Azure's checks in front::

    from gateway.testing import FakeAzure, azure_rate_limit

    async with FakeAzure(keys={"az-key"}, deployments={"gpt-4o-prod"}) as fa:
        fa.push(azure_rate_limit(retry_after=6), model="gpt-4o-prod")
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=fa.url, api_key="az-key", api_version="2024-10-21"
        )

Endpoints (``fa.url`` stands for ``https://{resource}.openai.azure.com``):

- ``POST /openai/deployments/{deployment}/chat/completions``, ``/completions`` and
  ``/embeddings`` with the query parameter ``api-version``: the deployment is the model
  (scripts and ``reply`` are keyed by its name). Without ``api-version`` a 404
  ``Resource not found``; a version not in ``fa.api_versions`` a 400.
- ``POST /openai/v1/responses`` (Azure's v1 API, no ``api-version`` needed): the body's
  ``model`` is the deployment's name.

**Refusals** (before the script is consulted, in Azure's error shape): an ``api-key``
header that ``keys`` does not accept, an ``Authorization: Bearer`` token that ``tokens``
(Entra ID tokens) does not accept -- on the v1 route a bearer may also be a key, as
Azure allows --, or neither: 401; a deployment not in ``deployments`` (when given):
404 ``DeploymentNotFound``. ``keys``/``tokens``: a collection, a predicate, or ``None``
(any non-empty value).

**Prompt cache**: the fake provider's (``fa.prompt_cache``, ``None``: off), one per
deployment for the whole fake (a resource's: its keys and Entra ID tokens share it),
automatic as OpenAI's.

**Faults**: every step of :mod:`gateway.testing.script`, per deployment and per key
(``key=`` is the ``api-key`` or the bearer token), plus Azure's own:
:func:`azure_rate_limit` (429 with ``retry-after-ms``, ``retry-after`` and
``x-ratelimit-*``), :func:`azure_content_filter` (the prompt filtered: 400
``content_filter``), :func:`azure_filtered_answer` (an answer ending with
``finish_reason: "content_filter"``) and :func:`azure_server_error`.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Collection, Hashable, Iterable
from typing import Any

from aiohttp import web

from gateway.testing.cloud_auth import Accept, accepts, bearer_token
from gateway.testing.fake_provider import FakeProvider, RecordedRequest
from gateway.testing.script import Error, ScriptEntry, Success, Tamper

#: The ``api-version`` values the fake serves (GA and preview versions of the data plane).
API_VERSIONS = frozenset(
    {
        "2024-02-01",
        "2024-06-01",
        "2024-10-21",
        "2024-12-01-preview",
        "2025-01-01-preview",
        "2025-03-01-preview",
        "2025-04-01-preview",
    }
)
_DEPLOYMENT = "/openai/deployments/{deployment}"

INVALID_KEY_MESSAGE = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API "
    "endpoint for your resource."
)
MISSING_KEY_MESSAGE = (
    "Access denied due to missing subscription key. Make sure to include subscription key "
    "when making requests to an API."
)
INVALID_TOKEN_MESSAGE = (
    "Unauthorized. Access token is missing, invalid, audience is incorrect "
    "(https://cognitiveservices.azure.com), or have expired."
)
DEPLOYMENT_NOT_FOUND_MESSAGE = (
    "The API deployment for this resource does not exist. If you created the deployment "
    "within the last 5 minutes, please wait a moment and try again."
)
CONTENT_FILTER_MESSAGE = (
    "The response was filtered due to the prompt triggering Azure OpenAI's content "
    "management policy. Please modify your prompt and retry. To learn more about our "
    "content filtering policies please read our documentation: "
    "https://go.microsoft.com/fwlink/?linkid=2198766"
)
_SERVER_MESSAGE = (
    "The server had an error while processing your request. Sorry about that! You can retry "
    "your request, or contact us through an Azure support request at: "
    "https://go.microsoft.com/fwlink/?linkid=2213926 if the error persists."
)
#: The categories of Azure's content filter.
CATEGORIES = ("hate", "self_harm", "sexual", "violence")


def azure_error(code: str, message: str) -> dict[str, Any]:
    """An Azure error body: ``{"error": {"code", "message"}}``."""
    return {"error": {"code": code, "message": message}}


def filter_result(filtered: str | None = "violence") -> dict[str, Any]:
    """A ``content_filter_result``: ``filtered`` at severity high, the others safe."""
    return {
        name: {"filtered": name == filtered, "severity": "high" if name == filtered else "safe"}
        for name in CATEGORIES
    }


def azure_rate_limit(
    retry_after: float = 6,
    *,
    send: Collection[str] = ("retry-after-ms", "retry-after", "x-ratelimit"),
    operation: str = "ChatCompletions_Create",
    api_version: str = "2024-10-21",
) -> Error:
    """429 as Azure sends it: "Requests to the ``operation`` Operation under Azure OpenAI
    API version ``api_version`` have exceeded ... Please retry after N seconds."

    ``send`` picks the hints in the headers: ``retry-after-ms``, ``retry-after`` (whole
    seconds) and ``x-ratelimit`` (``x-ratelimit-remaining-*`` at 0, ``-limit-*`` and
    ``x-ratelimit-reset-requests``/``-tokens`` as ``"6s"``).
    """
    seconds = math.ceil(retry_after)
    headers: dict[str, str] = {}
    if "retry-after-ms" in send:
        headers["retry-after-ms"] = f"{retry_after * 1000:g}"
    if "retry-after" in send:
        headers["retry-after"] = str(seconds)
    if "x-ratelimit" in send:
        headers |= {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-limit-tokens": "60000",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-requests": f"{retry_after:g}s",
            "x-ratelimit-reset-tokens": f"{retry_after:g}s",
        }
    message = (
        f"Requests to the {operation} Operation under Azure OpenAI API version {api_version} "
        "have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry "
        f"after {seconds} seconds. Please go here: https://aka.ms/oai/quotaincrease if you "
        "would like to further increase the default rate limit."
    )
    return Error(429, azure_error("429", message), headers)


def azure_content_filter(category: str = "violence", jailbreak: bool = False) -> Error:
    """400 ``content_filter``: the prompt triggered the content management policy."""
    result: dict[str, Any] = filter_result(None if jailbreak else category)
    if jailbreak:
        result["jailbreak"] = {"filtered": True, "detected": True}
    body = {
        "error": {
            "message": CONTENT_FILTER_MESSAGE,
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": result,
            },
        }
    }
    return Error(400, body)


def azure_filtered_answer(text: str = "", category: str = "violence") -> ScriptEntry:
    """An answer cut by the output filter: ``text`` then ``finish_reason:
    "content_filter"``, the choice carrying ``content_filter_results`` (chat and
    completions; a stream carries them on its finish chunk)."""

    def mark(data: Any, index: int) -> Any:
        choices = data.get("choices") if isinstance(data, dict) else None
        for choice in choices or ():
            if isinstance(choice, dict) and choice.get("finish_reason") == "content_filter":
                choice["content_filter_results"] = filter_result(category)
        return data

    return (Success(text=text, finish_reason="content_filter"), Tamper(mark))


def azure_server_error(status: int = 500) -> Error:
    """A 5xx as Azure OpenAI sends it (``InternalServerError`` / ``ServiceUnavailable``)."""
    code = "ServiceUnavailable" if status == 503 else "InternalServerError"
    return Error(status, azure_error(code, _SERVER_MESSAGE))


class FakeAzure(FakeProvider):
    """A scripted fake Azure OpenAI served on ``127.0.0.1`` (see the module docstring)."""

    def __init__(
        self,
        *,
        keys: Accept = None,
        tokens: Accept = None,
        deployments: Iterable[str] | None = None,
        api_versions: Iterable[str] = API_VERSIONS,
        chunks: int = 8,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(chunks=chunks, models=(), ssl_context=ssl_context)
        #: The ``api-key`` values accepted (a collection, a predicate, or ``None``: any).
        self.keys: Accept = keys
        #: The Entra ID bearer tokens accepted (a collection, a predicate, or ``None``: any).
        self.tokens: Accept = tokens
        #: The deployment names served (``None``: any name).
        self.deployments: set[str] | None = None if deployments is None else set(deployments)
        #: The ``api-version`` values served on the deployment routes.
        self.api_versions: set[str] = set(api_versions)

    def _add_routes(self, app: web.Application) -> None:
        for path, api in (
            ("/chat/completions", "chat"),
            ("/completions", "completions"),
            ("/embeddings", "embeddings"),
        ):
            app.router.add_post(_DEPLOYMENT + path, self._endpoint(api))
        app.router.add_post("/openai/v1/responses", self._endpoint("responses"))

    def _model_of(self, request: web.Request, body: Any) -> str | None:
        return request.match_info.get("deployment") or super()._model_of(request, body)

    def _cache_scope(self, record: RecordedRequest) -> Hashable:
        """The resource's cache for the deployment: every key and token shares it."""
        return record.model

    def _refuse(self, request: web.Request, record: RecordedRequest) -> web.Response | None:
        on_deployment = "deployment" in request.match_info
        version = request.query.get("api-version")
        if on_deployment and not version:
            return _azure(404, "404", "Resource not found")
        refusal = self._auth_refusal(record.headers, on_deployment)
        if refusal is not None:
            return refusal
        if on_deployment and version not in self.api_versions:
            return _azure(400, "BadRequest", "API version not supported")
        if (
            self.deployments is not None
            and record.model is not None
            and record.model not in self.deployments
        ):
            return _azure(404, "DeploymentNotFound", DEPLOYMENT_NOT_FOUND_MESSAGE)
        return None

    def _auth_refusal(self, headers: dict[str, str], on_deployment: bool) -> web.Response | None:
        key = headers.get("api-key")
        if key is not None:
            ok = accepts(self.keys, key)
            return None if ok else _azure(401, "401", INVALID_KEY_MESSAGE)
        token = bearer_token(headers)
        if token is None:
            return _azure(401, "401", MISSING_KEY_MESSAGE)
        ok = accepts(self.tokens, token) or (not on_deployment and accepts(self.keys, token))
        return None if ok else _azure(401, "401", INVALID_TOKEN_MESSAGE)


def _azure(status: int, code: str, message: str) -> web.Response:
    return web.json_response(azure_error(code, message), status=status)


__all__ = [
    "API_VERSIONS",
    "CATEGORIES",
    "FakeAzure",
    "azure_content_filter",
    "azure_error",
    "azure_filtered_answer",
    "azure_rate_limit",
    "azure_server_error",
    "filter_result",
]
