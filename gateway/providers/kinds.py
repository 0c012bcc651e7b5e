"""How each cloud provider kind is called: AWS Bedrock (``api: bedrock``), Google Vertex
AI (``api: vertex``) and Azure OpenAI (``api: azure``), whose deployments are deployments
like any other (docs/clouds.md). Pure: no I/O. The cloud libraries are optional extras
(``llm-gateway[aws]``, ``[gcp]``, ``[azure]``), imported only when a policy names their kind.

A cloud deployment's request differs from a plain provider's in four ways, all here:

- the URL names the model (and, on Bedrock and Vertex, whether it streams);
- the body: Bedrock and Vertex take Anthropic's Messages body without ``model`` (nor
  ``stream`` on Bedrock) and with their own ``anthropic_version``; Bedrock takes the
  client's ``anthropic-beta`` header in the body. Both take only ``user`` and
  ``assistant`` turns and only the betas they know (:meth:`Cloud.dialect`);
- the static key's header (a Bedrock API key as a bearer token, an Azure key as
  ``api-key``), when the provider has one; otherwise a :class:`Credential` signs or adds
  a token per attempt (gateway/upstream/credentials.py);
- Bedrock's streams come in AWS event-stream frames, and its errors as
  ``{"message": ...}`` with the exception's name in a header: :meth:`Cloud.error_body`
  gives them Anthropic's error shape, so that the rest of the gateway reads them as it
  reads Anthropic's.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

import orjson
from yarl import URL

from gateway.formats import CHAT, CONVERSE, MESSAGES, RESPONSES, Format
from gateway.policy.schema import AZURE_API_VERSION, Provider

__all__ = [
    "BEDROCK_BETAS", "KINDS", "VERTEX_BETAS", "Authorizer", "Cloud", "cloud_of", "formats_of",
    "native_paths",
]  # fmt: skip

#: The provider kinds of this package.
KINDS = frozenset({"bedrock", "vertex", "azure"})

BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"

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
#: The ``anthropic-beta`` flags Vertex AI's ``rawPredict`` takes for Claude (as the
#: header); any other is refused with a 400 ``invalid_request_error``, so the gateway
#: drops it (named). Neither Google's nor Anthropic's Vertex pages (read 2026-12-07:
#: https://cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude,
#: https://platform.claude.com/docs/en/build-with-claude/claude-on-vertex-ai) list flags;
#: these are the long-standing ones among the flags LiteLLM's maintained per-cloud table
#: marks as taken on Vertex (litellm/anthropic_beta_headers_config.json, "vertex_ai",
#: read 2026-12-07); Claude Code's own sources also name ``tool-search-tool-2025-10-19``
#: as the clouds' flag. Left out as unknown or refused: the newer flags that table marks
#: as taken (``compact-*``, ``computer-use-2025-11-24``, ``per-turn-control-*``,
#: ``thinking-*``, ``dangerous-tool-use-*``: no second source found),
#: ``claude-code-20250219``, ``prompt-caching-scope-2026-01-05``, ``effort-2025-11-24``,
#: ``token-efficient-tools-2025-02-19``, ``output-128k-2025-02-19``,
#: ``fine-grained-tool-streaming-2025-05-14``, ``adaptive-thinking-2026-01-28``,
#: ``advanced-tool-use-2025-11-20``, ``files-api-2025-04-14``, and
#: ``mid-conversation-system-*`` (folded, as on Bedrock).
VERTEX_BETAS = frozenset(
    {"computer-use-2025-01-24", "interleaved-thinking-2025-05-14", "context-1m-2025-08-07",
     "context-management-2025-06-27", "tool-search-tool-2025-10-19", "web-search-2025-03-05"}
)  # fmt: skip
#: How a dropped beta is named in ``x-gateway-dropped``: ``anthropic-beta:<flag>``.
DROPPED_BETA = "anthropic-beta:"

_CHAT_PATHS = frozenset({"/v1/chat/completions"})
_NATIVE: dict[str, frozenset[str]] = {
    "bedrock": frozenset({"/v1/messages"}),
    "vertex": frozenset({"/v1/messages", *_CHAT_PATHS}),
    "azure": frozenset(
        {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
    ),
}


class Authorizer(Protocol):
    """What authorizes a cloud attempt (gateway/upstream/credentials.py): a SigV4 signature
    or a current token, added to ``headers`` in place; no I/O. Raises
    ``CredentialUnavailable`` when there is none to use."""

    provider: str
    problem: str | None

    def authorize(self, method: str, url: URL, headers: dict[str, str], body: bytes) -> None: ...


def native_paths(api: str) -> frozenset[str]:
    """The client endpoints whose bodies a cloud kind takes as they are (its models may be
    called on the others through translation, where the endpoint is a conversation)."""
    return _NATIVE[api]


def formats_of(
    api: str, upstream_model: str, chosen: str | None, model_api: tuple[str, ...]
) -> tuple[Format, ...]:
    """The formats a cloud deployment speaks, the one a translated request goes in first.

    Bedrock: Anthropic's Messages for an Anthropic model (an id, inference profile or ARN
    naming ``anthropic.``), else Converse. Vertex: Messages for a Claude model, else the
    OpenAI-compatible chat completions. Azure: as an OpenAI provider, the model's
    ``upstream_api`` (chat completions by default). A deployment's own ``upstream_api``
    (``chosen``) decides where it is given.
    """
    if api == "azure":
        names = (chosen,) if chosen else model_api
        picked = tuple(f for f in (CHAT, RESPONSES) if f.name in names)
        return picked or (CHAT,)
    if api == "bedrock":
        if chosen:
            return (MESSAGES,) if chosen == MESSAGES.name else (CONVERSE,)
        return (MESSAGES,) if "anthropic." in upstream_model else (CONVERSE,)
    if chosen:
        return (MESSAGES,) if chosen == MESSAGES.name else (CHAT,)
    return (MESSAGES,) if upstream_model.startswith("claude") else (CHAT,)


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
        self, model: str, body: dict[str, Any], beta: str | None
    ) -> tuple[URL, dict[str, Any]]:
        """The URL and body of Anthropic's token count for a Messages ``body`` on ``model``
        (a Claude model this cloud serves with Messages)."""
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


_ERROR_MAX_BYTES = 1 << 20


def _without(body: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in names}


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
            out = _without(body, "model", "stream")
            op = "converse-stream" if stream else "converse"
        return self._model_url(model, op), out

    def count(
        self, model: str, body: dict[str, Any], beta: str | None
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
    out = _without(body, "model", "stream")
    out["anthropic_version"] = BEDROCK_VERSION
    if beta:
        out["anthropic_beta"] = [b.strip() for b in beta.split(",") if b.strip()]
    return out


class Vertex(Cloud):
    """Google Vertex AI: Claude by ``rawPredict`` / ``streamRawPredict`` with Anthropic's
    Messages body, other models by the OpenAI-compatible chat completions endpoint."""

    api = "vertex"
    betas = VERTEX_BETAS

    def __init__(self, root: str, project: str, region: str) -> None:
        super().__init__(root)
        self.base = f"{self.root}/v1/projects/{quote(project, safe='')}/locations/{region}"

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
            out = _without(body, "model")
            out["anthropic_version"] = VERTEX_VERSION
            op = "streamRawPredict" if stream else "rawPredict"
            url = f"{self.base}/publishers/anthropic/models/{quote(model, safe='@')}:{op}"
            return URL(url, encoded=True), out
        return URL(f"{self.base}/endpoints/openapi/chat/completions"), {**body, "model": model}

    def count(
        self, model: str, body: dict[str, Any], beta: str | None
    ) -> tuple[URL, dict[str, Any]]:
        """Vertex's ``count-tokens:rawPredict``: the Messages body naming the model."""
        out = _without(body, "stream")
        out["model"] = model
        out["anthropic_version"] = VERTEX_VERSION
        url = f"{self.base}/publishers/anthropic/models/count-tokens:rawPredict"
        return URL(url, encoded=True), out

    def passes_beta(self) -> bool:
        return True


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
    """The :class:`Cloud` of a provider of kind bedrock, vertex or azure: at ``base_url``
    when given, else at the cloud's endpoint for its region."""
    region = provider.region or ""
    if provider.api == "bedrock":
        return Bedrock(base_url or f"https://bedrock-runtime.{region}.amazonaws.com")
    if provider.api == "vertex":
        host = "aiplatform.googleapis.com"
        root = base_url or f"https://{host if region == 'global' else f'{region}-{host}'}"
        return Vertex(root, provider.project or "", region)
    return Azure(base_url, provider.api_version or AZURE_API_VERSION)
