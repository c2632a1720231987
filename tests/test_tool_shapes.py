"""Freeform (``custom``) and namespaced tools, and a provider's built-in tools, through every
pair whose client side can express them (its ``freeform`` request sample), whole and streamed:
carried where the upstream's dialect declares them (``custom_tools``, ``tool_namespaces``),
mapped where it does not, and the calls of the answer given back to the client as its own.
Built-in tools another provider runs are the governed field ``hosted_tools``: dropped by the
default policies, named in ``X-Gateway-Dropped``, refused where the route says so.

No dialect is named: clients are the dialects that ship the sample, upstreams every dialect that
carries tools.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.canonical import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    ReasoningRequest,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolDef,
)
from gateway.carry import DEFAULT_POLICIES, GOVERNED, Unsupported
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.exchange.answer import DROPPED_HEADER
from gateway.framing import encoder_for
from gateway.pipeline import (
    ResponseAssembler,
    StreamDecoding,
    StreamTranslator,
    adapt_request,
    events_from_response,
    translate_request,
    translate_response,
)
from gateway.tool_shapes import (
    INPUT,
    ToolRestorer,
    flat_name,
    restore_tools,
    shape_tools,
    unwrap_input,
)
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

CLIENTS = [d for d in DIALECTS.values() if "freeform" in d.samples.requests]
UPSTREAMS = [d for d in DIALECTS.values() if d.capabilities.tools]
PAIRS = [(c, u) for c in CLIENTS for u in UPSTREAMS]
IDS = [f"{c.name}->{u.name}" for c, u in PAIRS]
TEXT = '*** Begin Patch\n*** Add File: a.txt\n+"ü" \\ \U0001F600 \\u00e9\n*** End Patch\n'
"""A freeform call's text: quotes, backslashes, an astral character, a literal ``\\u``."""


def test_the_samples_hold_what_is_tested() -> None:
    assert CLIENTS, "no dialect ships a freeform request sample"
    assert any(c.capabilities.tool_namespaces for c in CLIENTS)
    assert any(not u.capabilities.custom_tools for u in UPSTREAMS)
    assert any(not u.capabilities.tool_namespaces for u in UPSTREAMS)
    for c in CLIENTS:
        req = c.parse_request(c.samples.requests["freeform"])
        assert any(t.kind == "custom" and t.format for t in req.tools), c.name
        assert any(c.kind == "custom" for m in req.messages for c in m.tool_calls)


def client_request(c: Dialect) -> ChatRequest:
    return c.parse_request(c.samples.requests["freeform"])


def upstream_view(c: Dialect, u: Dialect) -> tuple[ChatRequest, ChatRequest, list[str]]:
    """The client's request, the upstream's parsing of what it was sent, and what was lost."""
    req = client_request(c)
    sent, lost = adapt_request(req, u, DEFAULT_POLICIES)
    body = orjson.loads(orjson.dumps(u.render_request(sent, stream=False, model="m")))
    return req, u.parse_request(body), lost


@pytest.mark.parametrize(("c", "u"), PAIRS, ids=IDS)
def test_request_tools_carried_or_mapped(c: Dialect, u: Dialect) -> None:
    req, got, lost = upstream_view(c, u)
    caps = u.capabilities
    hosted = [t for t in req.tools if t.kind not in ("function", "custom")]
    assert ("hosted_tools" in lost) == bool(hosted and u is not c), lost
    by_name = {t.name: t for t in got.tools}
    taken = frozenset(t.name for t in req.tools if t.namespace is None)
    for t in req.tools:
        if t.kind not in ("function", "custom"):
            assert (t.raw in [g.raw for g in got.tools]) == (u is c)
            continue
        name = t.name if t.namespace is None or caps.tool_namespaces else flat_name(
            t.namespace, t.name, taken)
        sent = by_name[name]
        if caps.tool_namespaces:
            assert sent.namespace == t.namespace
        elif t.namespace is not None:
            assert sent.namespace is None and t.namespace in (sent.description or "")
        if t.kind == "custom" and not caps.custom_tools:
            assert sent.kind == "function"
            assert sent.parameters["required"] == [INPUT]
            assert t.format["definition"] in sent.parameters["properties"][INPUT]["description"]
        else:
            assert sent.kind == t.kind and sent.format == t.format
    # the calls of earlier turns go up in the same shapes
    calls = [k for m in req.messages for k in m.tool_calls]
    sent_calls = {k.id: k for m in got.messages for k in m.tool_calls}
    for k in calls:
        s = sent_calls[k.id]
        if k.kind == "custom" and not caps.custom_tools:
            assert s.kind == "function" and orjson.loads(s.arguments) == {INPUT: k.arguments}
        else:
            assert (s.kind, s.arguments) == (k.kind, k.arguments)
        if k.namespace is not None and not caps.tool_namespaces:
            assert s.name == flat_name(k.namespace, k.name, taken) and s.namespace is None


def answer(c: Dialect, u: Dialect) -> tuple[ChatRequest, ChatRequest, ChatResponse,
                                            list[ToolCall]]:
    """The upstream's answer calling the client's freeform tool and (when it has one) its
    namespaced tool, as the upstream was offered them; and the calls the client must get."""
    req, got, _ = upstream_view(c, u)
    caps = u.capabilities
    taken = frozenset(t.name for t in req.tools if t.namespace is None)
    custom = next(t for t in req.tools if t.kind == "custom")
    want = [ToolCall("call_free", custom.name, TEXT, "custom", custom.namespace)]
    up_calls = [ToolCall("call_free", custom.name, TEXT, "custom") if caps.custom_tools
                else ToolCall("call_free", custom.name, orjson.dumps({INPUT: TEXT}).decode())]
    grouped = next((t for t in req.tools if t.namespace is not None and t.kind == "function"),
                   None)
    if grouped is not None:
        args = '{"path":"README.md"}'  # (compact: Anthropic writes its input so)
        want.append(ToolCall("call_grouped", grouped.name, args, namespace=grouped.namespace))
        up_calls.append(ToolCall("call_grouped", grouped.name, args, namespace=grouped.namespace)
                        if caps.tool_namespaces else ToolCall(
                            "call_grouped", flat_name(grouped.namespace or "", grouped.name,
                                                      taken), args))
    resp = ChatResponse([AssistantMessage("On it.", tool_calls=up_calls)],
                        finish_reason="tool_calls", id="resp_1", model="m")
    return req, got, resp, want


@pytest.mark.parametrize(("c", "u"), PAIRS, ids=IDS)
def test_whole_answer_calls_come_back_as_the_clients_own(c: Dialect, u: Dialect) -> None:
    req, got, resp, want = answer(c, u)
    body = orjson.loads(orjson.dumps(u.render_response(resp, got)))
    out, lost = translate_response(body, u, c, req, policy=DEFAULT_POLICIES)
    assert lost == []
    assert c.parse_response(out).tool_calls == want


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("c", "u"), PAIRS, ids=IDS)
def test_streamed_calls_come_back_as_the_clients_own(c: Dialect, u: Dialect, seed: int) -> None:
    req, got, resp, want = answer(c, u)
    encoder, frame = u.encoder(got), encoder_for(u.framing)
    raw = b"".join(frame(p) for e in events_from_response(resp) for p in encoder.encode(e))
    rng = random.Random(seed)
    tr = StreamTranslator(u, c, req, policy=DEFAULT_POLICIES)
    out, i = [], 0
    while i < len(raw):  # reads of awkward sizes, split inside escapes and UTF-8
        n = rng.choice((1, 2, 3, 7, 64))
        out.append(tr.feed(raw[i:i + n]))
        i += n
    out.append(tr.finish())
    assert tr.error is None and tr.dropped == []
    decoding, assembled = StreamDecoding(c), ResponseAssembler()
    for e in [*decoding.feed(b"".join(out)), *decoding.finish()]:
        assembled.add(e)
    assert assembled.error is None
    assert assembled.response().tool_calls == want


# --- the pieces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [TEXT, "", "plain", '"', "\\", "\U0001F600\n\t\u2028"])
def test_a_wrapped_input_is_unwrapped_whatever_the_pieces(text: str) -> None:
    wrapper = next(u for u in UPSTREAMS if not u.capabilities.custom_tools)
    req = ChatRequest(messages=[], tools=[ToolDef("patch", kind="custom")])
    for args in (orjson.dumps({INPUT: text}).decode(),
                 '  { "input" :\n ' + orjson.dumps(text).decode() + ' , "extra": 1 }'):
        assert unwrap_input(args) == text
        for cut in range(len(args) + 1):
            restorer = ToolRestorer.of(req, wrapper)
            assert restorer is not None
            events = restorer.restore([ToolCallStart(0, "c", "patch")])
            for piece in (args[:cut], args[cut:]):
                events += restorer.restore([ToolCallDelta(0, piece)] if piece else [])
            events += restorer.restore([ToolCallEnd(0)])
            start = events[0]
            assert isinstance(start, ToolCallStart) and start.kind == "custom"
            got = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
            assert got == text, (cut, args)


@pytest.mark.parametrize("args", ["*** Begin Patch\n", "{}", '{"patch": "x"}', "[1]"])
def test_arguments_of_another_form_reach_the_tool_as_written(args: str) -> None:
    wrapper = next(u for u in UPSTREAMS if not u.capabilities.custom_tools)
    req = ChatRequest(messages=[], tools=[ToolDef("patch", kind="custom")])
    restorer = ToolRestorer.of(req, wrapper)
    assert restorer is not None
    events = restorer.restore([ToolCallStart(0, "c", "patch"), ToolCallDelta(0, args),
                               ToolCallEnd(0)])
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == args


@pytest.mark.parametrize(("namespace", "name"), [
    ("mcp__fs", "read_file"), ("a" * 60, "b" * 60), ("my server", "read.file"),
    ("x", "taken")])
def test_flat_names_are_valid_stable_and_distinct(namespace: str, name: str) -> None:
    taken = frozenset({"x__taken"})
    flat = flat_name(namespace, name, taken)
    assert 1 <= len(flat) <= 64 and all(ch.isalnum() or ch in "_-" for ch in flat)
    assert flat not in taken
    assert flat == flat_name(namespace, name, taken)
    assert flat != flat_name(namespace, name + "2", taken)
    if namespace == "mcp__fs":
        assert flat == "mcp__fs__read_file"


def test_a_request_without_such_tools_is_left_as_it_is() -> None:
    for c in DIALECTS.values():
        req = c.parse_request(c.samples.requests["text"])
        for u in UPSTREAMS:
            assert shape_tools(req, u) is req


# --- built-in tools: the policy -----------------------------------------------------------------


def _hosted_pairs() -> list[tuple[Dialect, Dialect]]:
    return [(c, u) for c, u in PAIRS if u is not c and any(
        t.kind not in ("function", "custom") for t in client_request(c).tools)]


@pytest.mark.parametrize(("c", "u"), _hosted_pairs(),
                         ids=[f"{c.name}->{u.name}" for c, u in _hosted_pairs()])
def test_hosted_tools_follow_the_routes_policy(c: Dialect, u: Dialect) -> None:
    body = c.samples.requests["freeform"]
    _, out, lost = translate_request(body, c, u, policy=DEFAULT_POLICIES)
    # (documented fields the upstream has no place for, e.g. a tool's ``strict``, are reported
    # beside: tests/test_field_walk.py follows those)
    assert _governed(lost) == ["hosted_tools"]
    assert u.parse_request(out).tools and not any(
        t.kind not in ("function", "custom") for t in u.parse_request(out).tools)
    with pytest.raises(Unsupported) as refused:
        translate_request(body, c, u, policy={**DEFAULT_POLICIES, "hosted_tools": "reject"})
    assert refused.value.fields == ["hosted_tools"]
    with pytest.raises(Unsupported):
        translate_request(body, c, u, policy="reject")


def _governed(lost: list[str]) -> list[str]:
    """The governed fields of a report (the policy's), without the reported field paths."""
    return [f for f in lost if f in GOVERNED]


def _config(c: Dialect, u: Dialect, **route: Any) -> dict[str, Any]:
    return {"upstreams": {"up": {"dialect": u.name, "url": "http://up.test/chat", "timeout": 5,
                                 "model": "m"}},
            "routes": [{"path": "/c", "dialect": c.name, "upstream": "up", **route}]}


async def _post(aiohttp_client: Any, cfg: dict[str, Any], c: Dialect, u: Dialect,
                stream: bool) -> tuple[int, dict[str, str], bytes, list[Any]]:
    seen: list[Any] = []
    _, got, resp, _ = answer(c, u)

    async def handler(r: UpstreamRequest) -> MemoryResponse:
        seen.append(orjson.loads(r.body))
        if stream:
            encoder, frame = u.encoder(got), encoder_for(u.framing)
            raw = b"".join(frame(p) for e in events_from_response(resp)
                           for p in encoder.encode(e))
            return MemoryResponse(200, {"Content-Type": u.stream_content_type}, raw)
        return MemoryResponse(200, {"Content-Type": "application/json"},
                              orjson.dumps(u.render_response(resp, got)))

    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(handler))
    client: TestClient[Any, Any] = await aiohttp_client(app)
    body = {**c.samples.requests["freeform"], "stream": stream}
    async with client.post("/c", json=body) as r:
        return r.status, dict(r.headers), await r.read(), seen


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("c", "u"), _hosted_pairs(),
                         ids=[f"{c.name}->{u.name}" for c, u in _hosted_pairs()])
async def test_the_default_config_drops_hosted_tools_and_says_so(
        aiohttp_client: Any, c: Dialect, u: Dialect, stream: bool) -> None:
    status, headers, data, seen = await _post(aiohttp_client, _config(c, u), c, u, stream)
    assert status == 200, data
    assert _governed(headers[DROPPED_HEADER].split(", ")) == ["hosted_tools"]
    assert len(seen) == 1


async def test_a_route_may_refuse_hosted_tools(aiohttp_client: Any) -> None:
    c, u = _hosted_pairs()[0]
    cfg = _config(c, u, on_unsupported={"hosted_tools": "reject"})
    status, headers, data, seen = await _post(aiohttp_client, cfg, c, u, False)
    assert status == 400 and seen == []
    err = c.parse_error(orjson.loads(data))
    assert err is not None and err.param == "hosted_tools" and u.name in err.message
    assert DROPPED_HEADER not in headers


def test_function_shaped_freeform_tools_keep_their_namespace_where_the_upstream_has_them() -> None:
    grouping = [u for u in UPSTREAMS if u.capabilities.tool_namespaces
                and u.capabilities.custom_tools]
    for u in grouping:
        req = ChatRequest(messages=[], tools=[
            ToolDef("patch", kind="custom", namespace="ns"), ToolDef("read", namespace="ns")])
        sent = shape_tools(req, u, "function")
        assert [(t.name, t.kind, t.namespace) for t in sent.tools] == [
            ("patch", "function", "ns"), ("read", "function", "ns")]
        resp = ChatResponse([AssistantMessage("", tool_calls=[
            ToolCall("1", "patch", '{"input": "x"}', namespace="ns"),
            ToolCall("2", "read", "{}", namespace="ns")])])
        assert restore_tools(resp, req, u, "function").tool_calls == [
            ToolCall("1", "patch", "x", "custom", "ns"), ToolCall("2", "read", "{}",
                                                                  namespace="ns")]


@pytest.mark.parametrize("c", CLIENTS, ids=[c.name for c in CLIENTS])
def test_an_agents_first_turn_goes_to_an_upstream_without_tools_by_default(c: Dialect) -> None:
    """An agent's first turn (its tools and its effort, no calls yet) to a backend that has no
    tools (a RAG backend): the default policies drop what it offers and say so."""
    full = client_request(c)
    first = replace(full, reasoning=ReasoningRequest(effort="medium"), messages=[
        m for m in full.messages if not m.tool_calls and m.tool_call_id is None])
    for u in DIALECTS.values():
        if u.capabilities.tools:
            continue
        sent, lost = adapt_request(first, u, DEFAULT_POLICIES)
        assert set(_governed(lost)) <= {"tools", "tool_choice", "reasoning_effort"}, (u.name, lost)
        assert "tools" in lost and not sent.tools and sent.tool_choice is None
        assert ("reasoning_effort" in lost) != u.capabilities.reasoning
        with pytest.raises(Unsupported):
            adapt_request(first, u, "reject")
