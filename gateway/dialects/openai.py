"""``openai``: raw Chat Completions (see specs/openai-chat-completions.md).

Streams are SSE: a role chunk first, content chunks, a chunk with ``finish_reason``, an optional
usage chunk with ``choices: []``, then ``data: [DONE]``. An error after the stream began is an event
``data: {"error": {...}}`` and no ``[DONE]`` follows it. Only choice 0 is read (the gateway never
asks for ``n > 1``).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    ContextUpdate,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    agent_header,
    new_completion_id,
    now,
)
from gateway.dialects.base import (
    error_text,
    expect_object,
    parse_messages,
    split_known,
    text_of,
)
from gateway.errors import DialectError
from gateway.framing import Framing, RawData

__all__ = ["OpenAIDialect"]

NAME = "openai"
SAMPLING = frozenset({
    "temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens",
    "presence_penalty", "frequency_penalty", "seed", "logit_bias", "user",
})
_REQUEST_KEYS = frozenset({"model", "messages", "stream"}) | SAMPLING
_RESPONSE_KEYS = frozenset({"id", "created", "model", "choices", "usage"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
_DONE = b"[DONE]"


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


class OpenAIDialect:
    name = NAME
    framing: Framing = "sse"
    stream_content_type = "text/event-stream"
    stream_path: str | None = None
    stream_by_accept = False

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        messages = parse_messages(obj)
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise DialectError("must be a string", "model")
        stream = obj.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        temperature = obj.get("temperature")
        if temperature is not None and (
            isinstance(temperature, bool) or not isinstance(temperature, int | float)
        ):
            raise DialectError("must be a number", "temperature")
        sampling = {k: obj[k] for k in SAMPLING if obj.get(k) is not None}
        return ChatRequest(
            messages=messages,
            stream=bool(stream),
            model=model,
            sampling=sampling,
            # "stream" stays in extras so that a same-dialect render keeps an explicit false
            extras=split_known(obj, _REQUEST_KEYS - {"stream"}),
            extras_dialect=NAME,
            hints={"include_usage": _include_usage(obj)},
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        out["model"] = req.model or model or "default"
        msgs = []
        for m in req.messages:
            wire: dict[str, Any] = dict(m.extras) if same else {}
            wire["role"] = m.role
            wire["content"] = m.content if same else text_of(m.content)
            if m.name is not None:
                wire["name"] = m.name
            msgs.append(wire)
        out["messages"] = msgs
        out.update(req.sampling)
        temperature = _override(req.context, "temperature")
        if temperature is not None and "temperature" not in out:
            out["temperature"] = temperature
        if stream:
            out["stream"] = True
            if not same or not req.stream:
                # Usage is counted, and kept in a whole answer assembled from this stream; an
                # OpenAI client's own streamed request keeps its own choice.
                out["stream_options"] = {"include_usage": True}
        else:
            out.pop("stream_options", None)  # OpenAI rejects it unless streaming
            if (same and "stream" in req.extras) or req.stream:
                out["stream"] = False
        return out

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            raise DialectError("must be a non-empty list", "choices")
        choice = expect_object(choices[0], "choices[0]")
        message = expect_object(choice.get("message"), "choices[0].message")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise DialectError("must be a string", "choices[0].message.content")
        role = message.get("role")
        return ChatResponse(
            messages=[AssistantMessage(
                content=text_of(content),
                role=role if isinstance(role, str) else "assistant",
                extras=split_known(message, frozenset({"role", "content"})),
            )],
            finish_reason=_str(choice.get("finish_reason")),
            usage=_usage(obj.get("usage")),
            id=_str(obj.get("id")),
            created=_int(obj.get("created")),
            model=_str(obj.get("model")),
            extras={**split_known(obj, _RESPONSE_KEYS),
                    "_choice": split_known(choice, frozenset({"message", "finish_reason"}))},
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        extras = dict(resp.extras) if same else {}
        choice: dict[str, Any] = extras.pop("_choice", None) or {"index": 0, "logprobs": None}
        message: dict[str, Any] = {}
        first = resp.messages[0] if resp.messages else None
        if same and first is not None:
            message.update(first.extras)
        message["role"] = "assistant"
        message["content"] = resp.text
        choice = {**choice, "message": message, "finish_reason": resp.finish_reason or "stop"}
        out: dict[str, Any] = {
            **extras,
            "id": resp.id or new_completion_id(),
            "object": extras.get("object", "chat.completion"),
            "created": resp.created or now(),
            "model": resp.model or req.model or "unknown",
            "choices": [choice],
        }
        if resp.usage is not None:
            out["usage"] = resp.usage
        return out

    def parse_error(self, body: JSON) -> ChatError | None:
        if isinstance(body, dict) and body.get("error") is not None:
            err = body["error"]
            e = ChatError(500, error_text(err))
            if isinstance(err, dict):
                e.code = _str(err.get("code"))
                e.type = _str(err.get("type"))
                e.param = _str(err.get("param"))
            return e
        return None

    def render_error(self, err: ChatError) -> JSON:
        return {"error": {
            "message": err.message,
            "type": err.type or _error_type(err.status),
            "param": err.param,
            "code": err.code,
        }}

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        return _Encoder(req.model, bool(req.hints.get("include_usage")) if
                        req.extras_dialect == NAME else False)


def _include_usage(obj: dict[str, JSON]) -> bool:
    opts = obj.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def _override(context: JSON, key: str) -> JSON:
    if isinstance(context, dict):
        overrides = context.get("overrides")
        if isinstance(overrides, dict):
            return overrides.get(key)
    return None


def _str(v: JSON) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: JSON) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _usage(v: JSON) -> dict[str, JSON] | None:
    return v if isinstance(v, dict) else None


class _Decoder:
    __slots__ = ("_done", "_failed", "_reason", "_started", "_usage")

    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._failed = False
        self._reason: str | None = None
        self._usage: dict[str, JSON] | None = None

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        if isinstance(payload, RawData):
            if payload.text.strip() == "[DONE]":
                self._done = True
                return [StreamFinish(self._reason or "stop", self._usage)]
            raise DialectError("an event's data is not JSON", "stream")
        if not isinstance(payload, dict):
            raise DialectError("a chunk must be an object", "stream")
        if payload.get("error") is not None:
            self._failed = True
            err = payload["error"]
            code = err.get("code") if isinstance(err, dict) else None
            return [StreamError(error_text(err), code if isinstance(code, str) else None)]
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(StreamStart(id=_str(payload.get("id")),
                                      created=_int(payload.get("created")),
                                      model=_str(payload.get("model"))))
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = payload.get("choices")
        if isinstance(choices, list) and choices:
            choice = choices[0]
            if isinstance(choice, dict):
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    text = delta.get("content")
                    if isinstance(text, str) and text:
                        events.append(TextDelta(text))
                reason = choice.get("finish_reason")
                if isinstance(reason, str):
                    self._reason = reason
        return events

    def end(self) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        self._done = True
        if self._reason is not None:
            # Tolerated: a server that finished its answer but left out [DONE].
            return [StreamFinish(self._reason, self._usage)]
        return [StreamError("the upstream stream ended before it finished")]


class _Encoder:
    __slots__ = ("_agent", "_closed", "_created", "_first", "_id", "_include_usage", "_model",
                 "_prefix", "_spoke")

    def __init__(self, model: str | None, include_usage: bool) -> None:
        self._id = new_completion_id()
        self._created = now()
        self._model = model or "unknown"
        self._include_usage = include_usage
        self._first = True
        self._closed = False
        self._agent: str | None = None
        self._spoke = False  # any text sent yet (the next agent's header starts a paragraph)
        self._prefix = b""

    def _chunk(self, delta: dict[str, Any], reason: str | None = None) -> bytes:
        if not self._prefix:
            self._prefix = orjson.dumps({
                "id": self._id, "object": "chat.completion.chunk",
                "created": self._created, "model": self._model,
            })[:-1]
        return self._prefix + b',"choices":' + orjson.dumps(
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]) + b"}"

    def _start(self) -> list[bytes]:
        if not self._first:
            return []
        self._first = False
        return [self._chunk({"role": "assistant", "content": ""})]

    def encode(self, event: StreamEvent) -> list[bytes]:
        if self._closed:
            return []
        match event:
            case StreamStart():
                if self._first:
                    if event.id:
                        self._id = event.id
                    if event.created:
                        self._created = event.created
                    if event.model and self._model == "unknown":
                        self._model = event.model
                return self._start()
            case TextDelta():
                out = self._start()
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                self._spoke = True
                out.append(self._chunk({"content": text}))
                return out
            case ContextUpdate():
                return []
            case StreamFinish():
                out = self._start()
                self._closed = True
                out.append(self._chunk({}, event.reason or "stop"))
                if self._include_usage and event.usage is not None:
                    out.append(self._prefix + b',"choices":[],"usage":'
                               + orjson.dumps(event.usage) + b"}")
                out.append(_DONE)
                return out
            case StreamError():
                self._closed = True
                return [orjson.dumps({"error": {
                    "message": event.message, "type": _error_type(event.status),
                    "param": None, "code": event.code}})]
