"""What a strict reader observed in one request, answer or stream: a plain, dialect-neutral
record the tests compare across dialects (never the gateway's canonical types, so that a bug
shared by the gateway's writer and reader cannot hide).

A strict reader module exposes:

- ``read_request(body: Any) -> Observed``: a client request body (``messages`` filled);
- ``read_whole(body: Any) -> Observed``: a whole answer;
- ``read_stream(data: bytes) -> Observed``: a whole stream body; it asserts the framing is
  exactly right (event names, terminators, one start, block/item order, ids that stay the
  same...) and raises ``AssertionError`` with a clear message otherwise;
- ``read_error(body: Any) -> str``: an error body's message.

``read_stream`` may take a keyword ``lenient=True``: read what a real server of the dialect may
send and the gateway must not (e.g. a first line without context, a rewritten cumulative
content), for the upstream bodies the tests start from. Byte-level quirks (CRLF, comments, a
missing final newline) are undone before by ``strict._wire.tolerant``.

Optional, for the tests that need more cases than the samples have (a module without them runs
on its samples only):

- ``write_request(obs: Observed) -> Any``: the fullest request a client of the dialect sends for
  ``obs`` (its messages, tools, state, ``model``, ``stream`` and ``extra`` sampling, as far as the
  dialect carries them; a streaming request asks for usage where the dialect lets it ask);
- ``write_whole(obs: Observed) -> Any`` and ``write_stream(obs: Observed, rng: Random) ->
  bytes``: an upstream's answer carrying what the dialect carries of ``obs`` (the text cut at
  ``rng``'s places; with ``obs.error`` set, the stream breaks with that error after the text);
- ``SAMPLING``: the request fields of ``extra`` (``model``, ``temperature``, …) the dialect has;
- ``FINISH``: the dialect's finish reasons mapped to ``stop`` / ``length`` / ``tool_calls`` /
  ``content_filter`` (the writers take ``obs.finish`` in those words).
- ``COVERS``: for a dialect with fewer reasons than those, the neutral reasons each of its own
  stands for (Ollama's ``stop`` also follows tool calls).

Conventions that let two dialects' observations be compared: a multi-agent answer's ``text`` is
:func:`agents_text` of its agents (the documented way single-message dialects carry them); a
system prompt kept outside the messages is a first message of role ``system``; a tool result is
a message with ``tool_result_for`` set, whatever its role; messages with nothing in them and
consecutive messages of one role compare as a dialect that alternates roles holds them;
``extra["no_session_state"]`` marks an answer whose shape has no place for a session state
(chatui's minimal answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Observed", "ObservedCall", "ObservedMessage", "agents_text"]


@dataclass
class ObservedCall:
    id: str
    name: str
    arguments: Any
    """The arguments parsed from their JSON text (an object); a freeform call's text."""
    freeform: bool = False
    """A call of a freeform (``custom``) tool: :attr:`arguments` is its text as it came."""
    namespace: str | None = None
    """The group of the tool called, where the wire names one."""


@dataclass
class ObservedMessage:
    """A request message as the upstream would read it."""

    role: str
    text: str
    images: list[str] = field(default_factory=list)
    """Each image as a URL (``data:`` URLs for inline images)."""
    tool_calls: list[ObservedCall] = field(default_factory=list)
    tool_result_for: str | None = None
    tool_result_error: bool = False
    reasoning: str = ""


@dataclass
class Observed:
    text: str = ""
    """All answer text, agents' headers included when a dialect joins agents into one text."""
    agents: list[tuple[str | None, str]] = field(default_factory=list)
    """Per agent (multi-agent dialects): (name, text)."""
    citations: list[str] = field(default_factory=list)
    """Each source's name (title, else id/url), in order."""
    followups: list[str] = field(default_factory=list)
    thoughts: bool = False
    session_state: Any = None
    usage: tuple[int | None, int | None] | None = None
    """(input tokens incl. cached, output tokens), when the dialect reported usage."""
    tool_calls: list[ObservedCall] = field(default_factory=list)
    reasoning: str = ""
    finish: str | None = None
    """The dialect's own finish/stop reason as written on the wire."""
    error: str | None = None
    """A mid-stream error's message (the stream must end right after it)."""
    messages: list[ObservedMessage] = field(default_factory=list)
    """``read_request`` only."""
    tools: list[str] = field(default_factory=list)
    """``read_request`` only: the tool names offered (functions and freeform tools; a tool of a
    namespace as ``<namespace>/<name>``)."""
    freeform_tools: list[str] = field(default_factory=list)
    """``read_request`` only: the names in :attr:`tools` of freeform (``custom``) tools."""
    hosted_tools: list[str] = field(default_factory=list)
    """``read_request`` only: the types of the provider's built-in tools offered."""
    tool_choice: str | None = None
    """``read_request`` only: auto / none / required / tool:<name>."""
    output: tuple[str, Any] | None = None
    """``read_request`` only: the structured output asked for, ``(kind, schema)`` with kind
    ``json_schema`` or ``json_object`` (schema ``None``); ``None`` for plain text."""
    model: str | None = None
    stream: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def agents_text(agents: list[tuple[str | None, str]]) -> str:
    """Several agents' messages as one text (docs/translation.md): each named agent's part
    starts with ``**Name:** ``, and a blank line comes before each later part."""
    if len(agents) == 1 and agents[0][0] is None:
        return agents[0][1]
    parts = []
    for i, (name, text) in enumerate(agents):
        head = "" if i == 0 else "\n\n"
        if name is not None:
            head += f"**{name}:** "
        parts.append(head + text)
    return "".join(parts)
