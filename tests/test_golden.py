"""Golden tests: every example of the specs and every capture, in every target dialect.

The data lives in tests/golden (see its README): ``specs/<dialect>/<role>[.<source>].<ext>`` holds
each JSON example of the spec documents (normalized into valid JSON), ``captures/`` what real
servers sent, byte for byte. Each file parses with its own dialect and translates into every
dialect, whole and streamed; what the target can carry (text, citations, follow-ups, session state,
errors) must arrive unchanged.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from readback import check_framing, payloads_of, read_back

from gateway.canonical import (
    ChatError,
    ChatRequest,
    ChatResponse,
    StreamEvent,
    citations_of,
    followups_of,
)
from gateway.dialects import DIALECT_NAMES, get
from gateway.dialects.chatui import citations_from_sources, sources_of
from gateway.framing import RawData, encoder_for
from gateway.pipeline import (
    StreamTranslator,
    events_from_response,
    translate_error,
    translate_request,
    translate_response,
    with_session_echo,
)

GOLDEN = Path(__file__).parent / "golden"
SPECS, CAPTURES = GOLDEN / "specs", GOLDEN / "captures"
P0128, P0529, CHATUI, OPENAI = DIALECT_NAMES
PROTOCOLS = {P0128, P0529}
CAPTURE_DIALECT = {"ai-chat-protocol": P0529, "azure-search-openai-demo": P0529,
                   "chatui": CHATUI, "openai": OPENAI}
CLIENT_STATE = {"client": "state-ü"}
"""The session state a client sends (a chatui client sends a string)."""


def rel(path: Path) -> str:
    return path.relative_to(GOLDEN).as_posix()


def dialect_of(path: Path) -> str:
    part = path.relative_to(GOLDEN).parts
    return part[1] if part[0] == "specs" else CAPTURE_DIALECT[part[1]]


def role_of(path: Path) -> str:
    """``request``, ``response_*``, ``stream*``, ``error*``, ``fragment_*``, ``part_*`` or
    ``history_*`` (spec files are named so; captures by their extension)."""
    if path.is_relative_to(CAPTURES):
        return "response_capture" if path.suffix == ".json" else "stream_capture"
    return path.name.split(".")[0]


ALL_FILES = sorted(p for p in GOLDEN.rglob("*") if p.is_file() and p.name != "README.md")
REQUESTS = [*(p for p in ALL_FILES if role_of(p) == "request"),
            SPECS / "chatui" / "history_update_request.json"]
RESPONSES = [p for p in ALL_FILES if role_of(p).startswith("response")]
STREAMS = [p for p in ALL_FILES if role_of(p).startswith("stream")]
ERRORS = [p for p in ALL_FILES if role_of(p).startswith("error")]


def ids(paths: list[Path]) -> list[str]:
    return [rel(p) for p in paths]


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def wire(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def json_lines(path: Path) -> list[Any]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def stream_bytes(path: Path) -> bytes:
    """The body an upstream of this dialect sends: captures as they are; spec JSON-lines examples
    framed the way the dialect frames them."""
    data = path.read_bytes()
    if path.suffix == ".jsonl" and path.is_relative_to(SPECS):
        frame = encoder_for(get(dialect_of(path)).framing)
        return b"".join(frame(line) for line in data.splitlines() if line.strip())
    return data


def client_request(client: str, state: Any = None, *, stream: bool) -> ChatRequest:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "What is covered?"}]}
    if state is not None:
        key = {P0128: "session_state", P0529: "sessionState", CHATUI: "conversationId"}.get(client)
        if key is not None and (client != CHATUI or isinstance(state, str)):
            body[key] = state
    if client == OPENAI:
        body.update(model="gpt-client", stream=stream, stream_options={"include_usage": True})
    req = get(client).parse_request(body)
    req.stream = stream
    return req


def client_state(client: str) -> Any:
    return "conv-client" if client == CHATUI else CLIENT_STATE


def can_carry(dialect: str, state: Any) -> bool:
    if state is None or dialect == OPENAI:
        return False
    return dialect != CHATUI or isinstance(state, str)


def expected_state(source: Any, client: str, sent: Any) -> Any:
    sent = sent if can_carry(client, sent) else None
    effective = source if source is not None else sent
    return effective if can_carry(client, effective) else sent


# --- what each stream example says, read from the data itself -----------------------------------


@dataclass
class Expect:
    text: str
    state: Any = None
    followups: list[str] = field(default_factory=list)
    error: str | None = None
    data_points: dict[str, Any] | None = None
    """``text`` and ``citations`` a protocol client reads in ``context.data_points``."""
    sources: list[dict[str, Any]] | None = None
    """What a chatui client reads in ``sources``."""
    usage: dict[str, Any] | None = None


def _dp(text: list[str], citations: list[str] | None = None) -> dict[str, Any]:
    return {"text": text, "citations": citations}


def _sources_from_text(entries: list[str], citations: list[str] | None = None,
                       ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in entries:
        name, _, snippet = e.partition(": ")
        out.append({"id": name, "title": name, "snippet": snippet})
    named = {s["id"] for s in out}
    out += [{"id": c, "title": c} for c in citations or [] if c not in named]
    return out


def bridged_sources(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """chatui sources after a trip through the canonical context (the protocol's data_points):
    ``"title: snippet"`` in ``text`` and the url (else the title) in ``citations``. A chatui answer
    re-encoded for a chatui client (a whole answer served as a stream) gets these; a same-dialect
    whole answer or stream passes its sources through untouched."""
    out: list[dict[str, Any]] = []
    for s in sources:
        if s.get("snippet") is not None:
            out.append({"id": s["title"], "title": s["title"], "snippet": s["snippet"]})
    named = {o["id"] for o in out}
    for s in sources:
        name = s.get("url") or s["title"]
        if name not in named:
            named.add(name)
            out.append({"id": name, "title": name,
                        **({"url": name} if name.startswith("https://") else {})})
    return out


def expect_for(path: Path) -> Expect:
    name = rel(path)
    lines = json_lines(path) if path.suffix == ".jsonl" else []
    if role_of(path) == "stream_error" or name.endswith("chat_stream_exception.jsonl"):
        return Expect("", error=lines[0]["error"])
    if name.startswith("specs/protocol-2024-01-28/stream"):
        dp = lines[0]["choices"][0]["context"]["data_points"]
        return Expect("The", data_points=_dp(dp["text"]),
                      sources=_sources_from_text(dp["text"]))
    if name.startswith("specs/protocol-2024-05-29/stream"):
        dp = lines[0]["context"]["data_points"]
        return Expect("The", data_points=_dp(dp["text"]), sources=_sources_from_text(dp["text"]))
    if name.startswith("captures/azure-search-openai-demo/"):
        dp = lines[0]["context"]["data_points"]
        assert dp["citations"] == ["Benefit_Options-2.pdf"]
        return Expect(
            "".join(str(x["delta"].get("content") or "") for x in lines),
            state=lines[0]["session_state"],
            followups=["What is the capital of Spain?"] if "followup" in name else [],
            data_points=_dp(dp["text"], dp["citations"]),
            sources=[{"id": "Benefit_Options-2.pdf", "title": "Benefit_Options-2.pdf",
                      "snippet": "There is a whistleblower policy."}])
    if name == "captures/ai-chat-protocol/chat_stream_crlf.jsonl":
        return Expect("Hello, world", state="6c6f2c4a-7b1e-4f7e-9f5a-1f2e3d4c5b6a")
    if name in ("captures/chatui/chat_stream.sse", "specs/chatui/stream.jsonl"):
        events = lines or [orjson.loads(e[len(b"data: "):])
                           for e in path.read_bytes().split(b"\n\n") if e.strip()]
        last = events[-1]
        [src] = last["sources"]
        return Expect(last["content"], state=last["conversationId"],
                      data_points=_dp([f"{src['title']}: {src['snippet']}"], [src["url"]]),
                      sources=last["sources"])
    if name == "specs/chatui/stream_sse.sse":
        # The spec's placeholders are a rewrite, not an extension ("Partial content..." then
        # "Complete content..."): a delta client cannot take text back, so it gets both.
        return Expect("Partial content...Complete content...")
    if name == "captures/openai/chat_stream_usage.sse":
        return Expect("Paris is the capital of France. 🇫🇷",
                      usage={"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20})
    if name == "captures/openai/chat_stream_midstream_error.sse":
        return Expect("Paris", error="The server had an error while processing your request.")
    if name == "specs/openai/stream.sse":
        return Expect("Hel", usage={"prompt_tokens": 9, "completion_tokens": 2,
                                    "total_tokens": 11})
    raise AssertionError(f"no expectation for {name}")


# --- reading what a client gets ------------------------------------------------------------------


def translate_stream(path: Path, client: str, req: ChatRequest, seed: str,
                     ) -> tuple[StreamTranslator, bytes]:
    data = stream_bytes(path)
    rng = random.Random(seed)
    t = StreamTranslator(get(dialect_of(path)), get(client), req)
    out, i = [], 0
    while i < len(data):
        n = rng.choice((1, 2, 3, 7, 31, 256, 4096))
        out.append(t.feed(data[i:i + n]))
        i += n
    out.append(t.finish())
    return t, b"".join(out)


def check_clean_end(client: str, payloads: list[Any], text: str) -> None:
    """The parts a client of each dialect expects the gateway to synthesise (for chatui: each
    message's events are processing, then one completed with the whole content; the last
    message's content is ``text`` unless several agents spoke)."""
    if client == OPENAI:
        assert payloads[-1] == RawData("[DONE]")
        chunks = payloads[:-1]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] \
            is not None
        assert len({(c["id"], c["created"]) for c in chunks}) == 1
    elif client == CHATUI:
        last = payloads[-1]
        assert last["status"] == "completed"
        if len({p["messageId"] for p in payloads}) == 1 and "agentName" not in last:
            assert last["content"] == text
        for i, p in enumerate(payloads):
            done = i + 1 == len(payloads) or payloads[i + 1]["messageId"] != p["messageId"]
            assert p["status"] == ("completed" if done else "processing")
    elif client == P0529:
        assert payloads[0]["delta"].get("role") == "assistant"
        assert isinstance(payloads[0].get("context"), dict)
    else:
        assert payloads[0]["choices"][0]["delta"].get("role") == "assistant"
        assert "context" in payloads[0]["choices"][0]
        assert len({(p.get("id"), p.get("created")) for p in payloads[1:]}) == 1


def check_error_end(client: str, payloads: list[Any], message: str) -> None:
    last = payloads[-1]
    if client == CHATUI:
        assert last["status"] == "failed" and last["error"]["message"] == message
        assert all(p["status"] == "processing" for p in payloads[:-1])
    elif client == OPENAI:
        assert last["error"]["message"] == message
        assert RawData("[DONE]") not in payloads
        assert all(c["choices"][0]["finish_reason"] is None for c in payloads[:-1])
    else:
        assert last == {"error": message}
        if client == P0128:
            assert all(c["choices"][0]["finish_reason"] is None for c in payloads[:-1])


def check_citations(client: str, source: str, exp: Expect, back: ChatResponse,
                    payloads: list[Any] | None) -> None:
    if client in PROTOCOLS and exp.data_points is not None:
        points = back.context["data_points"]
        assert points["text"] == exp.data_points["text"]
        assert points.get("citations") == exp.data_points["citations"]
    if client == CHATUI and exp.sources is not None:
        if payloads is not None:  # each message's final event carries its sources
            finals = [p for i, p in enumerate(payloads)
                      if i + 1 == len(payloads) or payloads[i + 1]["messageId"] != p["messageId"]]
            assert [s for p in finals for s in p["sources"]] == exp.sources
        assert [(c.title, c.snippet) for c in citations_of(back.context)][:1] == [
            (exp.sources[0]["title"], exp.sources[0].get("snippet"))]
    if client == OPENAI or source == OPENAI or exp.data_points is None:
        assert citations_of(back.context) == []


# --- the data itself -----------------------------------------------------------------------------


def test_every_golden_file_has_a_role() -> None:
    known = ("request", "response", "stream", "error", "fragment_", "part_", "history_")
    assert ALL_FILES
    for path in ALL_FILES:
        assert role_of(path).startswith(known), rel(path)
        assert dialect_of(path) in DIALECT_NAMES


@pytest.mark.parametrize("path", [p for p in ALL_FILES if p.suffix == ".json"],
                         ids=ids([p for p in ALL_FILES if p.suffix == ".json"]))
def test_json_examples_are_valid_json(path: Path) -> None:
    load(path)


@pytest.mark.parametrize("path", [p for p in STREAMS if p.is_relative_to(SPECS)
                                  and p.suffix == ".jsonl"],
                         ids=ids([p for p in STREAMS if p.is_relative_to(SPECS)
                                  and p.suffix == ".jsonl"]))
def test_spec_streams_are_one_compact_object_per_line(path: Path) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n") and b"\r" not in data
    for line in data.split(b"\n")[:-1]:
        assert orjson.dumps(orjson.loads(line)) == line


# --- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", REQUESTS, ids=ids(REQUESTS))
def test_request_same_dialect_round_trip(path: Path) -> None:
    body = load(path)
    dialect = get(dialect_of(path))
    req = dialect.parse_request(body)
    assert wire(dialect.render_request(req, stream=req.stream, model=None)) == body


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", REQUESTS, ids=ids(REQUESTS))
def test_request_translates(path: Path, target: str) -> None:
    body = load(path)
    for stream in (False, True):
        _, out = translate_request(body, get(dialect_of(path)), get(target), stream=stream,
                                   model="default-model")
        back = get(target).parse_request(wire(out))
        assert [(m.role, m.content) for m in back.messages] == [
            (m["role"], m["content"]) for m in body["messages"]]
        if target == OPENAI:
            assert out["model"] == "default-model"
        if target in (P0128, OPENAI):
            assert bool(out.get("stream")) is stream
        if target in PROTOCOLS and dialect_of(path) in PROTOCOLS:
            assert back.context == body["context"]


# Requests shaped by the OpenAI and chatui specs' field lists (neither spec shows one whole).
CONSTRUCTED_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (OPENAI, {"model": "gpt-4o-mini", "stream": False, "temperature": 0.2, "max_tokens": 50,
              "messages": [{"role": "developer", "content": "Be brief."},
                           {"role": "user", "content": [
                               {"type": "text", "text": "What is in this image?"},
                               {"type": "image_url", "image_url": {"url": "https://e.com/i.png"}}]},
                           {"role": "assistant", "content": None,
                            "tool_calls": [{"id": "c1", "type": "function",
                                            "function": {"name": "f", "arguments": "{}"}}]},
                           {"role": "tool", "tool_call_id": "c1", "content": "42"}],
              "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
    (OPENAI, {"model": "gpt-4o-mini", "stream": True, "stream_options": {"include_usage": True},
              "messages": [{"role": "user", "content": "Hi", "name": "ann"}], "seed": 7}),
    (CHATUI, {"messages": [{"role": "user", "content": "Hi"}], "stream": False,
              "conversationId": "conv-1"}),
    (CHATUI, {"messages": [{"role": "user", "content": "Hi"}], "stream": True}),
    (P0128, {"messages": [{"role": "user", "content": "Hi"}], "stream": True,
             "context": {"overrides": {"temperature": 0.7, "top": 3}},
             "session_state": {"user": "ü"}}),
    (P0529, {"messages": [{"role": "user", "content": "Hi"}],
             "context": {"overrides": {"temperature": 0.7}}, "session_state": "s-1"}),
]


@pytest.mark.parametrize(("dialect", "body"), CONSTRUCTED_REQUESTS,
                         ids=[f"{d}-{i}" for i, (d, _) in enumerate(CONSTRUCTED_REQUESTS)])
def test_constructed_request_same_dialect_round_trip(dialect: str, body: dict[str, Any]) -> None:
    req = get(dialect).parse_request(body)
    assert wire(get(dialect).render_request(req, stream=req.stream, model=None)) == body


@pytest.mark.parametrize("fragment", sorted(SPECS.glob("*/fragment_overrides*.json")),
                         ids=ids(sorted(SPECS.glob("*/fragment_overrides*.json"))))
def test_overrides_temperature_maps_to_openai(fragment: Path) -> None:
    overrides = load(fragment)["overrides"]
    context = {"overrides": {**overrides, "temperature": 0.4}}
    for source in PROTOCOLS:
        body = {"messages": [{"role": "user", "content": "Hi"}], "context": context}
        _, out = translate_request(body, get(source), get(OPENAI), stream=True, model="m")
        assert out["temperature"] == 0.4 and out["model"] == "m" and out["stream"] is True
        for target in PROTOCOLS:  # and back, as overrides.temperature
            _, back = translate_request(wire(out), get(OPENAI), get(target), model=None)
            assert back["context"] == {"overrides": {"temperature": 0.4}}


# --- whole responses -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", RESPONSES, ids=ids(RESPONSES))
def test_response_same_dialect_round_trip(path: Path) -> None:
    body = load(path)
    dialect = get(dialect_of(path))
    resp = dialect.parse_response(body)
    req = dialect.parse_request({"messages": [{"role": "user", "content": "q"}]})
    assert wire(dialect.render_response(resp, req)) == body


def whole_expectations(path: Path) -> tuple[str, Expect]:
    """The text every client must read, and what the example's context names."""
    body = load(path)
    source = dialect_of(path)
    resp = get(source).parse_response(body)
    if source in PROTOCOLS:
        ctx = body["choices"][0]["context"] if source == P0128 else body["context"]
        text = (body["choices"][0]["message"] if source == P0128 else body["message"])["content"]
        dp = ctx["data_points"]
        return text, Expect(text, data_points=_dp(dp["text"]),
                            sources=_sources_from_text(dp["text"]))
    if source == OPENAI:
        return body["choices"][0]["message"]["content"], Expect(body["choices"][0]["message"][
            "content"], usage=body["usage"])
    items = body if isinstance(body, list) else [body]
    if "Items" in items[0]:
        text = "".join(i["Text"] for m in items for i in m["Items"])
        return text, Expect(text)
    assistants = [m for m in items if m["role"] == "assistant"]
    if len(assistants) == 1 and "agentName" not in assistants[0]:
        text = assistants[0]["content"]
    else:
        text = "\n\n".join(f"**{m['agentName']}:** {m['content']}" for m in assistants)
    assert resp.text == text
    sources = [s for m in assistants for s in m["sources"]]
    return text, Expect(
        text, state=assistants[0].get("conversationId"),
        data_points=_dp([f"{s['title']}: {s['snippet']}" for s in sources],
                        [s["url"] for s in sources]) if sources else None,
        sources=sources or None)


WHOLE = [*RESPONSES, SPECS / "chatui" / "history_messages.json"]


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", WHOLE, ids=ids(WHOLE))
def test_whole_response_translates(path: Path, target: str) -> None:
    source = dialect_of(path)
    text, exp = whole_expectations(path)
    body = load(path)
    for sent in (None, client_state(target)):
        req = client_request(target, sent, stream=False)
        out = wire(translate_response(body, get(source), get(target), req))
        assert get(target).parse_error(out) is None
        back = get(target).parse_response(out)
        assert back.text == text
        if target == CHATUI == source and "Items" in str(body):
            # a minimal answer goes to a chatui client verbatim, with no place for its state
            assert out == body
        else:
            assert back.session_state == expected_state(exp.state, target, sent)
        if target == CHATUI and exp.sources is not None:
            first = out[0] if isinstance(out, list) else out
            assert first["sources"] == exp.sources
        check_citations(target, source, exp, back, None)
        if target in (P0128, OPENAI) and source in (P0128, OPENAI):
            assert back.usage == body.get("usage")


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", WHOLE, ids=ids(WHOLE))
def test_whole_response_served_as_stream(path: Path, target: str) -> None:
    """An upstream that never streams, a client that asked for a stream."""
    source = dialect_of(path)
    text, exp = whole_expectations(path)
    if source == target == CHATUI and exp.sources is not None:
        exp.sources = bridged_sources(exp.sources)
    req = client_request(target, client_state(target), stream=True)
    resp = with_session_echo(get(source).parse_response(load(path)), req)
    enc, frame = get(target).encoder(req), encoder_for(get(target).framing)
    events: list[StreamEvent] = events_from_response(resp)
    data = b"".join(frame(p) for e in events for p in enc.encode(e))
    check_framing(target, data)
    payloads = payloads_of(data)
    check_clean_end(target, payloads, text)
    asm = read_back(target, data)
    back = asm.response()
    assert asm.error is None and back.text == text
    assert back.session_state == expected_state(exp.state, target, client_state(target))
    check_citations(target, source, exp, back, payloads if target == CHATUI else None)


# --- errors --------------------------------------------------------------------------------------


def error_message(body: Any) -> str:
    err = body["error"]
    return err if isinstance(err, str) else err["message"]


CHATUI_FAILED = {
    "messageId": "m-9", "status": "failed", "role": "assistant", "content": "",
    "contentType": "text", "sources": [],
    "error": load(SPECS / "chatui" / "part_error_object.json"),
    "createdAt": "2023-04-03T16:38:35.123Z"}


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", ERRORS, ids=ids(ERRORS))
def test_whole_error_translates(path: Path, target: str) -> None:
    body = load(path)
    source = get(dialect_of(path))
    err = source.parse_error(body)
    assert err is not None and err.message == error_message(body)
    back = get(target).parse_error(wire(translate_error(err, get(target))))
    assert back is not None and back.message == err.message


@pytest.mark.parametrize("target", DIALECT_NAMES)
def test_chatui_failed_answer_translates(target: str) -> None:
    err = get(CHATUI).parse_error(CHATUI_FAILED)
    assert err is not None
    assert (err.message, err.code) == ("User-friendly error description", "ERROR_CODE")
    out = wire(translate_error(err, get(target)))
    back = get(target).parse_error(out)
    assert back is not None and back.message == err.message
    if target in (CHATUI, OPENAI):
        assert back.code == "ERROR_CODE"


@pytest.mark.parametrize("path", RESPONSES, ids=ids(RESPONSES))
def test_answers_are_not_errors(path: Path) -> None:
    assert get(dialect_of(path)).parse_error(load(path)) is None


# --- streams -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", STREAMS, ids=ids(STREAMS))
def test_stream_translates(path: Path, target: str) -> None:
    source = dialect_of(path)
    exp = expect_for(path)
    for sent in (None, client_state(target)):
        req = client_request(target, sent, stream=True)
        t, out = translate_stream(path, target, req, f"{rel(path)}/{target}/{sent}")
        check_framing(target, out)
        payloads = payloads_of(out)
        asm = read_back(target, out)
        back = asm.response()
        assert back.text == exp.text
        assert t.text_chars == len(exp.text)
        if exp.error is not None:
            assert t.error is not None and t.error.message == exp.error and not t.broken
            assert asm.error is not None and asm.error.message == exp.error
            check_error_end(target, payloads, exp.error)
            continue
        assert t.error is None and t.done and asm.error is None
        if source != target or (sent is not None and exp.state is None):
            check_clean_end(target, payloads, exp.text)
        assert back.session_state == expected_state(exp.state, target, sent)
        if target == P0529 and sent is not None and back.session_state is not None:
            assert all("session_state" not in p for p in payloads)  # the client's spelling
        if source in PROTOCOLS and target in PROTOCOLS:
            assert followups_of(back.context) == exp.followups
        else:
            assert followups_of(back.context) == []
        check_citations(target, source, exp, back, payloads if target == CHATUI else None)
        if exp.usage is not None and target in (P0128, OPENAI):
            assert back.usage == exp.usage


@pytest.mark.parametrize("target", DIALECT_NAMES)
@pytest.mark.parametrize("path", STREAMS, ids=ids(STREAMS))
def test_stream_served_whole(path: Path, target: str) -> None:
    """An upstream that only streams, a client that asked for a whole answer."""
    source = dialect_of(path)
    exp = expect_for(path)
    req = client_request(target, client_state(target), stream=False)
    asm = read_back(source, stream_bytes(path))
    if exp.error is not None:
        assert asm.error is not None and asm.error.message == exp.error
        out = wire(translate_error(ChatError(502, asm.error.message), get(target)))
        err = get(target).parse_error(out)
        assert err is not None and err.message == exp.error
        return
    assert asm.error is None
    resp = with_session_echo(asm.response(), req)
    out = wire(get(target).render_response(resp, req))
    back = get(target).parse_response(out)
    assert back.text == exp.text
    assert back.session_state == expected_state(exp.state, target, client_state(target))
    if source in PROTOCOLS and target in PROTOCOLS:
        assert followups_of(back.context) == exp.followups
    check_citations(target, source, exp, back, None)


@pytest.mark.parametrize("path", STREAMS, ids=ids(STREAMS))
def test_same_dialect_stream_passes_through(path: Path) -> None:
    """Same dialect both sides, nothing to put in: the client reads the upstream's payloads."""
    source = dialect_of(path)
    t, out = translate_stream(path, source, client_request(source, stream=True), rel(path))
    got, sent = payloads_of(out), payloads_of(stream_bytes(path))
    if t.error is not None:  # an error is re-encoded, after a synthesised start
        assert got[-1] == sent[-1] or get(source).parse_error(got[-1]) is not None
        return
    assert got == sent


@pytest.mark.parametrize("path", [p for p in STREAMS if dialect_of(p) in PROTOCOLS],
                         ids=ids([p for p in STREAMS if dialect_of(p) in PROTOCOLS]))
def test_back_to_back_objects_are_read(path: Path) -> None:
    """The spec documents print stream objects back to back (``}{``); the reader copes."""
    objects = [orjson.dumps(v) for v in json_lines(path)]
    body = b"".join(objects)
    asm = read_back(dialect_of(path), body)
    ref = read_back(dialect_of(path), stream_bytes(path))
    assert asm.response().text == ref.response().text
    assert (asm.error and asm.error.message) == (ref.error and ref.error.message)


# --- fragments and the other chatui documents ----------------------------------------------------


@pytest.mark.parametrize("path", sorted(SPECS.glob("*/fragment_data_points*.json")),
                         ids=ids(sorted(SPECS.glob("*/fragment_data_points*.json"))))
def test_data_points_fragments_name_citations(path: Path) -> None:
    ctx = load(path)
    cites = citations_of(ctx)
    assert [(c.id, c.snippet) for c in cites] == [
        tuple(e.split(": ", 1)) for e in ctx["data_points"]["text"]]
    assert citations_from_sources(sources_of(ctx)) == cites  # and back from chatui sources


@pytest.mark.parametrize("path", sorted(SPECS.glob("*/fragment_followup_questions*.json")),
                         ids=ids(sorted(SPECS.glob("*/fragment_followup_questions*.json"))))
def test_followup_fragments(path: Path) -> None:
    ctx = load(path)
    assert followups_of(ctx) == ctx["followup_questions"]
    assert followups_of({"context": ctx}) == ctx["followup_questions"]


@pytest.mark.parametrize("path", sorted(SPECS.glob("*/fragment_thoughts*.json")),
                         ids=ids(sorted(SPECS.glob("*/fragment_thoughts*.json"))))
def test_thoughts_reach_protocol_clients(path: Path) -> None:
    ctx = load(path)
    for source in PROTOCOLS:
        body = {"message": {"role": "assistant", "content": "x"}, "context": ctx}
        if source == P0128:
            body = {"choices": [{"index": 0, "message": body["message"], "context": ctx,
                                 "finish_reason": "stop"}]}
        for target in PROTOCOLS:
            req = client_request(target, stream=False)
            back = get(target).parse_response(
                wire(translate_response(body, get(source), get(target), req)))
            assert back.context == ctx


def test_chatui_history_documents() -> None:
    history = load(SPECS / "chatui" / "history_messages.json")
    resp = get(CHATUI).parse_response(history)
    assert [(m.agent, m.content) for m in resp.messages] == [
        ("Technical", "I'll help you with that...")]  # the user's message is not the answer
    update = get(CHATUI).parse_request(load(SPECS / "chatui" / "history_update_request.json"))
    assert [m.role for m in update.messages] == ["user", "assistant"]
    for name in ("history_list", "history_create_request", "history_create_response",
                 "history_update_response", "history_delete_response", "part_source"):
        assert load(SPECS / "chatui" / f"{name}.json")


def test_minimal_answer_roles_and_types() -> None:
    """Minimal answers: roles compared case-insensitively, non-text items ignored."""
    body = [
        {"Role": {"Label": "User"}, "Items": [{"$type": "TextContent", "Text": "question"}]},
        {"Role": {"Label": "Assistant"}, "AuthorName": "Bot", "Items": [
            {"$type": "TextContent", "Text": "Hello "},
            {"$type": "ImageContent", "Uri": "https://e.com/i.png"},
            {"$type": "FunctionCallContent", "Text": "not this"},
            {"Text": "world"}]},
        {"role": "ASSISTANT", "Items": [{"$type": "textcontent", "Text": "again"}]},
    ]
    resp = get(CHATUI).parse_response(body)
    assert [(m.agent, m.content) for m in resp.messages] == [("Bot", "Hello world"),
                                                            (None, "again")]
    for target in (P0128, P0529, OPENAI):
        out = wire(translate_response(body, get(CHATUI), get(target),
                                      client_request(target, stream=False)))
        assert get(target).parse_response(out).text == "**Bot:** Hello world\n\nagain"
