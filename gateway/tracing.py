"""OpenTelemetry traces: a server span per chat request and a client span per upstream attempt,
exported over OTLP/HTTP. Imported only when tracing is on (:mod:`gateway.tracing_settings`);
off, the exchange holds ``None`` where a :class:`RequestTrace` would be and creates no span.

Attributes follow the OpenTelemetry semantic conventions: HTTP server spans
(``http.request.method``, ``http.route``, ``url.path``, ``http.response.status_code``,
``client.address``, ``user_agent.original``) and GenAI inference spans
(``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
``gen_ai.response.finish_reasons``; https://opentelemetry.io/docs/specs/semconv/gen-ai/), plus
the gateway's own under ``gateway.`` (route, dialects, upstream, attempts, time to first token).
``gen_ai.provider.name`` is the upstream's dialect name: the semantic conventions make it the
discriminator of the API's flavour, "based on the instrumentation's best knowledge", and for
``openai`` and ``anthropic`` it is the registered value.

The incoming W3C ``traceparent``/``tracestate`` is continued (the server span is its child) and
each attempt's client span is sent upstream as the upstream's parent. Spans are begun where the
work begins and all ended in one place, from the request's :class:`~gateway.exchange.outcome.
Outcome` (:meth:`RequestTrace.finish`, called by :func:`~gateway.exchange.outcome.record`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as otel
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from yarl import URL

from gateway.incoming import ClientRequest
from gateway.log import redact_url, valid_text
from gateway.tracing_settings import DEFAULT_SERVICE_NAME, TracingSettings
from gateway.worker_status import version

if TYPE_CHECKING:
    from gateway.balancer import UpstreamState
    from gateway.canonical import ChatRequest
    from gateway.dialects import Dialect
    from gateway.exchange.outcome import Attempt, Outcome
    from gateway.runtime import RouteEntry

__all__ = ["OPERATION", "RequestTrace", "Tracing"]

OPERATION = "chat"
"""``gen_ai.operation.name`` of every span: each dialect is a chat API."""
_SAMPLING = (("temperature", "gen_ai.request.temperature"), ("top_p", "gen_ai.request.top_p"),
             ("max_tokens", "gen_ai.request.max_tokens"))


class Tracing:
    """One app's tracer: its provider (resource, sampler, processor), the W3C propagator."""

    __slots__ = ("_provider", "propagator", "tracer")

    def __init__(self, settings: TracingSettings, *,
                 processor: SpanProcessor | None = None) -> None:
        """``processor``: where spans go (default: batched to the OTLP/HTTP exporter); a test
        passes the SDK's ``SimpleSpanProcessor(InMemorySpanExporter())``."""
        attributes: dict[str, str] = {SERVICE_VERSION: version()}
        if settings.service_name:
            attributes[SERVICE_NAME] = settings.service_name
        resource = Resource.create(attributes)  # and OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        sampler = (None if settings.sample_ratio is None
                   else ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        # Not the global provider: several apps (tests) each have their own, shut down with
        # the app rather than at interpreter exit.
        self._provider = TracerProvider(sampler=sampler, resource=resource,
                                        shutdown_on_exit=False)
        if processor is None:
            processor = BatchSpanProcessor(OTLPSpanExporter(
                endpoint=settings.endpoint, headers=settings.headers, timeout=settings.timeout))
        self._provider.add_span_processor(processor)
        self.tracer = self._provider.get_tracer("chat-gateway", version())
        self.propagator = TraceContextTextMapPropagator()

    def begin(self, request: ClientRequest, entry: RouteEntry) -> RequestTrace:
        """The server span of one chat request, child of the client's ``traceparent``."""
        return RequestTrace(self, request, entry)

    async def aclose(self) -> None:
        """Export what is still queued and stop (bounded by the exporter's timeout)."""
        await asyncio.to_thread(self._provider.shutdown)


class RequestTrace:
    """The spans of one request: begun as the work begins, ended by :meth:`finish`."""

    __slots__ = ("_attempts", "_context", "_tracing", "server")

    def __init__(self, tracing: Tracing, request: ClientRequest, entry: RouteEntry) -> None:
        self._tracing = tracing
        route = entry.config.path
        parent = tracing.propagator.extract(request.headers)
        attributes: dict[str, Any] = {
            "http.request.method": request.method,
            "http.route": route,
            "url.path": valid_text(request.path),
            "url.scheme": request.scheme,
            "network.protocol.version": f"{request.version.major}.{request.version.minor}",
            "gen_ai.operation.name": OPERATION,
            "gateway.route": route,
            "gateway.client_dialect": entry.client.name,
        }
        agent = request.headers.get("User-Agent")
        if agent:
            attributes["user_agent.original"] = valid_text(agent)  # OTLP refuses surrogates
        self.server: Span = tracing.tracer.start_span(
            f"{request.method} {route}", context=parent, kind=SpanKind.SERVER,
            attributes=attributes)
        self._context = otel.set_span_in_context(self.server)
        self._attempts: list[tuple[Span, list[int]]] = []

    @property
    def trace_id(self) -> str:
        """The W3C trace id (32 hex digits), for the access log."""
        return f"{self.server.get_span_context().trace_id:032x}"

    def attempt(self, state: UpstreamState, dialect: Dialect, req: ChatRequest,
                headers: MutableMapping[str, str]) -> None:
        """Begin the client span of one upstream call and put its context in ``headers``."""
        up = state.config
        model = req.model or up.model
        url = URL(up.url)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.provider.name": dialect.name,
            "server.address": url.host or "",
            "server.port": url.port or 0,
            "url.full": redact_url(up.url),
            "http.request.method": "POST",
            "gateway.upstream": state.name,
            "gateway.upstream_dialect": dialect.name,
            "gateway.stream": req.stream,
        }
        if model:
            attributes["gen_ai.request.model"] = model
        for key, name in _SAMPLING:
            value = req.sampling.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        span = self._tracing.tracer.start_span(
            f"{OPERATION} {model}" if model else OPERATION, context=self._context,
            kind=SpanKind.CLIENT, attributes=attributes)
        headers.pop("tracestate", None)  # the client's, which the span context carries on
        self._tracing.propagator.inject(headers, context=otel.set_span_in_context(span))
        self._attempts.append((span, []))

    def attempt_ended(self) -> None:
        """The last attempt's upstream call is over (its span ends with that time)."""
        if self._attempts:
            self._attempts[-1][1].append(time.time_ns())

    def finish(self, o: Outcome) -> None:
        """End every span, with what the outcome says happened."""
        called = [a for a in o.attempts if a.outcome != "rejected"]  # no call, no span
        last = len(self._attempts) - 1
        for i, (span, ended) in enumerate(self._attempts):
            attempt = called[i] if i < len(called) else None
            if span.is_recording():
                _attempt_attributes(span, attempt, o, answered=i == last)
            span.end(end_time=ended[0] if ended else None)
        server = self.server
        if server.is_recording():
            _server_attributes(server, o)
        server.end()


def _response_attributes(o: Outcome) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if o.model:
        out["gen_ai.request.model"] = o.model
    if o.response_model:
        out["gen_ai.response.model"] = o.response_model
    if o.finish_reason:
        out["gen_ai.response.finish_reasons"] = [o.finish_reason]
    if o.usage is not None:
        if o.usage.input_tokens is not None:
            out["gen_ai.usage.input_tokens"] = o.usage.input_tokens
        if o.usage.output_tokens is not None:
            out["gen_ai.usage.output_tokens"] = o.usage.output_tokens
    return out


def _server_attributes(span: Span, o: Outcome) -> None:
    attributes: dict[str, Any] = {
        "http.response.status_code": o.status,
        "gateway.request_id": o.request_id,
        "gateway.upstream": o.upstream,
        "gateway.upstream_dialect": o.upstream_dialect,
        "gateway.stream": o.stream,
        "gateway.attempts": len(o.attempts),
        "gateway.stream_chunks": o.chunks,
        "gateway.client_disconnected": o.disconnected,
        "http.request.body.size": o.request_bytes,
        "http.response.body.size": o.response_bytes,
        **_response_attributes(o),
    }
    if o.client:
        attributes["client.address"] = o.client
    if o.ttft is not None:
        attributes["gateway.time_to_first_token"] = o.ttft
    if o.dropped:
        attributes["gateway.dropped_fields"] = list(o.dropped)
    if o.status >= 500:  # a server span's 4xx is the client's doing, not an error here
        attributes["error.type"] = str(o.status)
        span.set_status(Status(StatusCode.ERROR, o.error))
    span.set_attributes(attributes)


def _attempt_attributes(span: Span, a: Attempt | None, o: Outcome, *, answered: bool) -> None:
    attributes: dict[str, Any] = {}
    error: str | None = None
    if a is None:  # cut short: the client went away, or the gateway failed, mid-attempt
        error = "cancelled" if o.disconnected else "_OTHER"
    else:
        if a.status is not None:
            attributes["http.response.status_code"] = a.status
        if a.outcome == "status":
            error = str(a.status)
        elif a.outcome != "ok":
            error = a.outcome  # connect, timeout, malformed
    if answered and a is not None and a.outcome != "status":
        attributes.update(_response_attributes(o))
        attributes.pop("gen_ai.request.model", None)  # the span has the model it sent
    if error is not None:
        attributes["error.type"] = error
        span.set_status(Status(StatusCode.ERROR, o.error if answered and o.error else error))
    span.set_attributes(attributes)
