"""How each cloud provider kind is called: AWS Bedrock (``api: bedrock``), Google Vertex
AI (``api: vertex``), Azure OpenAI (``api: azure``) and Google AI Studio's Gemini API
(``api: gemini``), whose deployments are deployments like any other (docs/clouds.md).
Pure: no I/O. The cloud libraries are optional extras
(``llm-gateway[aws]``, ``[gcp]``, ``[azure]``), imported only when a policy names their kind.

A cloud deployment's request differs from a plain provider's in four ways, all here and
in :mod:`gateway.providers.google` (Vertex, AI Studio) over :mod:`gateway.providers.cloud`:

- the URL names the model (and, on Bedrock, Vertex and Gemini, whether it streams);
- the body: Bedrock and Vertex take Anthropic's Messages body without ``model`` (nor
  ``stream`` on Bedrock) and with their own ``anthropic_version``; Bedrock takes the
  client's ``anthropic-beta`` header in the body. Both take only ``user`` and
  ``assistant`` turns and only the betas they know (:meth:`Cloud.dialect`);
- the static key's header (a Bedrock API key as a bearer token, an Azure key as
  ``api-key``, a Gemini key as ``x-goog-api-key``), when the provider has one; otherwise
  a :class:`Credential` signs or adds a token per attempt (gateway/upstream/credentials.py);
- Bedrock's streams come in AWS event-stream frames, and its errors as
  ``{"message": ...}`` with the exception's name in a header: :meth:`Cloud.error_body`
  gives them Anthropic's error shape, so that the rest of the gateway reads them as it
  reads Anthropic's.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson
from yarl import URL

from gateway.formats import CHAT, CONVERSE, GEMINI, MESSAGES, RESPONSES, Format
from gateway.policy.schema import AZURE_API_VERSION, Provider
from gateway.providers.cloud import Authorizer, Cloud, without
from gateway.providers.google import GEMINI_ROOT, VERTEX_BETAS, GoogleAI, Vertex

__all__ = [
    "BEDROCK_BETAS",
    "KINDS",
    "VERTEX_BETAS",
    "Authorizer",
    "Cloud",
    "cloud_of",
    "counts",
    "formats_of",
    "native_paths",
]  # fmt: skip

#: The provider kinds of this package.
KINDS = frozenset({"bedrock", "vertex", "azure", "gemini"})

BEDROCK_VERSION = "bedrock-2023-05-31"

#: The ``anthropic-beta`` flags Bedrock's InvokeModel takes for Claude (as the body's
#: ``anthropic_beta``); any other is refused with ``400 ValidationException: invalid beta
#: flag``, so the gateway drops it (named in ``x-gateway-dropped``). Source: the
#: ``anthropic_beta`` parameter of AWS's "Anthropic Claude Messages API: Request and
#: Response" page,
#: https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages-request-response.html
#: (its list as quoted in coder/aibridge's Bedrock filter, its example's
#: ``computer-use-2024-10-22`` added), read 2026-12-07. Which Claude model takes which
#: flag varies (the page says per flag); the cloud judges that. Left out, their status on
#: Bedrock unknown or disputed as of that date (public reports, no AWS page):
#: ``claude-code-20250219`` (taken by some models, refused by Opus 4.7),
#: ``prompt-caching-scope-2026-01-05``, ``adaptive-thinking-2026-01-28``,
#: ``fine-grained-tool-streaming-2025-05-14``, ``compact-2026-01-12``,
#: ``advanced-tool-use-2025-11-20`` (Anthropic's own name; the clouds' is
#: ``tool-search-tool-2025-10-19``), and ``mid-conversation-system-*``: its system turns
#: are folded into ``system`` here, so it announces nothing the cloud sees.
BEDROCK_BETAS = frozenset(
    {"computer-use-2024-10-22", "computer-use-2025-01-24", "token-efficient-tools-2025-02-19",
     "interleaved-thinking-2025-05-14", "output-128k-2025-02-19", "dev-full-thinking-2025-05-14",
     "context-1m-2025-08-07", "context-management-2025-06-27", "effort-2025-11-24",
     "tool-search-tool-2025-10-19", "tool-examples-2025-10-29"}
)  # fmt: skip

_CHAT_PATHS = frozenset({"/v1/chat/completions"})
_NATIVE: dict[str, frozenset[str]] = {
    "bedrock": frozenset({"/v1/messages"}),
    "vertex": frozenset({"/v1/messages", *_CHAT_PATHS}),
    "azure": frozenset(
        {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
    ),
    "gemini": frozenset(),
}


def native_paths(api: str) -> frozenset[str]:
    """The client endpoints whose bodies a cloud kind takes as they are (its models may be
    called on the others through translation, where the endpoint is a conversation)."""
    return _NATIVE[api]


def formats_of(
    api: str, upstream_model: str, chosen: str | None, model_api: tuple[str, ...]
) -> tuple[Format, ...]:
    """The formats a cloud deployment speaks, the one a translated request goes in first.

    Bedrock: Anthropic's Messages for an Anthropic model (an id, inference profile or ARN
    naming ``anthropic.``), else Converse. Vertex: Messages for a Claude model; the
    OpenAI-compatible chat completions for a ``publisher/model`` id (its naming:
    ``google/gemini-2.5-flash``, ``meta/llama-...``); else Gemini's own ``generateContent``
    (``upstream_api: chat`` chooses the OpenAI-compatible endpoint for it too). Gemini:
    ``generateContent``. Azure: as an OpenAI provider, the model's ``upstream_api`` (chat
    completions by default). A deployment's own ``upstream_api``
    (``chosen``) decides where it is given.
    """
    if api == "gemini":
        return (GEMINI,)
    if api == "azure":
        names = (chosen,) if chosen else model_api
        picked = tuple(f for f in (CHAT, RESPONSES) if f.name in names)
        return picked or (CHAT,)
    if api == "bedrock":
        if chosen:
            return (MESSAGES,) if chosen == MESSAGES.name else (CONVERSE,)
        return (MESSAGES,) if "anthropic." in upstream_model else (CONVERSE,)
    if chosen:
        return (next((f for f in (MESSAGES, CHAT, GEMINI) if f.name == chosen), GEMINI),)
    if upstream_model.startswith("claude"):
        return (MESSAGES,)
    return (CHAT,) if "/" in upstream_model else (GEMINI,)


def counts(api: str, fmt: Format) -> bool:
    """A provider of kind ``api`` counts the tokens of a model it calls in ``fmt``: Claude
    on Anthropic, Bedrock and Vertex; Gemini on AI Studio and Vertex."""
    if fmt is MESSAGES:
        return api in (MESSAGES.provider_api, "bedrock", "vertex")
    return fmt is GEMINI and api in (GEMINI.provider_api, "vertex")


_ERROR_MAX_BYTES = 1 << 20


class Bedrock(Cloud):
    """AWS Bedrock Runtime: ``/model/{id}/invoke`` (``-with-response-stream``) for
    Anthropic's Messages body, ``/model/{id}/converse`` (``-stream``) for Converse."""

    api = "bedrock"
    betas = BEDROCK_BETAS

    def call(
        self,
        path: str,
        fmt: Format,
        model: str,
        body: dict[str, Any],
        stream: bool,
        beta: str | None,
    ) -> tuple[URL, dict[str, Any]]:
        if fmt is MESSAGES:
            out = _invoke_body(body, beta)
            op = "invoke-with-response-stream" if stream else "invoke"
        else:
            out = without(body, "model", "stream")
            op = "converse-stream" if stream else "converse"
        return self._model_url(model, op), out

    def count(
        self, model: str, fmt: Format, body: dict[str, Any], beta: str | None
    ) -> tuple[URL, dict[str, Any]]:
        """Bedrock's CountTokens: the InvokeModel body (``max_tokens`` required there: 1
        when the count request has none) in base64, as ``input.invokeModel.body``; the
        answer is ``{"inputTokens": N}``."""
        inner = _invoke_body(body, beta)
        inner.setdefault("max_tokens", 1)
        wrapped = base64.b64encode(orjson.dumps(inner)).decode("ascii")
        return self._model_url(model, "count-tokens"), {"input": {"invokeModel": {"body": wrapped}}}

    def _model_url(self, model: str, op: str) -> URL:
        return URL(f"{self.root}/model/{quote(model, safe='')}/{op}", encoded=True)

    def eventstream(self, fmt: Format, stream: bool) -> bool:
        return stream

    def error_body(self, headers: Mapping[str, str], raw: bytes) -> bytes:
        """Bedrock's ``{"message": M}`` with the exception named in ``x-amzn-errortype``
        (``ThrottlingException:http://...``) as Anthropic's error:
        ``{"type": "error", "error": {"type": "ThrottlingException", "message": M}}``."""
        kind = headers.get("x-amzn-errortype", "").split(":", 1)[0].strip()
        try:  # an error body is small: a large one is not read (as the classifier does)
            data = orjson.loads(raw) if len(raw) <= _ERROR_MAX_BYTES else None
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            message = raw[:2000].decode("utf-8", "replace").strip()
            data = {}
        else:
            found = data.get("message", data.get("Message"))
            message = found if isinstance(found, str) else ""
        if not kind:
            typ = data.get("__type")
            kind = typ.rsplit("#", 1)[-1] if isinstance(typ, str) else ""
        if not kind and not message:
            return raw
        error = {"type": kind or "error", "message": message}
        return orjson.dumps({"type": "error", "error": error})


def _invoke_body(body: dict[str, Any], beta: str | None) -> dict[str, Any]:
    """InvokeModel's body for Claude: the Messages body without ``model`` and ``stream``,
    with Bedrock's ``anthropic_version`` and the client's betas as ``anthropic_beta``."""
    out = without(body, "model", "stream")
    out["anthropic_version"] = BEDROCK_VERSION
    if beta:
        out["anthropic_beta"] = [b.strip() for b in beta.split(",") if b.strip()]
    return out


class Azure(Cloud):
    """Azure OpenAI: ``/openai/deployments/{deployment}/...?api-version=`` for chat
    completions, legacy completions and embeddings; ``/openai/v1/responses`` for
    Responses (the deployment named in the body)."""

    api = "azure"

    def __init__(self, root: str, api_version: str) -> None:
        super().__init__(root)
        self.query = {"api-version": api_version}

    def key_headers(self, key: str) -> dict[str, str]:
        return {"api-key": key}

    def call(
        self,
        path: str,
        fmt: Format,
        model: str,
        body: dict[str, Any],
        stream: bool,
        beta: str | None,
    ) -> tuple[URL, dict[str, Any]]:
        if fmt is RESPONSES:
            return URL(f"{self.root}/openai/v1/responses"), {**body, "model": model}
        op = path.removeprefix("/v1/") if path in _NATIVE["azure"] else "chat/completions"
        url = URL(f"{self.root}/openai/deployments/{quote(model, safe='')}/{op}", encoded=True)
        return url.with_query(self.query), {**body, "model": model}


def cloud_of(provider: Provider, base_url: str) -> Cloud:
    """The :class:`Cloud` of a provider of kind bedrock, vertex, azure or gemini: at
    ``base_url`` when given, else at the cloud's endpoint for its region."""
    region = provider.region or ""
    if provider.api == "bedrock":
        return Bedrock(base_url or f"https://bedrock-runtime.{region}.amazonaws.com")
    if provider.api == "vertex":
        host = "aiplatform.googleapis.com"
        root = base_url or f"https://{host if region == 'global' else f'{region}-{host}'}"
        return Vertex(root, provider.project or "", region)
    if provider.api == "gemini":
        return GoogleAI(base_url or GEMINI_ROOT)
    return Azure(base_url, provider.api_version or AZURE_API_VERSION)
