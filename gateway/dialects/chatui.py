"""``chatui``: a Chat UI's message format (see specs/chat-ui-api-formats.md).

A whole answer is one message object, an array of them (multi-agent, each with ``agentName``), or
the minimal ``[{"Items": [{"Text": …}]}]`` answer. The Chat UI app itself (its latest version)
reads none of these: it reads ``data.messages``, an array of its UI messages ``{id, role, content,
timestamp, agentName?}``. So a single answer is the spec's object with ``messages`` added (readers
of either shape work), and a multi-agent answer is the spec's array, or with the route option
``chatui_shape: app`` the app's ``{"messages": [...]}``. Error bodies carry a top-level
``message`` as well (the app shows ``errorBody.message``).

A stream is SSE whose events each carry the *whole message so far* (cumulative ``content``)
under one ``messageId``, ``status`` going ``processing`` → ``completed``/``failed``; sources
come with the events (usually the last).

Cumulative content becomes deltas by cutting the previously seen prefix; a new ``messageId`` (or
``agentName``) starts a new agent's text. Citations map to the canonical context as
``sources[{id, title, url, snippet}]`` <-> ``data_points.text`` ``"title: snippet"`` and
``data_points.citations`` (url, else title). A string session state travels as
``conversationId``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias, assert_never

import orjson
from pydantic import BaseModel, ConfigDict, Field, create_model

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    Citation,
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
    citations_of,
    context_with_citations,
    random_hex,
)
from gateway.dialects.base import (
    SSE_ACCEPT,
    Capabilities,
    SamplesFromPackage,
    TokenCount,
    error_code_for,
    error_text,
    expect_object,
    parse_messages,
    split_known,
    text_of,
)
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, RawData, TextPath

__all__ = ["ChatUIDialect"]

NAME = "chatui"
_REQUEST_KEYS = frozenset({"messages", "stream", "conversationId"})
_MESSAGE_KEYS = frozenset(
    {"messageId", "conversationId", "role", "content", "contentType", "agentName"})


_Shape: TypeAlias = Literal["spec", "app"]
# Built by a call, not a class statement: compiled, a class body keeps no annotation pydantic
# could read its fields from. ``Field`` is called untyped: typed, ``Field("spec", ...)`` is a str
# (so that it can stand as a field's default), which the compiled call would check it to be.
_field: Callable[..., Any] = Field
ChatUIRouteOptions: type[BaseModel] = create_model(
    "ChatUIRouteOptions",
    __module__=__name__,
    __doc__="Options of a route whose clients speak ``chatui``.",
    __config__=ConfigDict(extra="forbid", frozen=True),
    chatui_shape=(_Shape, _field("spec", description=(
        "The shape of a multi-agent whole answer: ``spec``, the format's array of message "
        "objects; ``app``, the Chat UI app's ``{\"messages\": [...]}`` (a single answer "
        "always carries both)."))),
)


def _iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _new_id() -> str:
    return "msg-" + random_hex()


def sources_of(context: JSON) -> list[dict[str, JSON]]:
    out: list[dict[str, JSON]] = []
    for c in citations_of(context):
        src: dict[str, JSON] = {"id": c.id, "title": c.title or c.id}
        if c.url:
            src["url"] = c.url
        if c.snippet is not None:
            src["snippet"] = c.snippet
        out.append(src)
    return out


def citations_from_sources(sources: JSON) -> list[Citation]:
    out: list[Citation] = []
    if not isinstance(sources, list):
        return out
    for s in sources:
        if not isinstance(s, dict):
            continue
        sid, title, url, snippet = (s.get(k) for k in ("id", "title", "url", "snippet"))
        name = title if isinstance(title, str) and title else sid
        if not isinstance(name, str) or not name:
            continue
        out.append(Citation(
            id=sid if isinstance(sid, str) else name,
            title=name,
            url=url if isinstance(url, str) and url else None,
            snippet=snippet if isinstance(snippet, str) else None,
        ))
    return out


def _role_of(obj: dict[str, JSON]) -> str | None:
    role = obj.get("role", obj.get("Role"))
    if isinstance(role, dict):
        role = role.get("Label", role.get("label"))
    return role.lower() if isinstance(role, str) else None


def _is_app_shape(body: JSON) -> bool:
    return (isinstance(body, dict) and isinstance(body.get("messages"), list)
            and "content" not in body and "Items" not in body)


def _app_message(msg: dict[str, Any]) -> dict[str, Any]:
    """A spec message object as the Chat UI app's UI message."""
    out: dict[str, Any] = {"id": msg["messageId"], "role": "assistant",
                           "content": msg["content"], "timestamp": msg["createdAt"]}
    if "agentName" in msg:
        out["agentName"] = msg["agentName"]
    return out


def _is_minimal(obj: JSON) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("Items"), list)


def _minimal_text(obj: dict[str, JSON], where: str) -> str:
    parts: list[str] = []
    for i, item in enumerate(obj["Items"]):
        if not isinstance(item, dict):
            raise DialectError("must be an object", f"{where}.Items[{i}]")
        kind = item.get("$type")
        if kind is not None and (not isinstance(kind, str) or kind.lower() != "textcontent"):
            continue  # images, function calls, …: no text to carry
        text = item.get("Text", item.get("text"))
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


class ChatUIDialect(SamplesFromPackage):
    name = NAME
    summary = ("a Chat UI's messageId/status/content/sources, SSE with cumulative content, "
               "multi-agent arrays, the minimal `Items`/`Text` answer")
    capabilities = Capabilities(session_state="string", citations=True, multi_agent=True)
    framing: Framing = "sse"
    named_events = False
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = True
    # none: each event carries the whole text so far, which its decoder diffs
    text_path: TextPath | None = None
    stream_path: str | None = None
    stream_by_accept = True
    default_path = "/api/chat"
    route_options: type[BaseModel] | None = ChatUIRouteOptions
    models_path: str | None = None
    models_header: str | None = None
    token_count: TokenCount | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        raise NotImplementedError(f"{self.name} clients list no models")

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        messages = parse_messages(obj, name_key="agentName")
        stream = obj.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        conversation = obj.get("conversationId")
        return ChatRequest(
            messages=messages,
            stream=bool(stream),
            session_state=conversation if isinstance(conversation, str) else None,
            # "stream" stays in extras so that a same-dialect render keeps an explicit false
            extras=split_known(obj, _REQUEST_KEYS - {"stream"}),
            extras_dialect=NAME,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        msgs = []
        for m in req.messages:
            wire: dict[str, Any] = dict(m.extras) if same else {}
            wire["role"] = m.role
            wire["content"] = text_of(m.content)
            if m.name is not None and same:
                wire["agentName"] = m.name
            msgs.append(wire)
        out["messages"] = msgs
        if stream:
            out["stream"] = True
        elif (same and "stream" in req.extras) or (req.stream and same):
            out["stream"] = False
        if isinstance(req.session_state, str):
            out["conversationId"] = req.session_state
        return out

    def parse_response(self, body: JSON) -> ChatResponse:
        if _is_app_shape(body):
            return self._parse_app_shape(body)
        items = body if isinstance(body, list) else [expect_object(body, "")]
        if not items:
            raise DialectError("must hold at least one message", "body")
        messages: list[AssistantMessage] = []
        citations: list[Citation] = []
        conversation: JSON = None
        for i, raw in enumerate(items):
            where = f"[{i}]" if isinstance(body, list) else ""
            obj = expect_object(raw, where)
            role = _role_of(obj)
            if _is_minimal(obj):
                if role not in (None, "assistant"):
                    continue
                extras = {k: v for k, v in obj.items() if k != "Items"}
                extras["_items"] = obj["Items"]
                author = obj.get("AuthorName")
                messages.append(AssistantMessage(
                    _minimal_text(obj, where), agent=author if isinstance(author, str) else None,
                    extras=extras))
                continue
            content = obj.get("content")
            if not isinstance(content, str):
                raise DialectError("must be a string", f"{where}.content".lstrip("."))
            if role not in (None, "assistant"):
                continue
            agent, ctype, mid = obj.get("agentName"), obj.get("contentType"), obj.get("messageId")
            if conversation is None and isinstance(obj.get("conversationId"), str):
                conversation = obj["conversationId"]
            citations.extend(citations_from_sources(obj.get("sources")))
            messages.append(AssistantMessage(
                content,
                agent=agent if isinstance(agent, str) else None,
                content_type=ctype if isinstance(ctype, str) else None,
                id=mid if isinstance(mid, str) else None,
                extras=split_known(obj, _MESSAGE_KEYS),
            ))
        return ChatResponse(
            messages=messages or [AssistantMessage("")],
            context=context_with_citations(citations),
            session_state=conversation,
            id=messages[0].id if messages else None,
            extras={"_array": isinstance(body, list)},
            extras_dialect=NAME,
        )

    def _parse_app_shape(self, body: dict[str, JSON]) -> ChatResponse:
        """``{"messages": [{id, role, content, timestamp, agentName?}]}``: a backend written for
        the Chat UI app."""
        messages: list[AssistantMessage] = []
        for i, m in enumerate(body["messages"]):
            m = expect_object(m, f"messages[{i}]")
            if _role_of(m) not in (None, "assistant"):
                continue
            content, agent, mid = m.get("content"), m.get("agentName"), m.get("id")
            if not isinstance(content, str):
                raise DialectError("must be a string", f"messages[{i}].content")
            messages.append(AssistantMessage(
                content, agent=agent if isinstance(agent, str) else None,
                id=mid if isinstance(mid, str) else None))
        return ChatResponse(messages=messages or [AssistantMessage("")],
                            id=messages[0].id if messages else None,
                            extras={"_array": len(messages) != 1}, extras_dialect=NAME)

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        # a state chatui cannot carry leaves the client its own conversationId (as streams do)
        conversation = next(
            (s for s in (resp.session_state, req.session_state) if isinstance(s, str)), None)
        sources = sources_of(resp.context)
        out: list[dict[str, Any]] = []
        for i, m in enumerate(resp.messages):
            if same and "_items" in m.extras:
                minimal = {k: v for k, v in m.extras.items() if k != "_items"}
                minimal["Items"] = m.extras["_items"]
                out.append(minimal)
                continue
            msg: dict[str, Any] = dict(m.extras) if same else {}
            msg["messageId"] = m.id or _new_id()
            if conversation is not None:
                msg["conversationId"] = conversation
            msg.setdefault("status", "completed")
            msg["role"] = "assistant"
            msg["content"] = m.content
            msg["contentType"] = m.content_type or "text"
            if m.agent is not None:
                msg["agentName"] = m.agent
            msg.setdefault("sources", sources if i == 0 else [])
            msg.setdefault("error", None)
            msg.setdefault("createdAt", _iso_now())
            out.append(msg)
        as_array = resp.extras.get("_array") if same else len(out) != 1
        app_messages = [_app_message(m) for m in out if "content" in m]
        if not as_array:
            return {**out[0], "messages": app_messages}
        if req.options.get("chatui_shape") == "app":
            return {"messages": app_messages}
        return out

    def parse_error(self, body: JSON) -> ChatError | None:
        items = body if isinstance(body, list) else [body]
        errors: list[ChatError] = []
        for obj in items:
            if not isinstance(obj, dict):
                return None
            err = obj.get("error")
            if obj.get("status") == "failed" or (err is not None and "content" not in obj):
                code = err.get("code") if isinstance(err, dict) else None
                errors.append(ChatError(500, error_text(err),
                                        code if isinstance(code, str) else None))
        return errors[0] if errors and len(errors) == len(items) else None

    def render_error(self, err: ChatError) -> JSON:
        return {
            "message": err.message,
            "messageId": _new_id(),
            "status": "failed",
            "role": "assistant",
            "content": "",
            "contentType": "text",
            "sources": [],
            "error": {"message": err.message, "code": err.code or error_code_for(err.status)},
            "createdAt": _iso_now(),
        }

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        conv = req.session_state if isinstance(req.session_state, str) else None
        return _Encoder(conv)


def _conversation(payload: dict[str, Any]) -> str | None:
    conv = payload.get("conversationId")
    return conv if isinstance(conv, str) else None


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest prefix ``a`` and ``b`` share: a rewritten text is cut where it
    departs from the text so far."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Decoder:
    __slots__ = ("_agent", "_completed", "_content", "_ended", "_id", "_sources", "_started",
                 "_told")

    def __init__(self) -> None:
        self._started = False
        self._ended = False
        self._completed = False
        self._id: JSON = None
        self._agent: str | None = None
        self._content = ""
        self._sources: JSON = None
        self._told = False

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._ended:
            return []
        if payload.__class__ is not dict:
            if isinstance(payload, RawData):
                raise DialectError("an event's data is not JSON", "stream")
            if not isinstance(payload, dict):
                raise DialectError("an event must be an object", "stream")
        get = payload.get
        status = get("status")
        if status == "failed" or (get("error") is not None and "content" not in payload):
            return self._failed(payload)
        mid, agent = get("messageId"), get("agentName")
        if agent.__class__ is not str and not isinstance(agent, str):
            agent = None
        content = get("content")
        events: list[StreamEvent]
        if self._told and mid == self._id and agent == self._agent:
            # the message goes on, its id told (nearly every event): only the text it adds and
            # its sources can be news
            if content.__class__ is str or isinstance(content, str):
                prev = self._content
                # one comparison of its prefix: nearly every event extends the text so far
                piece = (content[len(prev):] if content.startswith(prev)
                         else content[_common_prefix(prev, content):])
                self._content = content
                events = [TextDelta(piece, agent)] if piece else []
            else:
                events = []
        else:
            events = self._begun(payload, mid, agent, content)
        sources = get("sources")
        if isinstance(sources, list) and sources and sources != self._sources:
            self._sources = sources
            events.append(ContextUpdate(
                context_with_citations(citations_from_sources(sources)),
                _conversation(payload)))
        # the last event decides: in a multi-agent stream one agent's "completed" is followed
        # by the next agent's "processing" events
        self._completed = status == "completed"
        return events

    def _begun(self, payload: dict[str, Any], mid: JSON, agent: str | None,
               content: JSON) -> list[StreamEvent]:
        """The events of the stream's first event, of a message's first, or of one before the
        message's id went with a text."""
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(StreamStart(session_state=_conversation(payload),
                                      id=mid if isinstance(mid, str) else None))
        if (mid != self._id and self._id is not None) or agent != self._agent:
            self._content = ""  # another message: another agent's text starts
            self._told = False
        self._id, self._agent = mid, agent
        if isinstance(content, str):
            prev = self._content
            piece = (content[len(prev):] if content.startswith(prev)
                     else content[_common_prefix(prev, content):])
            self._content = content
            if piece:
                told = mid if isinstance(mid, str) and not self._told else None
                self._told = True  # the message's id goes with its first text only
                events.append(TextDelta(piece, agent, told))
        return events

    def _failed(self, payload: dict[str, Any]) -> list[StreamEvent]:
        self._ended = True
        err = payload.get("error")
        code = err.get("code") if isinstance(err, dict) else None
        failed: list[StreamEvent] = []
        content, mid = payload.get("content"), payload.get("messageId")
        if (isinstance(content, str) and mid == self._id and self._id is not None
                and content.startswith(self._content) and len(content) > len(self._content)):
            # the message's last text came with its failure: shown, then the error
            failed.append(TextDelta(content[len(self._content):], self._agent, None))
        failed.append(StreamError(error_text(err), code if isinstance(code, str) else None))
        return failed

    def end(self) -> list[StreamEvent]:
        if self._ended:
            return []
        self._ended = True
        if self._completed:
            return [StreamFinish()]
        return [StreamError("the upstream stream ended before it completed")]


class _Encoder:
    __slots__ = ("_agent", "_closed", "_content", "_conv", "_created", "_id", "_sources",
                 "_started")

    def __init__(self, conversation: str | None) -> None:
        self._conv = conversation
        self._id = _new_id()
        self._created = _iso_now()
        self._content = ""
        self._sources: list[dict[str, JSON]] = []
        self._agent: str | None = None
        self._started = False
        self._closed = False

    def _event(self, status: str, error: JSON = None, content: str | None = None) -> bytes:
        obj: dict[str, Any] = {"messageId": self._id}
        if self._conv is not None:
            obj["conversationId"] = self._conv
        obj["status"] = status
        obj["role"] = "assistant"
        obj["content"] = self._content if content is None else content
        obj["contentType"] = "text"
        if self._agent is not None:
            obj["agentName"] = self._agent
        obj["sources"] = self._sources
        obj["error"] = error
        obj["createdAt"] = self._created
        return orjson.dumps(obj)

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: while no agent speaks
        (a TextDelta of none then only extends the content). Each event carries the whole text
        so far: the content's JSON string body, which a plain text extends as it is."""
        if self._closed or self._agent is not None:
            return None
        # No key before "content" holds it (ids and status are strings, whose quotes JSON
        # escapes), so the event with an empty content parts there.
        head, tail = self._event("processing", content="").split(b'"content":""', 1)
        head += b'"content":"'
        tail = b'"' + tail
        shown = orjson.dumps(self._content)[1:-1]
        out: list[Payload] = []
        for t in texts:
            shown += t
            out.append(b"".join((head, shown, tail)))
        self._started = True
        self._content += b"".join(texts).decode()
        return out

    def _absorb(self, context: JSON, state: JSON) -> None:
        if isinstance(state, str):
            self._conv = state
        if context is not None:
            sources = sources_of(context)
            if sources:
                self._sources = sources

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        match event:
            case StreamStart():
                self._absorb(event.context, event.session_state)
                if self._started:
                    return []
                self._started = True
                if event.id:  # one id from first to last event, the upstream's when it had one
                    self._id = event.id
                return [self._event("processing")]
            case TextDelta():
                out: list[Payload] = []
                if event.agent != self._agent:
                    if self._content:
                        out.append(self._event("completed"))
                        self._id, self._content, self._created = (
                            event.message_id or _new_id(), "", _iso_now())
                        self._sources = []
                    self._agent = event.agent
                self._started = True
                self._content += event.text
                out.append(self._event("processing"))
                return out
            case ContextUpdate():
                self._absorb(event.context, event.session_state)
                return []
            case StreamFinish():
                self._closed = True
                return [self._event("completed")]
            case StreamError():
                # Same id, the content shown so far: a cumulative reader must not see it wiped.
                self._closed = True
                return [self._event("failed", {
                    "message": event.message, "code": event.code or error_code_for(event.status)})]
            case ReasoningDelta() | ToolCallStart() | ToolCallDelta() | ToolCallEnd():
                return []  # not carried (declared): the pipeline reported them before this
            case _:
                assert_never(event)
