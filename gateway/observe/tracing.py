"""OpenTelemetry traces: one request's whole recovery story in the operator's tracing tool.

Optional: ``pip install 'llm-gateway[otel]'`` (the OpenTelemetry SDK and its OTLP/HTTP
exporter), configured by the standard ``OTEL_*`` variables. Tracing is on when an OTLP
endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``) and
``OTEL_SDK_DISABLED`` is not true; sampling (``OTEL_TRACES_SAMPLER``, parent-based by
default), batching (``OTEL_BSP_*``), headers and the service name (``OTEL_SERVICE_NAME``,
default ``llm-gateway``) follow the SDK's own reading of the environment. Off, the
gateway pays one ``is None`` test per request.

What a trace holds (docs/operations.md, Tracing):

- one SERVER span per client request, continuing the client's W3C ``traceparent``;
- one CLIENT span per upstream attempt, its ``traceparent`` sent to the provider; a
  streamed attempt's span ends with its stream (complete, cut or left by the client),
  with the usage, finish reasons and response model the stream carried;
- GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``gen_ai.response.finish_reasons``, ``error.type``) and the
  gateway's own (``llm_gateway.attempt``, ``llm_gateway.recovery``,
  ``llm_gateway.deployment``, ``llm_gateway.route``, ``llm_gateway.team``);
- the recovery as events of the server span: each wait (``api_retry``,
  ``turn_retry``), a fallback, a compaction, a continuation, a stream interruption
  and its resume.

Never the prompt, the answer or a key: attributes and events carry names, numbers and
categories only, like the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.formats.endpoints import ENDPOINT_OF, Endpoint
from gateway.observe.request_log import RequestLog

log = logging.getLogger("gateway.tracing")

#: The GenAI operation of the endpoints that are not a chat (every conversation format is).
_OPERATION = {Endpoint.completions: "text_completion", Endpoint.embeddings: "embeddings"}


def finish_reasons(data: Any) -> list[str]:
    """The stop reasons of a decoded answer or final stream event, in any of the formats."""
    if not isinstance(data, dict):
        return []
    choices = data.get("choices")
    if isinstance(choices, list):
        return [
            str(c["finish_reason"])
            for c in choices
            if isinstance(c, dict) and c.get("finish_reason")
        ]
    for holder in (data, data.get("delta"), data.get("message")):
        if isinstance(holder, dict) and holder.get("stop_reason"):
            return [str(holder["stop_reason"])]
    response = data.get("response") if data.get("object") != "response" else data
    if isinstance(response, dict) and response.get("status"):
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return [str(reason or response["status"])]
    return []


def response_model(data: Any) -> str | None:
    """The model a decoded answer or stream event names (chat chunks and answers,
    Anthropic ``message_start``, Responses events), if any."""
    if not isinstance(data, dict):
        return None
    for holder in (data, data.get("message"), data.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("model"), str):
            return str(holder["model"])
    return None


@dataclass(slots=True)
class StreamTrace:
    """A streamed attempt's span while its stream is relayed: what the relay saw of it
    (made by the attempter when the request is traced; ended by the relay)."""

    tracing: Tracing
    span: Any
    status: int
    model: str | None = None
    tokens: tuple[int, int] | None = None  # (input, output), summed as the log sums them
    reasons: list[str] = field(default_factory=list)

    def usage(self, u: tuple[int, int], data: Any) -> None:
        """An event with usage (and, Anthropic's ``message_delta``, the stop reason)."""
        inp, out = self.tokens or (0, 0)
        self.tokens = (inp + u[0], max(out, u[1]))
        self.reasons = finish_reasons(data) or self.reasons

    def final(self, data: Any) -> None:
        """The stream's final event."""
        self.reasons = finish_reasons(data) or self.reasons
        self.model = self.model or response_model(data)

    def end(self, error: str | None) -> None:
        """End the span (``error``: the failure category of a cut stream, ``cancelled``
        when the client left); once."""
        if self.span is not None:
            self.tracing._end_attempt(
                self.span, self.status, error, self.model, self.tokens, self.reasons
            )
            self.span = None


class Tracing:
    """Spans for requests and attempts (made by :func:`configure`)."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self._tracer = provider.get_tracer("llm-gateway")
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()

    # ---- the client's request -------------------------------------------------------
    def request(self, method: str, path: str, headers: Mapping[str, str], log: RequestLog) -> None:
        """Start the SERVER span of a request (a child of the client's traceparent)."""
        parent = self._propagator.extract(carrier=headers) if "traceparent" in headers else None
        attrs: dict[str, Any] = {
            "http.request.method": method,
            "url.path": path,
            "llm_gateway.request_id": log.request_id,
        }
        endpoint = ENDPOINT_OF.get(path)
        if endpoint is not None:
            attrs["gen_ai.operation.name"] = _OPERATION.get(endpoint, "chat")
        span = self._tracer.start_span(
            f"{method} {path}", context=parent, kind=self._trace.SpanKind.SERVER, attributes=attrs
        )
        if span.is_recording():
            log.span = span
        else:  # not sampled: no more span work, but the trace context still goes upstream
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
            log.traceparent = carrier.get("traceparent")

    def finish(self, log: RequestLog) -> None:
        """End the SERVER span with what the request came to."""
        span = log.span
        attrs: dict[str, Any] = {
            "http.response.status_code": log.status,
            "llm_gateway.team": log.team,
            "llm_gateway.route": log.route,
            "llm_gateway.attempts": log.attempts,
            "llm_gateway.recovery": list(log.recovery),
        }
        if log.model != "-":
            attrs["gen_ai.request.model"] = log.model
            attrs["gen_ai.response.model"] = log.answered_by or log.model
        bill = log.bill
        if bill.prompt_tokens or bill.completion_tokens:
            attrs["gen_ai.usage.input_tokens"] = bill.prompt_tokens
            attrs["gen_ai.usage.output_tokens"] = bill.completion_tokens
        if log.finish_reasons:
            attrs["gen_ai.response.finish_reasons"] = list(log.finish_reasons)
        if log.status >= 400 or log.error:
            attrs["error.type"] = _error_type(log)
            if log.status >= 500 or log.status == 0:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.set_attributes(attrs)
        span.end()

    # ---- one upstream attempt -------------------------------------------------------
    def attempt(
        self,
        log: RequestLog,
        endpoint: Endpoint,
        provider: str,
        deployment: str,
        model: str,
        upstream_model: str,
        headers: dict[str, str],
    ) -> Any:
        """Start the CLIENT span of one attempt (on ``deployment`` of ``model``: its name,
        ``keys#1``, ``azure-eu``) and put its traceparent in ``headers``."""
        op = _OPERATION.get(endpoint, "chat")
        ctx = self._trace.set_span_in_context(log.span)
        span = self._tracer.start_span(
            f"{op} {upstream_model}",
            context=ctx,
            kind=self._trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": op,
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": upstream_model,
                "llm_gateway.model": model,
                "llm_gateway.deployment": deployment,
                "llm_gateway.attempt": log.attempts,
                "llm_gateway.route": log.route,
            },
        )
        self._propagator.inject(headers, context=self._trace.set_span_in_context(span))
        return span

    def attempt_done(self, span: Any, status: int, error: str | None, answer: Any = None) -> None:
        """End an attempt's span: its status, the failure category, usage if known."""
        attrs: dict[str, Any] = {}
        if isinstance(answer, dict):
            if isinstance(answer.get("model"), str):
                attrs["gen_ai.response.model"] = answer["model"]
            usage = answer.get("usage")
            if isinstance(usage, dict):
                inp = usage.get("prompt_tokens", usage.get("input_tokens"))
                out = usage.get("completion_tokens", usage.get("output_tokens"))
                if isinstance(inp, int):
                    attrs["gen_ai.usage.input_tokens"] = inp
                if isinstance(out, int):
                    attrs["gen_ai.usage.output_tokens"] = out
            reasons = finish_reasons(answer)
            if reasons:
                attrs["gen_ai.response.finish_reasons"] = reasons
        self._end(span, status, error, attrs)

    def streamed(self, span: Any, status: int, head: Iterable[Any]) -> StreamTrace:
        """An attempt whose stream opened: its span ends with the stream (``head``: the
        decoded events read so far, for the response model)."""
        model = next((m for m in map(response_model, head) if m), None)
        return StreamTrace(self, span, status, model)

    def _end_attempt(
        self,
        span: Any,
        status: int,
        error: str | None,
        model: str | None,
        tokens: tuple[int, int] | None,
        reasons: list[str],
    ) -> None:
        attrs: dict[str, Any] = {}
        if model is not None:
            attrs["gen_ai.response.model"] = model
        if tokens is not None:
            attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"] = tokens
        if reasons:
            attrs["gen_ai.response.finish_reasons"] = reasons
        self._end(span, status, error, attrs)

    def _end(self, span: Any, status: int, error: str | None, attrs: dict[str, Any]) -> None:
        if status:
            attrs["http.response.status_code"] = status
        if error is not None:
            attrs["error.type"] = error
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.set_attributes(attrs)
        span.end()

    # ---- recovery, as events of the request's span ----------------------------------
    @staticmethod
    def event(log: RequestLog, name: str, attributes: Mapping[str, Any]) -> None:
        if log.span is not None:
            log.span.add_event(name, attributes=dict(attributes))

    def shutdown(self) -> None:
        """Export what is buffered and stop (blocking: call it from a thread)."""
        self._provider.shutdown()


def _error_type(log: RequestLog) -> str:
    if log.error:
        return log.error.split(":")[0]
    return str(log.status)


def configure(env: Mapping[str, str]) -> Tracing | None:
    """A :class:`Tracing` when the environment asks for traces and the SDK is installed."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return None
    if not (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip()
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
    except ImportError as e:
        log.warning(
            "tracing_unavailable",
            extra={"error": f"{e.name or e}: install 'llm-gateway[otel]' for OTLP traces"},
        )
        return None
    attrs = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "llm-gateway"}
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider)
