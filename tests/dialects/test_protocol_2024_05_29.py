"""What only ``protocol-2024-05-29`` does: the session state spelled ``sessionState`` (the
Microsoft spec, its JavaScript SDK) or ``session_state`` (the first publication, the reference
backend), a client answered in its own spelling; the stream chosen by the path; a first stream
line the reference frontend can read; ``overrides.temperature`` as the sampling temperature."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from observe import RICH, run_stream, strict

from gateway.canonical import ChatResponse
from gateway.dialects import DIALECTS, Dialect, get
from gateway.pipeline import StreamTranslator, translate_request, translate_response

ME = get("protocol-2024-05-29")
KEYS = ("sessionState", "session_state")
GOLDEN = Path(__file__).parent.parent / "golden" / ME.name
WRITTEN = [d for d in DIALECTS.values() if hasattr(strict(d), "write_whole")]


def upstream_state(up: Dialect) -> Any:
    kind = up.capabilities.session_state
    return {"id": 7, "ü": [1, None]} if kind == "json" else "s-ü" if kind == "string" else None


def keys_in(obj: Any) -> set[str]:
    return {k for k in KEYS if isinstance(obj, dict) and k in obj}


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("up", [d.name for d in WRITTEN])
def test_client_is_answered_in_its_own_spelling(up: str, key: str) -> None:
    """Whole and streamed, the state is under the key the client sent, whatever the upstream
    spelled (or the client's own, when the upstream keeps none)."""
    u = DIALECTS[up]
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}], key: {"old": 1}})
    state = upstream_state(u)
    want = state if state is not None else {"old": 1}
    obs = replace(RICH["rag-no-state"], session_state=state)
    out, _ = translate_response(strict(u).write_whole(obs), u, ME, req)
    assert keys_in(out) == {key} and out[key] == want

    req.stream = True
    _, data = run_stream(u, ME, req, [strict(u).write_stream(obs, random.Random(up))])
    lines = [orjson.loads(line) for line in data.splitlines()]
    assert set().union(*(keys_in(line) for line in lines)) == {key}
    assert strict(ME).read_stream(data).session_state == want


def test_a_client_that_spelled_none_gets_both() -> None:
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}]})
    for u in WRITTEN:
        obs = replace(RICH["empty"], session_state=upstream_state(u))
        out, _ = translate_response(strict(u).write_whole(obs), u, ME, req)
        if obs.session_state is not None:
            assert keys_in(out) == set(KEYS), u.name


def test_same_dialect_answer_never_holds_two_states() -> None:
    """The reference backend answers ``"session_state": null``; a client that sent
    ``sessionState`` gets its own back, and not beside that null."""
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}],
                            "sessionState": {"mine": True}})
    body = {"message": {"role": "assistant", "content": "ok"}, "context": {"thoughts": []},
            "session_state": None}
    out, _ = translate_response(body, ME, ME, req)
    assert out == {"message": {"role": "assistant", "content": "ok"},
                   "context": {"thoughts": []}, "sessionState": {"mine": True}}
    # and with no state to echo, the answer comes back as it was
    plain = ME.parse_request({"messages": [{"role": "user", "content": "hi"}]})
    assert translate_response(body, ME, ME, plain)[0] == body


def test_the_stream_is_chosen_by_the_path() -> None:
    assert ME.stream_path == "/stream" and not ME.stream_by_accept
    for stream in (False, True):
        for c in DIALECTS.values():
            _, out, _ = translate_request(c.samples.requests["text"], c, ME, stream=stream)
            assert "stream" not in out, c.name


def test_first_line_always_carries_data_points() -> None:
    """The reference frontend reads ``context.data_points`` from the first line, whatever the
    upstream's first context held (nothing, or a context without sources)."""
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}]})
    req.stream = True
    for u in DIALECTS.values():
        for name, data in u.samples.streams.items():
            _, out = run_stream(u, ME, req, [data], policy="drop")
            first = orjson.loads(out.split(b"\n", 1)[0])
            if u is not ME:
                assert isinstance(first["context"]["data_points"], dict), (u.name, name)
                assert first["delta"] == {"role": "assistant"}


@pytest.mark.parametrize("key", KEYS)
def test_both_spellings_are_read(key: str) -> None:
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}], key: "s"})
    assert req.session_state == "s"
    resp = ME.parse_response({"message": {"role": "assistant", "content": ""}, key: [1]})
    assert resp.session_state == [1]
    assert isinstance(resp, ChatResponse)


def test_overrides_temperature_is_the_temperature() -> None:
    """The spec's overrides travel as they are to a dialect with a request context, and the
    temperature in them reaches every dialect that has one."""
    overrides = orjson.loads((GOLDEN / "fragments" / "overrides.json").read_bytes())["overrides"]
    body = {"messages": [{"role": "user", "content": "Hi"}],
            "context": {"overrides": {**overrides, "temperature": 0.4}}}
    for up in DIALECTS.values():
        _, out, _ = translate_request(body, ME, up, stream=True, model="m")
        got = strict(up).read_request(out)
        if "temperature" in getattr(strict(up), "SAMPLING", ()):
            assert got.extra.get("temperature") == 0.4, up.name
        if up is ME:
            assert out["context"] == body["context"]


def test_strict_reader_wants_context_in_the_first_line() -> None:
    reader = strict(ME)
    reader.read_stream(ME.samples.streams["text"])
    crlf = ME.samples.streams["crlf"].replace(b"\r\n", b"\n")  # a server's: no context
    with pytest.raises(AssertionError, match="data_points"):
        reader.read_stream(crlf)
    assert reader.read_stream(crlf, lenient=True).text == "Hello, world"
    with pytest.raises(AssertionError, match="session"):
        reader.read_whole({"message": {"role": "assistant", "content": ""},
                           "sessionState": 1, "session_state": None})


@pytest.mark.parametrize("key", KEYS)
def test_a_client_that_spelled_a_null_state_still_gets_the_upstreams_bytes(key: str) -> None:
    """The reference frontend sends ``session_state: null`` on a first turn. On a same-dialect
    route the upstream's lines are forwarded as they came while they carry no state; a line that
    carries one, in the other spelling, is written in the client's, and so is every line after
    it. Whole answers: forwarded as they came unless they hold a state."""
    other = next(k for k in KEYS if k != key)
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}], key: None,
                            "stream": True})
    assert req.hints and req.session_state is None
    first = b'{"delta": {"role": "assistant"}, "context": {"data_points": {"text": []}}}\n'
    texts = [b'{"delta": {"content": "%d "}}\n' % i for i in range(3)]
    stated = b'{"delta": {}, "%s": {"n": 1}}\n' % other.encode()
    after = b'{"delta": {"content": "end"}}\n'
    tr = StreamTranslator(ME, ME, req)
    forwarded = tr.feed(first + b"".join(texts))
    assert forwarded == first + b"".join(texts)  # every byte as it came, spaces and all
    rest = tr.feed(stated) + tr.feed(after) + tr.finish()
    lines = [orjson.loads(line) for line in rest.splitlines()]
    assert lines[0] == {"delta": {}, key: {"n": 1}}
    assert lines[1] == {"delta": {"content": "end"}}
    assert tr.done and not tr.failed and tr.text_chars == len("0 1 2 end")

    whole = b'{"message": {"role": "assistant", "content": "hi"}, "context": {}}'
    resp, raw = _through_exchange(key, whole)
    assert raw == whole
    stated_whole = b'{"message": {"role": "assistant", "content": "hi"}, "%s": 5}' % \
        other.encode()
    resp, raw = _through_exchange(key, stated_whole)
    assert keys_in(resp) == {key} and resp[key] == 5


def _through_exchange(key: str, body: bytes) -> tuple[Any, bytes]:
    """A whole answer through a same-dialect route of a gateway, for a client that sent
    ``key: null``."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from gateway.app import create_app
    from gateway.config import parse_config
    from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

    async def answer(request: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": "application/json"}, body)

    async def run() -> bytes:
        cfg = parse_config({
            "upstreams": {"up": {"dialect": ME.name, "url": "http://up.test/chat"}},
            "routes": [{"path": "/c", "dialect": ME.name, "upstream": "up"}]}, env={})
        async with TestClient(TestServer(create_app(cfg, transport=MemoryTransport(answer)))) \
                as client:
            resp = await client.post("/c", json={
                "messages": [{"role": "user", "content": "hi"}], key: None})
            assert resp.status == 200
            return await resp.read()

    raw = asyncio.run(run())
    return orjson.loads(raw), raw
