"""Google's provider kinds: Vertex AI (``api: vertex``: Claude by ``rawPredict``, Gemini
by its own ``generateContent``, other models by the OpenAI-compatible endpoint) and
Google AI Studio's Gemini API (``api: gemini``). Pure: no I/O."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from yarl import URL

from gateway.formats import GEMINI, MESSAGES, Format
from gateway.providers.cloud import Cloud, without

VERTEX_VERSION = "vertex-2023-10-16"
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
#: Google AI Studio's Gemini API, where ``api: gemini`` goes unless ``base_url`` says.
GEMINI_ROOT = "https://generativelanguage.googleapis.com"


class Vertex(Cloud):
    """Google Vertex AI: Claude by ``rawPredict`` / ``streamRawPredict`` with Anthropic's
    Messages body; Gemini by its own ``generateContent`` / ``streamGenerateContent``, or
    by the OpenAI-compatible chat completions endpoint."""

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
            out = without(body, "model")
            out["anthropic_version"] = VERTEX_VERSION
            op = "streamRawPredict" if stream else "rawPredict"
            url = f"{self.base}/publishers/anthropic/models/{quote(model, safe='@')}:{op}"
            return URL(url, encoded=True), out
        if fmt is GEMINI:
            return _gemini_url(f"{self.base}/publishers/google", model, stream), body
        return URL(f"{self.base}/endpoints/openapi/chat/completions"), {**body, "model": model}

    def count(
        self, model: str, fmt: Format, body: dict[str, Any], beta: str | None
    ) -> tuple[URL, dict[str, Any]]:
        """Vertex's ``count-tokens:rawPredict`` for Claude (the Messages body naming the
        model); Gemini's ``countTokens`` (the request's contents, system and tools)."""
        if fmt is GEMINI:
            url = f"{self.base}/publishers/google/models/{quote(model, safe='@')}:countTokens"
            keys = ("contents", "systemInstruction", "tools", "generationConfig")
            return URL(url, encoded=True), {k: body[k] for k in keys if k in body}
        out = without(body, "stream")
        out["model"] = model
        out["anthropic_version"] = VERTEX_VERSION
        url = f"{self.base}/publishers/anthropic/models/count-tokens:rawPredict"
        return URL(url, encoded=True), out

    def passes_beta(self) -> bool:
        return True


class GoogleAI(Cloud):
    """Google AI Studio's Gemini API: ``/v1beta/models/{model}:generateContent`` and
    ``:streamGenerateContent?alt=sse``, the key as ``x-goog-api-key``."""

    api = "gemini"

    def key_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def call(
        self,
        path: str,
        fmt: Format,
        model: str,
        body: dict[str, Any],
        stream: bool,
        beta: str | None,
    ) -> tuple[URL, dict[str, Any]]:
        return _gemini_url(f"{self.root}/v1beta", model, stream), body

    def count(
        self, model: str, fmt: Format, body: dict[str, Any], beta: str | None
    ) -> tuple[URL, dict[str, Any]]:
        """``countTokens`` of the whole request (``generateContentRequest``: its system
        and tools count too); the answer is ``{"totalTokens": N}``."""
        url = URL(f"{self.root}/v1beta/models/{quote(model, safe='')}:countTokens", encoded=True)
        return url, {"generateContentRequest": {"model": f"models/{model}", **body}}


def _gemini_url(root: str, model: str, stream: bool) -> URL:
    """``{root}/models/{model}:generateContent``, or its stream in SSE."""
    name = quote(model, safe="@")
    if stream:
        return URL(f"{root}/models/{name}:streamGenerateContent?alt=sse", encoded=True)
    return URL(f"{root}/models/{name}:generateContent", encoded=True)


__all__ = ["GEMINI_ROOT", "VERTEX_BETAS", "VERTEX_VERSION", "GoogleAI", "Vertex"]
