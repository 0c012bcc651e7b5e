"""A scripted fake Google Vertex AI: Claude by ``rawPredict`` / ``streamRawPredict``,
Gemini natively (``generateContent``), and the OpenAI-compatible chat endpoint, on a real
aiohttp server.

It is a :class:`~gateway.testing.FakeProvider` (same answers, script steps, records)
served on Vertex's paths, with Vertex's checks in front::

    from gateway.testing import FakeVertex, vertex_resource_exhausted

    async with FakeVertex(tokens={"ya29.good"}, project="acme-ml") as fv:
        fv.push(vertex_resource_exhausted(), model="claude-sonnet-4-5@20250929")
        client = anthropic.AsyncAnthropicVertex(
            region="europe-west1", project_id="acme-ml", access_token="ya29.good",
            base_url=fv.url + "/v1",
        )

(The ``anthropic`` SDK may fill in another ``anthropic_version``: pass Vertex's in
``extra_body``, or add the SDK's to ``fv.anthropic_versions``.)

Endpoints (``fv.url`` stands for ``https://{region}-aiplatform.googleapis.com``, or
``https://aiplatform.googleapis.com`` for the ``global`` region):

- ``POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``
  and ``:streamRawPredict``: an Anthropic Messages body with ``"anthropic_version":
  "vertex-2023-10-16"`` (``fv.anthropic_versions``) and no ``model`` (the model is the
  path's, e.g. ``claude-sonnet-4-5@20250929``: scripts and ``reply`` are keyed by it);
  ``:streamRawPredict`` wants ``"stream": true`` and ``:rawPredict`` its absence. The
  answer and the SSE stream are exactly Anthropic's. Every turn's ``role`` must be
  ``user`` or ``assistant``, and every flag of the ``anthropic-beta`` header one Vertex
  knows (``fv.betas``, by default the gateway's list of them,
  :data:`gateway.providers.kinds.VERTEX_BETAS`). Otherwise a 400 ``invalid_request_error``
  in Anthropic's shape ("messages.N: role must be user or assistant", "Unexpected
  value(s) `F` for the `anthropic-beta` header. ...").
- ``POST .../publishers/anthropic/models/count-tokens:rawPredict``: the body names the
  model; the answer is ``{"input_tokens": N}`` (never scripted).
- ``POST /v1/projects/{project}/locations/{region}/endpoints/openapi/chat/completions``:
  OpenAI chat completions, the model in the body (``google/gemini-2.0-flash-001``).
- ``POST /{v}/projects/{project}/locations/{region}/publishers/google/models/{model}``
  ``:generateContent``, ``:streamGenerateContent?alt=sse`` (without ``alt=sse``: a JSON
  array) and ``:countTokens`` (``{v}``: ``v1`` or ``v1beta1``, the ``google-genai`` SDK's
  default): Gemini, served as :class:`~gateway.testing.FakeGemini` serves it (answers,
  refusals, thought signatures: ``fv.signatures_required``, ``fv.signatures``), in
  Vertex's shapes (``createTime``, ``usageMetadata.trafficType``, no candidate ``index``;
  countTokens adds ``totalBillableCharacters``) and with Vertex's rule that every content
  names its role. ``genai.Client(vertexai=True, project=..., location=...,
  credentials=google.oauth2.credentials.Credentials("ya29.good"),
  http_options=types.HttpOptions(base_url=fv.url))`` drives it.

**Refusals** (before the script is consulted, in Google's error shape): no
``Authorization: Bearer`` token, or one that ``tokens`` does not accept (a collection,
a predicate, or ``None`` for any), is a 401 ``UNAUTHENTICATED``; a path naming another
``project`` or ``region`` than the fake's (when given) is a 403 ``PERMISSION_DENIED``.

**Prompt cache**: the fake provider's (``fv.prompt_cache``, ``None``: off), one per model
for the whole fake (a project's: the access tokens that come and go share it). Claude
bodies are cached at their ``cache_control`` markers (more than 4: Anthropic's 400), the
chat and Gemini routes automatically.

**Faults**: every step of :mod:`gateway.testing.script`, per model and per token
(``key=`` is the bearer token), plus Vertex's own: :func:`vertex_resource_exhausted`
(429 ``RESOURCE_EXHAUSTED``) and :func:`vertex_server_error` (500 ``INTERNAL`` / 503
``UNAVAILABLE``); on the Claude routes ``Error.anthropic_overloaded()`` is Anthropic's
529 ``overloaded_error`` as Vertex passes it through; on the Gemini routes the
``Error.gemini_*`` errors and Gemini's in-stream error event.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable
from typing import Any

from aiohttp import web

from gateway.providers.kinds import VERTEX_BETAS
from gateway.testing.cloud_auth import Accept, accepts, bearer_token
from gateway.testing.conversation import parse_messages
from gateway.testing.error_bodies import anthropic_error, google_error
from gateway.testing.fake_gemini import GeminiServer
from gateway.testing.fake_provider import RecordedRequest
from gateway.testing.script import Error

#: The ``anthropic_version`` a Vertex Claude body must carry.
VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
_COUNT_TOKENS = "count-tokens"
_ACTIONS = ("rawPredict", "streamRawPredict")
_PREFIX = "/v1/projects/{project}/locations/{region}"
#: Vertex's native Gemini route (the last segment: ``{model}:{method}``).
_GEMINI = "/{version:v1|v1beta1}/projects/{project}/locations/{region}/publishers/google/models"

UNAUTHENTICATED_MESSAGE = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)
RESOURCE_EXHAUSTED_MESSAGE = (
    "Resource exhausted. Please try again later. Please refer to "
    "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
)
_SERVER_ERRORS = {
    500: ("INTERNAL", "Internal error encountered."),
    503: ("UNAVAILABLE", "The service is currently unavailable."),
}


def vertex_resource_exhausted() -> Error:
    """429 ``RESOURCE_EXHAUSTED`` as Vertex sends it (no retry hint in the headers)."""
    return Error(429, google_error(429, "RESOURCE_EXHAUSTED", RESOURCE_EXHAUSTED_MESSAGE))


def vertex_server_error(status: int = 503) -> Error:
    """A Vertex 5xx: 500 ``INTERNAL``, 503 ``UNAVAILABLE`` (other codes: ``INTERNAL``)."""
    name, message = _SERVER_ERRORS.get(status, _SERVER_ERRORS[500])
    return Error(status, google_error(status, name, message))


class FakeVertex(GeminiServer):
    """A scripted fake Vertex AI served on ``127.0.0.1`` (see the module docstring)."""

    vertex_shapes = True

    def __init__(
        self,
        *,
        tokens: Accept = None,
        project: str | None = None,
        region: str | None = None,
        anthropic_versions: Iterable[str] = (VERTEX_ANTHROPIC_VERSION,),
        chunks: int = 8,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(chunks=chunks, models=(), ssl_context=ssl_context)
        #: The bearer tokens accepted: a collection, a predicate, or ``None`` (any);
        #: change it during a test to expire or revoke a token.
        self.tokens: Accept = tokens
        #: The only project / region served (``None``: any).
        self.project = project
        self.region = region
        #: The ``anthropic_version`` values a Claude body may carry.
        self.anthropic_versions: set[str] = set(anthropic_versions)
        #: The ``anthropic-beta`` flags taken on the Claude routes.
        self.betas: set[str] = set(VERTEX_BETAS)

    def _add_routes(self, app: web.Application) -> None:
        messages: Callable[[web.Request], Awaitable[web.StreamResponse]]
        messages = self._endpoint("messages")

        async def claude(request: web.Request) -> web.StreamResponse:
            model, action = _model_and_action(request)
            if action not in _ACTIONS:
                return _google(404, "NOT_FOUND", f"Method {action!r} not found.")
            if model == _COUNT_TOKENS:
                return await self._count_tokens(request)
            return await messages(request)

        app.router.add_post(_PREFIX + "/publishers/anthropic/models/{action}", claude)
        app.router.add_post(_PREFIX + "/endpoints/openapi/chat/completions", self._endpoint("chat"))
        app.router.add_post(_GEMINI + "/{target}", self._endpoint("gemini"))

    def _cache_scope(self, record: RecordedRequest) -> Hashable:
        """The project's cache for the model: every access token shares it."""
        return record.model

    def _model_of(self, request: web.Request, body: Any) -> str | None:
        model, _ = _model_and_action(request)
        if model is None or model == _COUNT_TOKENS:
            return super()._model_of(request, body)
        return model

    def _refuse(self, request: web.Request, record: RecordedRequest) -> web.Response | None:
        if not accepts(self.tokens, bearer_token(record.headers)):
            return _google(401, "UNAUTHENTICATED", UNAUTHENTICATED_MESSAGE)
        project, region = request.match_info["project"], request.match_info["region"]
        if (self.project or project) != project or (self.region or region) != region:
            message = (
                f"Permission 'aiplatform.endpoints.predict' denied on resource "
                f"'//aiplatform.googleapis.com{request.path.removeprefix('/v1')}' "
                "(or it may not exist)."
            )
            return _google(403, "PERMISSION_DENIED", message)
        model, action = _model_and_action(request)
        if model is None or not isinstance(record.body, dict):
            return None  # the chat and Gemini routes, or a body the base refuses
        problem = _beta_problem(record.headers.get("anthropic-beta"), self.betas)
        problem = problem or _claude_body_problem(
            record.body, self.anthropic_versions, model == _COUNT_TOKENS, action
        )
        if problem is None:
            return None
        return web.json_response(anthropic_error("invalid_request_error", problem), status=400)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = self._record(request, body)
        refusal = self._refuse(request, record)
        if refusal is not None:
            return refusal
        if not isinstance(body, dict):
            message = "We could not parse the JSON body."
            return web.json_response(anthropic_error("invalid_request_error", message), status=400)
        return web.json_response({"input_tokens": parse_messages(body).prompt_tokens})


def _model_and_action(request: web.Request) -> tuple[str | None, str | None]:
    """``(model, action)`` of a Claude path (``None, None`` on the chat and Gemini routes)."""
    segment = request.match_info.get("action")
    if segment is None:
        return None, None
    model, _, action = segment.rpartition(":")
    return model, action


def _beta_problem(header: str | None, betas: Collection[str]) -> str | None:
    """What Vertex says of an ``anthropic-beta`` header with flags it does not take."""
    unknown = [f for f in (header or "").split(",") if f.strip() and f.strip() not in betas]
    if not unknown:
        return None
    return (
        f"Unexpected value(s) `{','.join(f.strip() for f in unknown)}` for the "
        "`anthropic-beta` header. Please consult our documentation at docs.anthropic.com "
        "or try again without the header."
    )


def _claude_body_problem(
    body: dict[str, Any], versions: Collection[str], count: bool, action: str | None
) -> str | None:
    """What is wrong with a Claude body for Vertex (``None``: nothing)."""
    version = body.get("anthropic_version")
    if version is None:
        return "anthropic_version: Field required"
    if version not in versions:
        return "anthropic_version: Input should be " + " or ".join(
            f"'{v}'" for v in sorted(versions)
        )
    if count:
        return _role_problem(body.get("messages")) if "model" in body else "model: Field required"
    if "model" in body:
        return "model: Extra inputs are not permitted"
    if (action == "streamRawPredict") != (body.get("stream") is True):
        return "stream: must be true for streamRawPredict, and absent or false for rawPredict"
    return _role_problem(body.get("messages"))


def _role_problem(messages: Any) -> str | None:
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(m, dict) and m.get("role") not in ("user", "assistant"):
            return f"messages.{i}: role must be user or assistant"
    return None


def _google(code: int, status: str, message: str) -> web.Response:
    return web.json_response(google_error(code, status, message), status=code)


__all__ = [
    "VERTEX_ANTHROPIC_VERSION",
    "FakeVertex",
    "google_error",
    "vertex_resource_exhausted",
    "vertex_server_error",
]
