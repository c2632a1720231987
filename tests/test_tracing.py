"""OpenTelemetry traces: the spans (one server span per chat request, one client span per
upstream attempt), their attributes (HTTP and GenAI semantic conventions, and the gateway's
own), the W3C trace context continued from the client and handed to the upstream, sampling, and
export: to the SDK's in-memory exporter, and over OTLP/HTTP into a real receiver on 127.0.0.1
that decodes the protobuf with ``opentelemetry-proto``. Off, nothing of OpenTelemetry runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from fakes import eventually, split_frames
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import create_app
from gateway.canonical import ChatRequest, ChatResponse, Message
from gateway.config import TracingConfig, parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.keys import ENV
from gateway.pipeline import StreamAssembler
from gateway.tracing import Tracing
from gateway.tracing_settings import TracingSettings, tracing_settings
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

MODEL = "client-model"


def _carries_model_and_temperature(d: Dialect) -> bool:
    req = ChatRequest([Message("user", "hi")], model=MODEL, sampling={"temperature": 0.2})
    back = d.parse_request(d.render_request(req, stream=False, model=None, max_tokens=64))
    return back.model == MODEL and back.sampling.get("temperature") == 0.2


CLIENT = next(d for d in DIALECTS.values() if _carries_model_and_temperature(d))
"""The client's dialect: one whose requests name a model and a temperature (what the spans
should show)."""
UP = [d for d in DIALECTS.values()]
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


def traceparent(sampled: bool = True) -> str:
    return f"00-{TRACE_ID}-{PARENT_ID}-{'01' if sampled else '00'}"


def answer(d: Dialect, stream: bool) -> MemoryResponse:
    if stream:
        return MemoryResponse(200, {"Content-Type": d.stream_content_type},
                              d.samples.streams["text"])
    return MemoryResponse(200, {"Content-Type": "application/json"},
                          orjson.dumps(d.samples.responses["text"]))


def failing(status: int, d: Dialect = CLIENT) -> MemoryResponse:
    return MemoryResponse(status, {"Content-Type": "application/json"},
                          orjson.dumps(d.render_error(_error(status))))


def asked_stream(d: Dialect, req: UpstreamRequest) -> bool:
    """Whether the gateway asked the upstream (of dialect ``d``) for a stream."""
    if d.stream_path:
        return req.url.endswith(d.stream_path)
    if req.headers.get("Accept") == "text/event-stream":
        return True
    body = orjson.loads(req.body)
    return isinstance(body, dict) and body.get("stream") is True


def _error(status: int) -> Any:
    from gateway.canonical import ChatError

    return ChatError(status, "scripted failure")


@dataclass
class Traced:
    client: TestClient[Any, Any]
    transport: MemoryTransport
    exporter: InMemorySpanExporter
    answers: dict[str, Callable[[bool], MemoryResponse]] = field(default_factory=dict)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def server(self) -> ReadableSpan:
        found = [s for s in self.spans() if s.kind == SpanKind.SERVER]
        assert len(found) == 1, found
        return found[0]

    def attempts(self) -> list[ReadableSpan]:
        return sorted((s for s in self.spans() if s.kind == SpanKind.CLIENT),
                      key=lambda s: s.start_time or 0)


async def traced(aiohttp_client: Any, upstreams: dict[str, Dialect],
                 answers: dict[str, Callable[[bool], MemoryResponse]],
                 sample_ratio: float | None = None, client_dialect: Dialect = CLIENT,
                 ) -> Traced:
    exporter = InMemorySpanExporter()

    async def handler(req: UpstreamRequest) -> MemoryResponse:
        host = req.url.split("/")[2].split(".")[0]
        return answers[host](asked_stream(upstreams[host], req))

    transport = MemoryTransport(handler)
    cfg = {"upstreams": {n: {"dialect": d.name, "url": f"http://{n}.test/v1/chat",
                             "model": f"default-{n}", "timeout": 5}
                         for n, d in upstreams.items()},
           "routes": [{"path": "/c", "dialect": client_dialect.name,
                       "upstream": list(upstreams), "on_unsupported": "drop"}],
           "health": {"failure_threshold": 1000}}
    tracing = Tracing(TracingSettings(service_name="gw-test", sample_ratio=sample_ratio),
                      processor=SimpleSpanProcessor(exporter))
    app = create_app(parse_config(cfg, env={}), transport=transport, tracing=tracing)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return Traced(client, transport, exporter)


def ask(stream: bool, temperature: float | None = None,
        ) -> tuple[str, Any, dict[str, str]]:
    """Path, body and headers of a request of :data:`CLIENT` at ``/c`` for ``MODEL``, asking
    for a stream as the dialect declares."""
    d = CLIENT
    by_path = stream and d.stream_path is not None
    by_accept = stream and not by_path and d.stream_by_accept
    req = ChatRequest([Message("user", "What is covered?")], model=MODEL,
                      sampling={} if temperature is None else {"temperature": temperature})
    body = d.render_request(req, stream=stream and not by_path and not by_accept, model=None,
                            max_tokens=64)
    path = "/c" + (d.stream_path or "") if by_path else "/c"
    return path, body, {"Accept": "text/event-stream"} if by_accept else {}


async def post(t: Traced, stream: bool = False, headers: dict[str, str] | None = None,
               temperature: float | None = None) -> int:
    path, body, asked = ask(stream, temperature)
    resp = await t.client.post(path, json=body, headers={**asked, **(headers or {})})
    await resp.read()
    return resp.status


def said_of_itself(up: Dialect, stream: bool) -> ChatResponse:
    """The upstream's sample answer as the gateway reads it (model, finish, usage)."""
    if not stream:
        return up.parse_response(up.samples.responses["text"])
    assembler = StreamAssembler(up)
    assembler.feed(up.samples.streams["text"])
    return assembler.finish()


def sampled(header: str) -> bool:
    """The W3C trace flags' sampled bit (other bits, e.g. level 2's random, may be set)."""
    return bool(int(header.split("-")[3], 16) & 1)


def hex_span(span_id: int) -> str:
    return f"{span_id:016x}"


# --- one request, its spans ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("up", UP, ids=[d.name for d in UP])
async def test_a_request_is_a_server_span_with_a_client_span_per_attempt(
        aiohttp_client: Any, up: Dialect, stream: bool) -> None:
    t = await traced(aiohttp_client, {"a": up}, {"a": lambda s: answer(up, s)})
    assert await post(t, stream, {"traceparent": traceparent(), "tracestate": "v=1",
                                  "User-Agent": "app/1"}, temperature=0.2) == 200
    server = t.server()
    (attempt,) = t.attempts()
    # The client's trace is continued, and the upstream's parent is the attempt's span.
    assert f"{server.context.trace_id:032x}" == TRACE_ID
    assert server.parent is not None and hex_span(server.parent.span_id) == PARENT_ID
    assert attempt.parent is not None and attempt.parent.span_id == server.context.span_id
    assert attempt.context.trace_id == server.context.trace_id
    sent = t.transport.requests[-1].headers
    assert sent["traceparent"] == (f"00-{TRACE_ID}-{hex_span(attempt.context.span_id)}-01")
    assert sent["tracestate"] == "v=1"

    assert server.name == "POST /c" and attempt.name == f"chat {MODEL}"
    s = dict(server.attributes or {})
    assert s["http.request.method"] == "POST" and s["http.route"] == "/c"
    assert s["url.path"] == "/c" and s["http.response.status_code"] == 200
    assert s["client.address"] == "127.0.0.1" and s["user_agent.original"] == "app/1"
    assert s["gen_ai.operation.name"] == "chat"
    assert s["gen_ai.request.model"] == MODEL
    assert s["gateway.route"] == "/c" and s["gateway.client_dialect"] == CLIENT.name
    assert s["gateway.upstream"] == "a" and s["gateway.upstream_dialect"] == up.name
    assert s["gateway.stream"] is stream and s["gateway.attempts"] == 1
    assert s["http.response.body.size"] > 0 and s["http.request.body.size"] > 0
    assert server.status.status_code == StatusCode.UNSET
    a = dict(attempt.attributes or {})
    assert a["gen_ai.provider.name"] == up.name and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == MODEL
    assert a["gen_ai.request.temperature"] == 0.2
    assert a["server.address"] == "a.test" and a["server.port"] == 80
    assert a["http.response.status_code"] == 200 and "error.type" not in a
    assert attempt.status.status_code == StatusCode.UNSET
    # What the upstream's sample answer says of itself, on both spans.
    said = said_of_itself(up, stream)
    for attrs in (s, a):
        assert attrs.get("gen_ai.response.model") == said.model
        reasons = attrs.get("gen_ai.response.finish_reasons")
        assert reasons == ((said.finish_reason,) if said.finish_reason else None)
        usage = said.usage
        if usage is not None and usage.input_tokens is not None:
            assert attrs["gen_ai.usage.input_tokens"] == usage.input_tokens
            assert attrs["gen_ai.usage.output_tokens"] == usage.output_tokens
        else:
            assert "gen_ai.usage.input_tokens" not in attrs
    if stream:
        assert s["gateway.stream_chunks"] > 0
        ttft = s.get("gateway.time_to_first_token")  # when the access log has one too
        assert ttft is None or ttft > 0
        assert ttft is not None or up is not CLIENT
    # The attempt lies within the request.
    assert server.start_time and server.end_time and attempt.start_time and attempt.end_time
    assert server.start_time <= attempt.start_time <= attempt.end_time <= server.end_time


async def test_failover_gives_one_client_span_per_attempt_with_its_error(
        aiohttp_client: Any) -> None:
    t = await traced(aiohttp_client, {"a": CLIENT, "b": CLIENT},
                     {"a": lambda s: failing(503), "b": lambda s: answer(CLIENT, s)})
    assert await post(t) == 200
    first, second = t.attempts()
    assert dict(first.attributes or {})["gateway.upstream"] == "a"
    assert dict(first.attributes or {})["error.type"] == "503"
    assert dict(first.attributes or {})["http.response.status_code"] == 503
    assert first.status.status_code == StatusCode.ERROR
    assert "gen_ai.usage.input_tokens" not in dict(first.attributes or {})
    assert dict(second.attributes or {})["gateway.upstream"] == "b"
    assert "error.type" not in dict(second.attributes or {})
    assert "gen_ai.usage.input_tokens" in dict(second.attributes or {})
    assert first.end_time is not None and second.start_time is not None
    assert first.end_time <= second.start_time
    server = t.server()
    assert dict(server.attributes or {})["gateway.attempts"] == 2
    assert t.transport.requests[0].headers["traceparent"] != \
        t.transport.requests[1].headers["traceparent"]  # each attempt is its own parent


async def test_a_failed_request_is_an_error_span_and_a_4xx_is_not(aiohttp_client: Any) -> None:
    t = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: failing(502)})
    assert await post(t) == 502
    server = t.server()
    assert server.status.status_code == StatusCode.ERROR
    assert dict(server.attributes or {})["error.type"] == "502"
    t.exporter.clear()
    t.answers = {}
    t2 = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: failing(400)})
    assert await post(t2) == 400
    server = t2.server()
    assert server.status.status_code == StatusCode.UNSET  # the client's mistake, not ours
    (attempt,) = t2.attempts()
    assert attempt.status.status_code == StatusCode.ERROR  # but the call itself failed
    assert dict(attempt.attributes or {})["error.type"] == "400"


async def test_refused_requests_have_a_server_span_and_no_attempt(aiohttp_client: Any) -> None:
    t = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: answer(CLIENT, s)})
    resp = await t.client.post("/c", data=b"{not json")
    assert resp.status == 400
    assert dict(t.server().attributes or {})["http.response.status_code"] == 400
    assert t.attempts() == []
    assert t.transport.requests == []


async def test_a_client_that_leaves_mid_stream_still_ends_every_span(aiohttp_client: Any
                                                                     ) -> None:
    release = asyncio.Event()

    frames = split_frames(CLIENT, CLIENT.samples.streams["text"])
    first_text = next(i for i, f in enumerate(frames) if f.text)
    assert first_text < len(frames) - 1

    async def slow() -> AsyncIterator[bytes]:
        yield b"".join(f.data for f in frames[:first_text + 1])  # some text, not the end
        await asyncio.wait_for(release.wait(), 10)
        yield b""

    t = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: MemoryResponse(
        200, {"Content-Type": CLIENT.stream_content_type}, slow())})
    path, body, headers = ask(True)
    async with t.client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 200
        await resp.content.readany()
    await eventually(lambda: len(t.spans()) == 2)
    release.set()
    server = t.server()
    (attempt,) = t.attempts()
    assert dict(server.attributes or {})["gateway.client_disconnected"] is True
    assert dict(attempt.attributes or {})["error.type"] == "cancelled"


# --- sampling and propagation -------------------------------------------------------------------


async def test_no_traceparent_starts_a_new_trace(aiohttp_client: Any) -> None:
    t = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: answer(CLIENT, s)})
    assert await post(t) == 200
    server = t.server()
    assert server.parent is None
    sent = t.transport.requests[-1].headers["traceparent"]
    assert sent.split("-")[1] == f"{server.context.trace_id:032x}"
    assert "tracestate" not in t.transport.requests[-1].headers


async def test_sampling_follows_the_parent_and_the_ratio(aiohttp_client: Any) -> None:
    t = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: answer(CLIENT, s)},
                     sample_ratio=1.0)
    assert await post(t, headers={"traceparent": traceparent(sampled=False)}) == 200
    assert t.spans() == []  # the client's unsampled trace is not recorded here either
    sent = t.transport.requests[-1].headers["traceparent"]
    assert sent.startswith(f"00-{TRACE_ID}-") and not sampled(sent)  # but still continued
    t0 = await traced(aiohttp_client, {"a": CLIENT}, {"a": lambda s: answer(CLIENT, s)},
                      sample_ratio=0.0)
    for _ in range(5):
        assert await post(t0) == 200
    assert t0.spans() == []
    assert [sampled(r.headers["traceparent"]) for r in t0.transport.requests] == [False] * 5
    assert await post(t0, headers={"traceparent": traceparent()}) == 200
    assert len(t0.spans()) == 2  # a sampled parent is followed whatever the ratio


# --- off, and the settings ----------------------------------------------------------------------


async def test_off_unless_configured(aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    transport = MemoryTransport(lambda req: _async(answer(CLIENT, False)))
    cfg = {"upstreams": {"a": {"dialect": CLIENT.name, "url": "http://a.test/v1/chat"}},
           "routes": [{"path": "/c", "dialect": CLIENT.name, "upstream": "a"}]}
    app = create_app(parse_config(cfg, env={}), transport=transport)
    client = await aiohttp_client(app)
    assert app[ENV].tracing is None  # and the exchange creates no span: see bench/
    assert (await client.post("/c", json=ask(False)[1])).status == 200
    assert "traceparent" not in transport.requests[-1].headers


async def _async(value: MemoryResponse) -> MemoryResponse:
    return value


def test_settings_from_config_and_environment() -> None:
    endpoint_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert tracing_settings(None, {}) is None
    assert tracing_settings(None, endpoint_env) == TracingSettings()  # the SDK reads the env
    assert tracing_settings(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/x"}) \
        == TracingSettings()
    assert tracing_settings(None, {**endpoint_env, "OTEL_SDK_DISABLED": "true"}) is None
    assert tracing_settings(None, {**endpoint_env, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert tracing_settings(TracingConfig(enabled=False), endpoint_env) is None
    got = tracing_settings(TracingConfig(otlp_endpoint="http://collector:4318/",
                                         service_name="gw", sample_ratio=0.25,
                                         headers={"Authorization": "Bearer t"}), {})
    assert got == TracingSettings("http://collector:4318/v1/traces", "gw", 0.25,
                                  {"Authorization": "Bearer t"}, 10.0)
    got = tracing_settings(TracingConfig(otlp_endpoint="http://c:4318/v1/traces"), {})
    assert got is not None and got.endpoint == "http://c:4318/v1/traces"
    assert tracing_settings(TracingConfig(), {}) == TracingSettings(timeout=10.0)


def test_tracing_config_is_validated() -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config({"tracing": {"otlp_endpoint": "collector:4318", "sample_ratio": 2},
                      "upstreams": {}, "routes": [{"path": "/c", "dialect": CLIENT.name,
                                                   "upstream": "u"}]}, env={})
    wheres = {w for w, _ in e.value.problems}
    assert {"tracing.otlp_endpoint", "tracing.sample_ratio"} <= wheres, e.value.problems


# --- OTLP/HTTP into a real receiver -------------------------------------------------------------


@dataclass
class Receiver:
    """A collector's OTLP/HTTP traces endpoint on 127.0.0.1: decodes what it is sent."""

    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.requests.append(message)
        self.headers.append(dict(request.headers))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received."""
        out = []
        for message in self.requests:
            for rs in message.resource_spans:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                out.extend((resource, span) for ss in rs.scope_spans for span in ss.spans)
        return out


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", r.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    r.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield r
    await runner.cleanup()


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        v = a.value
        kind = v.WhichOneof("value")
        out[a.key] = list(x.string_value for x in v.array_value.values) \
            if kind == "array_value" else getattr(v, kind)
    return out


async def otlp_gateway(aiohttp_client: Any, tracing: dict[str, Any] | None,
                       ) -> tuple[TestClient[Any, Any], MemoryTransport]:
    transport = MemoryTransport(lambda req: _async(answer(CLIENT, False)))
    cfg: dict[str, Any] = {
        "upstreams": {"a": {"dialect": CLIENT.name, "url": "http://a.test/v1/chat"}},
        "routes": [{"path": "/c", "dialect": CLIENT.name, "upstream": "a"}]}
    if tracing is not None:
        cfg["tracing"] = tracing
    app = create_app(parse_config(cfg, env={}), transport=transport)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return client, transport


async def test_spans_reach_a_collector_over_otlp_http(aiohttp_client: Any,
                                                      receiver: Receiver) -> None:
    client, transport = await otlp_gateway(aiohttp_client, {
        "otlp_endpoint": receiver.url, "service_name": "gw-otlp",
        "headers": {"Authorization": "Bearer collector-token"}})
    for _ in range(3):
        resp = await client.post("/c", json=ask(False)[1],
                                 headers={"traceparent": traceparent()})
        assert resp.status == 200
    await client.close()  # the app's cleanup exports what the batch still holds
    await eventually(lambda: len(receiver.spans()) == 6, within=20)
    assert all(h.get("Authorization") == "Bearer collector-token" for h in receiver.headers)
    kinds = {}
    for resource, span in receiver.spans():
        assert resource["service.name"] == "gw-otlp"
        assert resource["service.version"]
        assert span.trace_id.hex() == TRACE_ID
        kinds.setdefault(span.kind, []).append(span)
    servers, clients = kinds[2], kinds[3]  # SPAN_KIND_SERVER, SPAN_KIND_CLIENT
    assert len(servers) == 3 and len(clients) == 3
    assert {s.parent_span_id.hex() for s in servers} == {PARENT_ID}
    assert {c.parent_span_id for c in clients} == {s.span_id for s in servers}
    a = attrs(clients[0])
    assert a["gen_ai.provider.name"] == CLIENT.name and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    s = attrs(servers[0])
    assert s["http.route"] == "/c" and s["http.response.status_code"] == 200
    assert s["gen_ai.usage.input_tokens"] > 0
    sent = {r.headers["traceparent"].split("-")[2] for r in transport.requests}
    assert sent == {c.span_id.hex() for c in clients}


async def test_the_standard_environment_alone_turns_tracing_on(
        aiohttp_client: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    client, _ = await otlp_gateway(aiohttp_client, None)
    assert (await client.post("/c", json=ask(False)[1])).status == 200
    await client.close()
    await eventually(lambda: len(receiver.spans()) == 2, within=20)
    assert {r["service.name"] for r, _ in receiver.spans()} == {"from-env"}
