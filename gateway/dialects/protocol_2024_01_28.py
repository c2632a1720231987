"""``protocol-2024-01-28``: the OpenAI-like ``choices`` format with ``context`` and
``session_state`` per choice (see specs/protocol-2024-01-28.md).

Streams are JSON lines of ``{"choices": [{"delta": …, "context"?, "session_state"?,
"finish_reason", "index"}], …}``; the first chunk carries the context. An error is
``{"error": "text"}``, whole or as a chunk.
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
    Usage,
    agent_header,
    new_completion_id,
    now,
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
    usage_from_openai_shape,
    usage_to_openai_shape,
)
from gateway.dialects.shared import shell_context
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, TextPath

__all__ = ["Protocol20240128"]

NAME = "protocol-2024-01-28"
_REQUEST_KEYS = frozenset({"messages", "stream", "context", "session_state"})
_RESPONSE_KEYS = frozenset({"choices", "id", "created", "model", "usage"})
_CONTENT_KEY = frozenset({"content"})
_CHOICE_KEYS = frozenset({"message", "context", "session_state", "finish_reason"})
# The spec's recommended response context, empty: data_points "an object containing text and/or
# image data chunks, a list in the text or images properties", thoughts "a list describing each
# step", followup_questions "a list". Its frontends read data_points and thoughts of every
# answer; a whole answer carries this when the upstream sent no context.
_EMPTY_CONTEXT: dict[str, Any] = {"data_points": {"text": []}, "thoughts": [],
                                  "followup_questions": []}
_EMPTY_CONTEXT_JSON = orjson.dumps(_EMPTY_CONTEXT)


class Protocol20240128(SamplesFromPackage):
    name = NAME
    summary = ("the OpenAI-like `choices` format with `context` and `session_state`, "
               "JSON-lines streams")
    capabilities = Capabilities(session_state="json", citations=True, followups=True,
                                thoughts=True, usage_whole=True, usage_stream=True,
                                answer_context=_EMPTY_CONTEXT)
    framing: Framing = "jsonlines"
    named_events = False
    stream_content_type = "application/json-lines"
    stream_accept = JSON_LINES_ACCEPT
    cumulative_stream = False
    text_path: TextPath | None = ("choices", 0, "delta", "content")
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/legacy/chat"
    route_options = None
    models_path: str | None = None
    models_header: str | None = None
    token_count: TokenCount | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        raise NotImplementedError(f"{self.name} clients list no models")

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        messages = parse_messages(obj)
        stream = obj.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        context = obj.get("context")
        if context is not None and not isinstance(context, dict):
            raise DialectError("must be an object", "context")
        return ChatRequest(
            messages=messages,
            stream=bool(stream),
            context=context,
            session_state=obj.get("session_state"),
            sampling=sampling_of(context),
            extras=split_known(obj, _REQUEST_KEYS),
            extras_dialect=NAME,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        out["messages"] = render_text_messages(req, same)
        out["stream"] = stream
        context = req.context if same else request_context(req)
        if context is not None:
            out["context"] = context
        if req.session_state is not None:
            out["session_state"] = req.session_state
        return out

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            raise DialectError("must be a non-empty list", "choices")
        choice = expect_object(choices[0], "choices[0]")
        message = expect_object(choice.get("message"), "choices[0].message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise DialectError("must be a string", "choices[0].message.content")
        reason = choice.get("finish_reason")
        get = obj.get
        created, usage, rid, model = get("created"), get("usage"), get("id"), get("model")
        extras = split_known(obj, _RESPONSE_KEYS)
        extras["_choice"] = split_known(choice, _CHOICE_KEYS)
        if isinstance(usage, dict):
            extras["_usage"] = usage
        return ChatResponse(
            messages=[AssistantMessage(
                content=content or "",
                extras=split_known(message, _CONTENT_KEY),
            )],
            context=choice.get("context"),
            session_state=(choice["session_state"] if "session_state" in choice
                           else get("session_state")),
            finish_reason=reason if isinstance(reason, str) else None,
            usage=usage_from_openai_shape(usage) if usage is not None else None,
            id=rid if isinstance(rid, str) else None,
            created=created if isinstance(created, int) else None,
            model=model if isinstance(model, str) else None,
            extras=extras,
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        extras = dict(resp.extras) if same else {}
        choice: dict[str, Any] = dict(extras.pop("_choice", None) or {"index": 0})
        raw_usage = extras.pop("_usage", None)
        message: dict[str, Any] = {}
        if same and resp.messages:
            message.update(resp.messages[0].extras)
        message.setdefault("role", "assistant")
        message["content"] = resp.text
        choice["message"] = message
        # the context the upstream sent, else a fresh copy of the empty one (answer_context's,
        # read by orjson at C speed rather than copied a dict at a time)
        context = resp.context
        choice["context"] = orjson.loads(_EMPTY_CONTEXT_JSON) if context is None else context
        if resp.session_state is not None:
            choice["session_state"] = resp.session_state
        choice["finish_reason"] = resp.finish_reason or "stop"
        out: dict[str, Any] = {
            **extras,
            "choices": [choice],
            "id": resp.id or new_completion_id(),
            "created": resp.created or now(),
            "object": extras.get("object", "chat.completion"),
        }
        if resp.model or req.model:
            out["model"] = resp.model or req.model
        if raw_usage is not None:
            out["usage"] = raw_usage
        elif resp.usage is not None:
            out["usage"] = usage_to_openai_shape(resp.usage)
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
        return _Encoder(req.model)


class _Decoder:
    __slots__ = ("_failed", "_reason", "_started", "_usage")

    def __init__(self) -> None:
        self._started = False
        self._failed = False
        self._reason: str | None = None
        self._usage: Usage | None = None

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._failed:
            return []
        if not isinstance(payload, dict):
            raise DialectError("a chunk must be an object", "stream")
        if payload.get("error") is not None:
            self._failed = True
            return [StreamError(error_text(payload["error"]))]
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = usage_from_openai_shape(usage)
        choices = payload.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return self._start(payload, None) if not self._started else []
        events = [] if self._started else self._start(payload, choice)
        if not events and (choice.get("context") is not None
                           or choice.get("session_state") is not None):
            events.append(ContextUpdate(choice.get("context"), choice.get("session_state")))
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text = delta.get("content")
            if isinstance(text, str) and text:
                events.append(TextDelta(text))
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._reason = reason
        return events

    def _start(self, payload: dict[str, Any], choice: dict[str, Any] | None) -> list[StreamEvent]:
        if self._started:
            return []
        self._started = True
        created = payload.get("created")
        return [StreamStart(
            context=choice.get("context") if choice else None,
            session_state=choice.get("session_state") if choice else None,
            id=payload["id"] if isinstance(payload.get("id"), str) else None,
            created=created if isinstance(created, int) else None,
            model=payload["model"] if isinstance(payload.get("model"), str) else None,
        )]

    def end(self) -> list[StreamEvent]:
        if self._failed:
            return []
        self._failed = True  # nothing may follow the end
        if not self._started:  # not one chunk: the body was lost, not an empty answer
            return [StreamError("the upstream stream ended before it began")]
        return [StreamFinish(self._reason or "stop", self._usage)]


_TEXT_HEAD = b'{"choices":[{"delta":{"content":'
_TEXT_TAIL = b'},"finish_reason":null,"index":0}]'
"""How :meth:`_Encoder._wrap` writes a text chunk's choice around its text (a JSON string),
before the tail."""
_START_HEAD = b'{"choices":[{"delta":{"role":"assistant"},"context":'
_START_TAIL = b',"finish_reason":null,"index":0}]'
"""How :meth:`_Encoder._start` writes the first chunk around its context, before the tail."""
_FINISH_STOP = b'{"choices":[{"delta":{},"finish_reason":"stop","index":0}]'
"""How :meth:`_Encoder._wrap` writes the last chunk of a stream that stopped, with no usage,
before the tail."""


class _Encoder:
    __slots__ = ("_agent", "_closed", "_first", "_model", "_spoke", "_tail")

    def __init__(self, model: str | None) -> None:
        self._first = True
        self._closed = False
        self._agent: str | None = None
        self._spoke = False  # any text sent yet (the next agent's header starts a paragraph)
        self._model = model
        self._tail = b""

    def _start(self, start: StreamStart | None = None) -> list[Payload]:
        if not self._first:
            return []
        self._first = False
        tail: dict[str, Any] = {
            "object": "chat.completion.chunk",
            "id": (start.id if start else None) or new_completion_id(),
            "created": (start.created if start else None) or now(),
        }
        model = (start.model if start else None) or self._model
        if model:
            tail["model"] = model
        self._tail = b"," + orjson.dumps(tail)[1:]
        # (this version's frontend reads choices[0] of the chunk it kept on the first piece of
        # text: see shell_context)
        _, written = shell_context(start.context if start else None, _EMPTY_CONTEXT,
                                   _EMPTY_CONTEXT_JSON)
        # the bytes orjson writes of the choice {delta, context, session_state?, finish_reason,
        # index}, its constant parts written once
        state = b""
        if start and start.session_state is not None:
            state = b',"session_state":' + orjson.dumps(start.session_state)
        return [b"".join((_START_HEAD, written, state, _START_TAIL, self._tail))]

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: once the stream has
        begun."""
        if self._first or self._closed or self._agent is not None:
            return None
        self._spoke = True
        tail = b'"},"finish_reason":null,"index":0}]' + self._tail
        return [b"".join((b'{"choices":[{"delta":{"content":"', t, tail)) for t in texts]

    def _wrap(self, choice: dict[str, Any], usage: Usage | None = None) -> bytes:
        head = b'{"choices":' + orjson.dumps([choice])
        if usage is not None:
            head += b',"usage":' + orjson.dumps(usage_to_openai_shape(usage))
        return head + self._tail

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        if event.__class__ is TextDelta and not self._first and event.agent == self._agent:
            # a piece of text once the stream has begun, nearly every event: the bytes the
            # TextDelta case below writes (_wrap of its choice), with nothing to start
            self._spoke = True
            return [b"".join((_TEXT_HEAD, orjson.dumps(event.text), _TEXT_TAIL, self._tail))]
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
                out.append(self._wrap({"delta": {"content": text}, "finish_reason": None,
                                       "index": 0}))
                return out
            case ContextUpdate():
                out = self._start()
                choice: dict[str, Any] = {"delta": {}}
                if event.context is not None:
                    choice["context"] = event.context
                if event.session_state is not None:
                    choice["session_state"] = event.session_state
                choice["finish_reason"] = None
                choice["index"] = 0
                out.append(self._wrap(choice))
                return out
            case StreamFinish():
                out = self._start()
                self._closed = True
                reason = event.reason or "stop"
                if reason == "stop" and event.usage is None:
                    out.append(_FINISH_STOP + self._tail)  # the _wrap below, written once
                else:
                    out.append(self._wrap({"delta": {}, "finish_reason": reason, "index": 0},
                                          event.usage))
                return out
            case StreamError():
                self._closed = True
                return [orjson.dumps({"error": event.message})]
            case ReasoningDelta() | ToolCallStart() | ToolCallDelta() | ToolCallEnd():
                return []  # not carried (declared): the pipeline reported them before this
            case _:
                assert_never(event)
