"""What a dialect module provides, and the small helpers several of them share."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.canonical import JSON, ChatError, ChatRequest, ChatResponse, Message, StreamEvent
from gateway.errors import DialectError
from gateway.framing import Framing

__all__ = [
    "Dialect",
    "StreamDecoder",
    "StreamEncoder",
    "error_code_for",
    "error_text",
    "expect_object",
    "parse_messages",
    "split_known",
    "text_of",
]


class StreamDecoder(Protocol):
    """Upstream stream payloads (parsed JSON, or ``RawData``) to canonical events."""

    def decode(self, payload: Any) -> list[StreamEvent]:
        """Raises :class:`DialectError` for a payload that is not this dialect's chunk."""
        ...

    def end(self) -> list[StreamEvent]:
        """The body ended: a :class:`StreamFinish`, or a :class:`StreamError` when the dialect
        says the stream was cut short (nothing when it already finished or failed)."""
        ...


class StreamEncoder(Protocol):
    """Canonical events to this dialect's stream payloads (compact JSON bytes, one per frame)."""

    def encode(self, event: StreamEvent) -> list[bytes]: ...


class Dialect(Protocol):
    name: str
    framing: Framing
    """The stream framing this dialect emits."""
    stream_content_type: str
    stream_path: str | None
    """A suffix that selects the streamed answer by path (``/stream``), or ``None`` when the
    body (or a header) asks for a stream at the same path."""
    stream_by_accept: bool
    """Whether ``Accept: text/event-stream`` alone asks for a stream."""

    def parse_request(self, body: JSON) -> ChatRequest: ...

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None) -> JSON:
        """``model`` is the upstream's default, used when the request names none."""
        ...

    def parse_response(self, body: JSON) -> ChatResponse: ...

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        """``req`` is the client's request, in this same dialect (for its spelling hints)."""
        ...

    def parse_error(self, body: JSON) -> ChatError | None:
        """The error a whole body carries, if it is an error body (status filled in by caller)."""
        ...

    def render_error(self, err: ChatError) -> JSON: ...

    def decoder(self) -> StreamDecoder: ...

    def encoder(self, req: ChatRequest) -> StreamEncoder: ...


# --- shared helpers ------------------------------------------------------------------------------


def expect_object(value: JSON, where: str) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise DialectError(f"must be an object, not {_kind(value)}", where or "body")
    return value


def split_known(obj: dict[str, JSON], known: frozenset[str]) -> dict[str, JSON]:
    """The keys no canonical field names, plus known keys whose value is ``null`` (so that a
    same-dialect render gives back ``null`` where the wire had it, and nothing where it had
    nothing)."""
    return {k: v for k, v in obj.items() if k not in known or v is None}


_MESSAGE_KEYS = frozenset({"role", "content", "context", "name"})


def parse_messages(body: dict[str, JSON], *, name_key: str = "name") -> list[Message]:
    raw = body.get("messages")
    if raw is None:
        raise DialectError("is required", "messages")
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {_kind(raw)}", "messages")
    if not raw:
        raise DialectError("must hold at least one message", "messages")
    known = _MESSAGE_KEYS | {name_key}
    out: list[Message] = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        m = expect_object(m, where)
        role = m.get("role")
        if not isinstance(role, str):
            raise DialectError("must be a string", f"{where}.role")
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise DialectError("must be a string or a list of parts", f"{where}.content")
        name = m.get(name_key)
        if name is not None and not isinstance(name, str):
            raise DialectError("must be a string", f"{where}.{name_key}")
        out.append(Message(role, content, m.get("context"), name, split_known(m, known)))
    return out


def text_of(content: JSON) -> str:
    """A message's text: OpenAI content parts are joined; non-text parts are dropped."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def error_text(value: JSON) -> str:
    """The message of any dialect's error value: a string, or an object with ``message``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        msg = value.get("message")
        if isinstance(msg, str):
            return msg
    return "upstream error"


_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    408: "TIMEOUT",
    413: "PAYLOAD_TOO_LARGE",
    429: "RATE_LIMITED",
    502: "BAD_GATEWAY",
    503: "UNAVAILABLE",
    504: "GATEWAY_TIMEOUT",
}


def error_code_for(status: int) -> str:
    return _CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "ERROR")


def _kind(value: JSON) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "a list"
        case dict():
            return "an object"
    return type(value).__name__
