"""The neutral chat model every dialect parses into and renders from.

A dialect module never talks to another dialect: it maps its wire JSON to these types and back.
RAG metadata (citations, thoughts, follow-up questions) lives in ``context``, a dict shaped like
the protocol's *recommended response context* (``data_points``, ``thoughts``,
``followup_questions``), because two of the four dialects carry it verbatim and keeping it raw
makes their round trips exact; :func:`citations_of` and :func:`context_with_citations` give the
typed view the other dialects need.

What a wire object carries that no field here names is kept in ``extras`` together with the name
of the dialect it came from (``extras_dialect``); a renderer merges ``extras`` back only when it
renders the same dialect, which is what makes parse-then-render an identity.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "JSON",
    "AssistantMessage",
    "ChatError",
    "ChatRequest",
    "ChatResponse",
    "Citation",
    "ContextUpdate",
    "Message",
    "StreamError",
    "StreamEvent",
    "StreamFinish",
    "StreamStart",
    "TextDelta",
    "agent_header",
    "citations_of",
    "context_with_citations",
    "followups_of",
    "merge_context",
    "new_completion_id",
    "now",
]

JSON: TypeAlias = Any
"""Any value orjson can load or dump."""


@dataclass(slots=True)
class Message:
    """One message of the conversation a client sends."""

    role: str
    """``user``, ``assistant``, ``system`` or whatever the client said (kept verbatim)."""
    content: JSON
    """The text; OpenAI clients may send a list of content parts, kept as sent."""
    context: JSON = None
    """Per-message context (protocol dialects), ``None`` when absent."""
    name: str | None = None
    """OpenAI's participant name, or chatui's ``agentName``."""
    extras: dict[str, JSON] = field(default_factory=dict)
    """Keys of the wire message no field above names."""


@dataclass(slots=True)
class ChatRequest:
    """A chat request, whichever dialect it came in."""

    messages: list[Message]
    stream: bool = False
    """Whether the client asked for a streamed answer (body flag, path or Accept header)."""
    context: JSON = None
    """Request context, e.g. ``{"overrides": {"temperature": 0.3, "top": 3}}``."""
    session_state: JSON = None
    """The app's memory, opaque to the gateway; ``None`` when absent or null."""
    model: str | None = None
    sampling: dict[str, JSON] = field(default_factory=dict)
    """OpenAI sampling and limit options (``temperature``, ``top_p``, ``max_tokens``, …)."""
    extras: dict[str, JSON] = field(default_factory=dict)
    extras_dialect: str | None = None
    hints: dict[str, JSON] = field(default_factory=dict)
    """How the client spelled things (e.g. ``sessionState`` vs ``session_state``), so the answer
    to that same client is spelled alike. Only the client's own dialect reads them."""


@dataclass(slots=True)
class Citation:
    """A source the answer is based on (chatui's ``sources`` entry)."""

    id: str
    title: str | None = None
    url: str | None = None
    snippet: str | None = None


@dataclass(slots=True)
class AssistantMessage:
    """One assistant message of a whole answer (several when a multi-agent backend answers)."""

    content: str
    role: str = "assistant"
    agent: str | None = None
    """The agent's name (chatui ``agentName``), for multi-agent answers."""
    content_type: str | None = None
    """``text`` or ``markdown`` (chatui ``contentType``)."""
    id: str | None = None
    """chatui ``messageId``."""
    extras: dict[str, JSON] = field(default_factory=dict)


@dataclass(slots=True)
class ChatResponse:
    """A whole (non-streamed) answer."""

    messages: list[AssistantMessage]
    context: JSON = None
    """Response context in the recommended shape: ``data_points`` (``text`` entries
    ``"name: snippet"``, ``citations``, ``images``), ``thoughts``, ``followup_questions``."""
    session_state: JSON = None
    finish_reason: str | None = None
    usage: dict[str, JSON] | None = None
    """``{"prompt_tokens": …, "completion_tokens": …, "total_tokens": …}``."""
    id: str | None = None
    created: int | None = None
    """Unix seconds."""
    model: str | None = None
    extras: dict[str, JSON] = field(default_factory=dict)
    extras_dialect: str | None = None

    @property
    def text(self) -> str:
        """The answer as one text: every agent's message, each headed by its agent's name."""
        if len(self.messages) == 1 and self.messages[0].agent is None:
            return self.messages[0].content
        parts: list[str] = []
        for m in self.messages:
            parts.append(agent_header(m.agent, first=not parts) + m.content)
        return "".join(parts)


@dataclass(slots=True)
class ChatError:
    """An error answer: an HTTP status and a message meant for the end user."""

    status: int
    message: str
    code: str | None = None
    """A short machine code (OpenAI ``code``, chatui ``error.code``)."""
    type: str | None = None
    """OpenAI's ``type`` (``invalid_request_error``, ``server_error``, …)."""
    param: str | None = None
    retry_after: float | None = None
    """Seconds, for 429 and 503 answers."""


# --- stream events -------------------------------------------------------------------------------


@dataclass(slots=True)
class StreamStart:
    """The answer begins: who speaks, and the context known before the text."""

    role: str = "assistant"
    context: JSON = None
    session_state: JSON = None
    id: str | None = None
    created: int | None = None
    model: str | None = None


@dataclass(slots=True)
class TextDelta:
    """A piece of the answer's text; ``agent`` names the speaker in multi-agent streams."""

    text: str
    agent: str | None = None


@dataclass(slots=True)
class ContextUpdate:
    """Context or session state that arrives after the text began (merged, later wins)."""

    context: JSON = None
    session_state: JSON = None


@dataclass(slots=True)
class StreamFinish:
    """The answer ended cleanly."""

    reason: str | None = "stop"
    usage: dict[str, JSON] | None = None


@dataclass(slots=True)
class StreamError:
    """The answer broke after it began; never followed by a clean finish."""

    message: str
    code: str | None = None
    status: int = 502


StreamEvent: TypeAlias = StreamStart | TextDelta | ContextUpdate | StreamFinish | StreamError


# --- helpers shared by dialects ------------------------------------------------------------------


def now() -> int:
    return int(time.time())


def new_completion_id() -> str:
    return "chatcmpl-" + os.urandom(16).hex()  # uuid4().hex's shape, cheaper


def agent_header(agent: str | None, *, first: bool) -> str:
    """How an agent's name is written into a single-message dialect's text (documented in
    docs/translation.md): ``**Name:** `` at the start, and a blank line before each later agent."""
    sep = "" if first else "\n\n"
    return f"{sep}**{agent}:** " if agent else sep


def merge_context(old: JSON, new: JSON) -> JSON:
    """Merge context that arrives several times in one stream: later keys win, and a nested
    ``context.context`` (as the reference backend sends it with follow-up questions) is
    flattened into its parent."""
    new = _flatten_nested(new)
    if not isinstance(old, dict):
        return new
    if not isinstance(new, dict):
        return old
    merged = dict(old)
    merged.update(new)
    return merged


def _flatten_nested(ctx: JSON) -> JSON:
    if isinstance(ctx, dict) and isinstance(ctx.get("context"), dict):
        inner = _flatten_nested(ctx["context"])
        outer = {k: v for k, v in ctx.items() if k != "context"}
        return {**inner, **outer}
    return ctx


def citations_of(context: JSON) -> list[Citation]:
    """The sources named by a recommended-shape context: each ``data_points.text`` entry
    ``"name: snippet"`` (split on the first ``": "``), then each ``data_points.citations`` entry
    not already named."""
    ctx = _flatten_nested(context)
    if not isinstance(ctx, dict):
        return []
    points = ctx.get("data_points")
    if not isinstance(points, dict):
        return []
    out: list[Citation] = []
    seen: set[str] = set()
    for entry in _strings(points.get("text")):
        name, sep, snippet = entry.partition(": ")
        name = name.strip()
        out.append(Citation(id=name, title=name, url=_url(name), snippet=snippet if sep else None))
        seen.add(name)
    for entry in _strings(points.get("citations")):
        if entry not in seen:
            seen.add(entry)
            out.append(Citation(id=entry, title=entry, url=_url(entry)))
    return out


def context_with_citations(citations: list[Citation], base: JSON = None) -> JSON:
    """A recommended-shape context naming ``citations``: ``data_points.text`` gets
    ``"name: snippet"`` for each source with a snippet and ``data_points.citations`` the url (or
    the name) of each. ``name`` is the title, else the id. Returns ``base`` when there are none."""
    if not citations:
        return base
    text: list[str] = []
    cites: list[str] = []
    for c in citations:
        name = c.title or c.id
        if c.snippet is not None:
            text.append(f"{name}: {c.snippet}")
        cites.append(c.url or name)
    ctx = dict(base) if isinstance(base, dict) else {}
    points = dict(ctx["data_points"]) if isinstance(ctx.get("data_points"), dict) else {}
    points["text"] = text
    points["citations"] = cites
    ctx["data_points"] = points
    return ctx


def followups_of(context: JSON) -> list[str]:
    ctx = _flatten_nested(context)
    if isinstance(ctx, dict):
        return list(_strings(ctx.get("followup_questions")))
    return []


def _strings(value: JSON) -> list[str]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _url(name: str) -> str | None:
    return name if name.startswith(("http://", "https://")) else None
