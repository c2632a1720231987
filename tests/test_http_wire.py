"""What an outsider sends at the byte level to the gateway's listener, answered as aiohttp answers
it or with a clear 4xx: never a dropped connection, a hang or a 500, and never a traceback in the
log. Each case once failed on the gateway's own HTTP lane (retired): ``Upgrade`` and ``CONNECT``
killed the connection, a pipelined request after a leading empty line was dropped, and a header
value that is not UTF-8 gave a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from collections.abc import AsyncIterator, Iterator

import orjson
import pytest
import structlog
from faults.harness import client_request

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, names
from gateway.log import configure_logging
from gateway.server import open_listeners
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

LIMIT = 10.0
"""Bound on every wait: room for a busy machine."""


@pytest.fixture(autouse=True)
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    buf = io.StringIO()
    configure_logging(stream=buf)
    yield buf
    structlog.configure(**saved)


@contextlib.asynccontextmanager
async def gateway(dialect: str, **trace: object) -> AsyncIterator[int]:
    whole = orjson.dumps(DIALECTS[dialect].samples.responses["text"])

    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": "application/json"}, whole)

    cfg = parse_config({
        "server": {"admin": False},
        "upstreams": {"up": {"dialect": dialect, "url": "http://up.invalid/chat",
                             "streaming": "never"}},
        "routes": [{"path": "/chat", "dialect": dialect, "upstream": "up"}],
        **({"tracing": trace} if trace else {}),
    }, env={})
    app = create_app(cfg, transport=MemoryTransport(upstream))
    listener, _, _ = await open_listeners(app, cfg, "127.0.0.1", 0)
    try:
        port = listener.addresses[0][1]
        # A gateway that has served its route before: the retired lane took only requests to a
        # path the router had already sent to a chat route.
        codes, got, _ = await exchange(port, chat(dialect), 1)
        assert codes == [200], got[:500]
        yield port
    finally:
        await listener.cleanup()


def chat(dialect: str, *extra: bytes) -> bytes:
    path, body, headers = client_request(dialect, stream=False)
    data = orjson.dumps(body)
    head = [f"POST {path} HTTP/1.1".encode(), b"Host: 127.0.0.1",
            b"Content-Type: application/json", b"Content-Length: %d" % len(data),
            *(f"{k}: {v}".encode() for k, v in headers.items()), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + data


async def exchange(port: int, raw: bytes, answers: int) -> tuple[list[int], bytes, bool]:
    """Send ``raw`` at once; the status codes of the first ``answers`` answers read, all bytes,
    and whether the connection was closed by the gateway before they all came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    got = b""
    closed = False
    try:
        async with asyncio.timeout(LIMIT):
            while len(statuses(got)) < answers or not complete(got, answers):
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    break
                got += chunk
    finally:
        writer.close()
    return statuses(got), got, closed


def statuses(raw: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


def complete(raw: bytes, answers: int) -> bool:
    """The last of ``answers`` answers has its whole Content-Length body."""
    heads = [m.end() for m in re.finditer(rb"\r\n\r\n", raw)]
    lengths = [int(m) for m in re.findall(rb"(?i)content-length: (\d+)", raw)]
    if len(heads) < answers or len(lengths) < answers:
        return False
    return len(raw) >= heads[answers - 1] + lengths[answers - 1]


def quiet(logs: io.StringIO) -> None:
    # No collector listens in these tests: the exporter's word that it cannot reach one is not
    # the gateway's failure (a span it cannot encode would be).
    text = "\n".join(line for line in logs.getvalue().splitlines()
                     if "trace_exporter" not in line)
    assert "Traceback" not in text and "internal_error" not in text, text[-3000:]
    levels = [orjson.loads(line).get("level") for line in text.splitlines() if line]
    assert "error" not in levels and "critical" not in levels, text[-3000:]


@pytest.mark.parametrize("pipelined", [False, True])
async def test_an_upgrade_request_is_answered_over_http_1_1(logs: io.StringIO,
                                                             pipelined: bool) -> None:
    """What ``curl --http2`` sends (``Upgrade: h2c``): aiohttp does not switch protocols, so the
    request is answered over HTTP/1.1, on its own or after a pipelined chat request."""
    dialect = names()[0]
    upgrade = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
               b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
    raw = chat(dialect) + upgrade if pipelined else upgrade
    async with gateway(dialect) as port:
        codes, got, _ = await exchange(port, raw, 2 if pipelined else 1)
    assert codes == ([200, 200] if pipelined else [200]), got[:500]
    quiet(logs)


@pytest.mark.parametrize("pipelined", [False, True])
async def test_a_connect_request_gets_a_clear_4xx(logs: io.StringIO, pipelined: bool) -> None:
    dialect = names()[0]
    connect = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    raw = chat(dialect) + connect if pipelined else connect
    async with gateway(dialect) as port:
        codes, got, _ = await exchange(port, raw, 2 if pipelined else 1)
    assert len(codes) == (2 if pipelined else 1), got[:500]
    assert (codes[0] == 200) if pipelined else True
    assert 400 <= codes[-1] < 500, got[:500]
    quiet(logs)


@pytest.mark.parametrize("dialect", names())
async def test_a_pipelined_request_after_a_leading_empty_line_is_answered(
        logs: io.StringIO, dialect: str) -> None:
    """RFC 9112 section 2.2: a server SHOULD ignore at least one empty line received before a
    request line. Three chat requests in one write, the second after an empty line: all
    answered, in order, on the same connection."""
    raw = chat(dialect) + b"\r\n" + chat(dialect) + chat(dialect)
    async with gateway(dialect) as port:
        codes, got, closed = await exchange(port, raw, 3)
    assert codes == [200, 200, 200] and not closed, got[:500]
    quiet(logs)


@pytest.mark.parametrize("header", [b"User-Agent: caf\xe9", b"traceparent: \xff",
                                    b"X-Request-ID: \xff\xfe", b"Origin: http://\xe9.example",
                                    b"Authorization: Bearer \xe9"])
async def test_a_header_value_that_is_not_utf_8_is_never_a_500(
        logs: io.StringIO, header: bytes) -> None:
    dialect = names()[0]
    async with gateway(dialect) as port:
        codes, got, _ = await exchange(port, chat(dialect, header), 1)
    assert codes and codes[0] < 500, got[:500]
    quiet(logs)


async def test_a_header_value_that_is_not_utf_8_is_never_a_500_with_tracing(
        logs: io.StringIO) -> None:
    """The same with tracing on: ``traceparent`` is read to continue the client's trace."""
    dialect = names()[0]
    # (a short export timeout: the collector is never there, and shutting down waits for it)
    async with gateway(dialect, otlp_endpoint="http://127.0.0.1:9", timeout=0.5) as port:
        for header in (b"traceparent: \xff", b"tracestate: a=\xe9", b"User-Agent: caf\xe9"):
            codes, got, _ = await exchange(port, chat(dialect, header), 1)
            assert codes and codes[0] < 500, (header, got[:500])
    quiet(logs)
