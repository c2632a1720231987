"""``protocol-2024-05-29``: ``message``/``delta`` with ``context`` and session state (see the three
specs/protocol-2024-05-29-* documents).

The whole answer is served at ``chat``, the stream at ``chat/stream`` (JSON lines). Session state is
spelled ``sessionState`` by the Microsoft spec and its JavaScript SDK and ``session_state`` by the
first publication and the reference RAG backend; both are read, and a client is answered in the
spelling it used (both, when it used none). An error is ``{"error": "text"}``, whole or as a chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

import orjson

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    ContextUpdate,
    ReasoningDelta,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    agent_header,
)
from gateway.dialects.base import (
    JSON_LINES_ACCEPT,
    Capabilities,
    SamplesFromPackage,
    TokenCount,
    error_text,
    expect_object,
    parse_messages,
    render_text_messages,
    request_context,
    sampling_of,
    split_known,
)
from gateway.dialects.shared import shell_context
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, TextPath

__all__ = ["Protocol20240529"]

NAME = "protocol-2024-05-29"
CAMEL, SNAKE = "sessionState", "session_state"
_REQUEST_KEYS = frozenset({"messages", "context", CAMEL, SNAKE})
_RESPONSE_KEYS = frozenset({"message", "context", CAMEL, SNAKE})
_CONTENT_KEY = frozenset({"content"})
# The reference frontend (azure-search-openai-demo, app/frontend/src/api/models.ts) types every
# answer's context as {data_points: {text, images, citations}, followup_questions: string[] | null,
# thoughts: Thought[]} and reads data_points and thoughts without a check; its backend sends a
# null followup_questions when it has none (captures/azure-search-openai-demo). The first stream
# line and every whole answer carry this when the upstream sent no context.
_EMPTY_CONTEXT: dict[str, Any] = {"data_points": {"text": [], "images": [], "citations": []},
                                  "thoughts": [], "followup_questions": None}
_EMPTY_CONTEXT_JSON = orjson.dumps(_EMPTY_CONTEXT)


def _session(obj: dict[str, JSON]) -> tuple[JSON, str | None]:
    for key in (CAMEL, SNAKE):
        if key in obj:
            return obj[key], key
    return None, None


def _session_keys(req: ChatRequest) -> tuple[str, ...]:
    key = req.hints.get("session_key") if req.extras_dialect == NAME else None
    return (key,) if isinstance(key, str) else (CAMEL, SNAKE)


class Protocol20240529(SamplesFromPackage):
    name = NAME
    summary = ("`message`/`delta`, paths `chat` and `chat/stream`, `sessionState` or "
               "`session_state`")
    capabilities = Capabilities(session_state="json", citations=True, followups=True,
                                thoughts=True, answer_context=_EMPTY_CONTEXT)
    framing: Framing = "jsonlines"
    named_events = False
    stream_content_type = "application/json-lines"
    stream_accept = JSON_LINES_ACCEPT
    cumulative_stream = False
    text_path: TextPath | None = ("delta", "content")
    stream_path: str | None = "/stream"
    stream_by_accept = False
    default_path = "/chat"
    route_options = None
    models_path: str | None = None
    models_header: str | None = None
    token_count: TokenCount | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        raise NotImplementedError(f"{self.name} clients list no models")

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        messages = parse_messages(obj)
        context = obj.get("context")
        if context is not None and not isinstance(context, dict):
            raise DialectError("must be an object", "context")
        state, key = _session(obj)
        stream = obj.get("stream")
        return ChatRequest(
            messages=messages,
            stream=stream is True,
            context=context,
            session_state=state,
            sampling=sampling_of(context),
            extras=split_known(obj, _REQUEST_KEYS),
            extras_dialect=NAME,
            hints={"session_key": key} if key else {},
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        out["messages"] = render_text_messages(req, same)
        context = req.context if same else request_context(req)
        if context is not None:
            out["context"] = context
        if req.session_state is not None:
            # a client's null under the other spelling (kept for a same-dialect render) must not
            # sit beside a state the gateway minted for it
            out.pop(CAMEL, None)
            out.pop(SNAKE, None)
            for key in _session_keys(req):
                out[key] = req.session_state
        return out

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        message = expect_object(obj.get("message"), "message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise DialectError("must be a string", "message.content")
        state, key = _session(obj)
        extras = split_known(obj, _RESPONSE_KEYS)
        if key is not None and state is None:
            extras[key] = None
        return ChatResponse(
            messages=[AssistantMessage(
                content=content or "", extras=split_known(message, _CONTENT_KEY))],
            context=obj.get("context"),
            session_state=state,
            extras=extras,
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        out: dict[str, Any] = dict(resp.extras) if same else {}
        message: dict[str, Any] = dict(resp.messages[0].extras) if same and resp.messages else {}
        message.setdefault("role", "assistant")
        message["content"] = resp.text
        out["message"] = message
        # the context the upstream sent, else a fresh copy of the empty one (answer_context's,
        # read by orjson at C speed rather than copied a dict at a time)
        context = resp.context
        out["context"] = orjson.loads(_EMPTY_CONTEXT_JSON) if context is None else context
        if resp.session_state is not None:
            # an upstream's null under its own spelling must not sit beside the state (an echo of
            # the client's own) written in the client's spelling
            out.pop(CAMEL, None)
            out.pop(SNAKE, None)
            for key in _session_keys(req):
                out[key] = resp.session_state
        return out

    def parse_error(self, body: JSON) -> ChatError | None:
        if isinstance(body, dict) and body.get("error") is not None:
            return ChatError(500, error_text(body["error"]))
        return None

    def render_error(self, err: ChatError) -> JSON:
        return {"error": err.message}

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        return _Encoder(_session_keys(req))


class _Decoder:
    __slots__ = ("_ended", "_started")

    def __init__(self) -> None:
        self._started = False
        self._ended = False

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._ended:
            return []
        if not isinstance(payload, dict):
            raise DialectError("a chunk must be an object", "stream")
        if self._started and len(payload) == 1 and "delta" in payload:
            # a delta alone once the stream has begun, nearly every line: no error, context or
            # state, so what the full reading below makes of it is its text
            delta = payload["delta"]
            if isinstance(delta, dict):
                text = delta.get("content")
                if isinstance(text, str) and text:
                    return [TextDelta(text)]
            return []
        if payload.get("error") is not None:
            self._ended = True
            return [StreamError(error_text(payload["error"]))]
        state, _ = _session(payload)
        context = payload.get("context")
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(StreamStart(context=context, session_state=state))
        elif context is not None or state is not None:
            events.append(ContextUpdate(context, state))
        delta = payload.get("delta")
        if isinstance(delta, dict):
            text = delta.get("content")
            if isinstance(text, str) and text:
                events.append(TextDelta(text))
        return events

    def end(self) -> list[StreamEvent]:
        if self._ended:
            return []
        self._ended = True
        if not self._started:  # not one line: the body was lost, not an empty answer
            return [StreamError("the upstream stream ended before it began")]
        return [StreamFinish()]


_START_HEAD = b'{"delta":{"role":"assistant"},"context":'
"""How :meth:`_Encoder._start` writes the first line of a stream with no state around its
context."""


class _Encoder:
    __slots__ = ("_agent", "_closed", "_first", "_keys", "_spoke")

    def __init__(self, session_keys: tuple[str, ...]) -> None:
        self._keys = session_keys
        self._first = True
        self._closed = False
        self._agent: str | None = None
        self._spoke = False  # any text sent yet (the next agent's header starts a paragraph)

    def _line(self, delta: dict[str, Any], context: JSON, state: JSON) -> bytes:
        obj: dict[str, Any] = {"delta": delta}
        if context is not None:
            obj["context"] = context
        if state is not None:
            for key in self._keys:
                obj[key] = state
        return orjson.dumps(obj)

    def _start(self, start: StreamStart | None = None) -> list[Payload]:
        if not self._first:
            return []
        self._first = False
        context, written = shell_context(start.context if start else None, _EMPTY_CONTEXT,
                                         _EMPTY_CONTEXT_JSON)
        state = start.session_state if start else None
        if state is None:
            # the bytes _line writes of this delta and context, its constant parts written once
            return [b"".join((_START_HEAD, written, b"}"))]
        return [self._line({"role": "assistant"}, context if context is not None
                           else _EMPTY_CONTEXT, state)]

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: once the stream has
        begun."""
        if self._first or self._closed or self._agent is not None:
            return None
        self._spoke = True
        return [b"".join((b'{"delta":{"content":"', t, b'"}}')) for t in texts]

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        if event.__class__ is TextDelta and not self._first and event.agent == self._agent:
            # a piece of text once the stream has begun, nearly every event: the TextDelta
            # case below, with nothing to start and no header to write
            self._spoke = True
            return [b'{"delta":{"content":' + orjson.dumps(event.text) + b"}}"]
        match event:
            case StreamStart():
                return self._start(event)
            case TextDelta():
                out = self._start()
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                self._spoke = True
                out.append(b'{"delta":{"content":' + orjson.dumps(text) + b"}}")
                return out
            case ContextUpdate():
                out = self._start()
                if event.context is not None or event.session_state is not None:
                    out.append(self._line({}, event.context, event.session_state))
                return out
            case StreamFinish():
                self._closed = True
                return self._start()
            case StreamError():
                self._closed = True
                return [orjson.dumps({"error": event.message})]
            case ReasoningDelta() | ToolCallStart() | ToolCallDelta() | ToolCallEnd():
                return []  # not carried (declared): the pipeline reported them before this
            case _:
                assert_never(event)
