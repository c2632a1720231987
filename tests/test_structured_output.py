"""Structured output (a JSON schema, or JSON mode) through the real app and the in-memory
transport, for every pair of registered dialects: where both sides declare the kind
(:attr:`Capabilities.structured_output`), the upstream reads it in its own field and the client
reads the upstream's JSON answer as JSON text, whole and streamed; where the upstream cannot
carry it, the route's ``on_unsupported`` policy answers (400 ``UNSUPPORTED``, or dropped and
reported). No dialect is named: the capabilities decide.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
from aiohttp.test_utils import TestClient
from fakes import client_request, error_message, normal_finish, read_answer
from observe import strict

from gateway.app import create_app
from gateway.canonical import AssistantMessage, ChatResponse, OutputFormat, Usage
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.exchange.outcome import Outcome
from gateway.framing import encoder_for
from gateway.pipeline import events_from_response
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "date": {"type": "string"},
                   "participants": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "date", "participants"],
    "additionalProperties": False,
}
ANSWER = {"name": "Science fair", "date": "Friday", "participants": ["Alice", "Bob"]}
FORMATS = {
    "json_schema": OutputFormat("json_schema", schema=SCHEMA, name="calendar_event",
                                strict=True),
    "json_object": OutputFormat("json_object"),
}


def _pairs(carried: bool) -> list[tuple[str, str, str]]:
    """(client, upstream, kind): clients that can ask for ``kind``, upstreams that can (or
    cannot) carry it."""
    return [(c.name, u.name, k) for c in DIALECTS.values() for u in DIALECTS.values()
            for k in FORMATS if k in c.capabilities.structured_output
            and (k in u.capabilities.structured_output) == carried]


CARRIED = _pairs(True)
NOT_CARRIED = _pairs(False)


def _answer(up: Dialect, request: UpstreamRequest) -> MemoryResponse:
    """The upstream's answer, in its dialect: the JSON as the model's text."""
    req = up.parse_request(orjson.loads(request.body))
    resp = ChatResponse([AssistantMessage(orjson.dumps(ANSWER).decode())], finish_reason="stop",
                        usage=Usage(10, 20), id="resp-1", created=1, model="m")
    if not req.stream:
        return MemoryResponse(200, {"Content-Type": "application/json"},
                              orjson.dumps(up.render_response(resp, req)))
    encoder, frame = up.encoder(req), encoder_for(up.framing)
    body = b"".join(frame(p) for e in events_from_response(resp) for p in encoder.encode(e))
    return MemoryResponse(200, {"Content-Type": up.stream_content_type}, body)


async def _serve(aiohttp_client: Any, cl: Dialect, up: Dialect, policy: str,
                 seen: list[Any], outcomes: list[Outcome]) -> TestClient[Any, Any]:
    async def handler(request: UpstreamRequest) -> MemoryResponse:
        seen.append(orjson.loads(request.body))
        return _answer(up, request)

    cfg = {"upstreams": {"u": {"dialect": up.name, "url": "http://u.test/chat", "timeout": 5,
                               "connect_timeout": 1, "model": "m"}},
           "routes": [{"path": "/c", "dialect": cl.name, "upstream": "u",
                       "on_unsupported": policy}]}
    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(handler),
                     on_outcome=outcomes.append)
    return cast(TestClient[Any, Any], await aiohttp_client(app))


@pytest.fixture
def outcomes() -> list[Outcome]:
    """What the app recorded of each request (its ``on_outcome``)."""
    return []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("cl", "up", "kind"), CARRIED, ids=[f"{c}->{u}:{k}"
                                                             for c, u, k in CARRIED])
async def test_the_format_reaches_the_upstream_and_json_text_comes_back(
        aiohttp_client: Any, outcomes: list[Outcome], cl: str, up: str, kind: str,
        stream: bool) -> None:
    seen: list[Any] = []
    gw = await _serve(aiohttp_client, DIALECTS[cl], DIALECTS[up], "reject", seen, outcomes)
    path, body, headers = client_request(cl, stream=stream, state=None, output=FORMATS[kind])
    assert strict(DIALECTS[cl]).read_request(body).output is not None  # the client's own field
    async with gw.post(path, json=body, headers=headers) as resp:
        raw = await resp.read()
        assert resp.status == 200, raw
        got = read_answer(cl, resp.headers["Content-Type"], raw)
    (sent,) = seen
    schema = SCHEMA if kind == "json_schema" else None
    assert strict(DIALECTS[up]).read_request(sent).output == (kind, schema)
    assert orjson.loads(got.text) == ANSWER
    assert not got.tool_calls
    assert got.finish == normal_finish(cl, stream=stream)
    assert [o.dropped for o in outcomes] == [()]


@pytest.mark.parametrize("policy", ["reject", "drop"])
@pytest.mark.parametrize(("cl", "up", "kind"), NOT_CARRIED, ids=[f"{c}->{u}:{k}"
                                                                 for c, u, k in NOT_CARRIED])
async def test_an_upstream_that_cannot_carry_it_gets_the_routes_policy(
        aiohttp_client: Any, outcomes: list[Outcome], cl: str, up: str, kind: str,
        policy: str) -> None:
    seen: list[Any] = []
    gw = await _serve(aiohttp_client, DIALECTS[cl], DIALECTS[up], policy, seen, outcomes)
    path, body, headers = client_request(cl, stream=False, state=None, output=FORMATS[kind])
    async with gw.post(path, json=body, headers=headers) as resp:
        raw = await resp.read()
        if policy == "reject":
            assert resp.status == 400, raw
            message = error_message(cl, orjson.loads(raw))
            assert "structured_output" in message and up in message
            assert seen == []
        else:
            assert resp.status == 200, raw
            (sent,) = seen
            assert getattr(strict(DIALECTS[up]).read_request(sent), "output", None) is None
    (o,) = outcomes
    assert "structured_output" in o.dropped or policy == "reject"
