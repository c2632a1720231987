"""What the history endpoints accept: pydantic models of the bodies, checks of the query.

A message is stored exactly as sent (the spec's message objects, the Chat UI app's UI
messages, anything that is a JSON object); only its key is read: ``messageId``, else ``id``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictStr,
    StringConstraints,
    ValidationError,
    model_validator,
)

__all__ = [
    "MODES",
    "CreateChat",
    "Mode",
    "PutMessages",
    "content_text",
    "first_problem",
]

Mode = Literal["standard", "multiAgent"]
MODES: tuple[str, ...] = get_args(Mode)
Key = Annotated[StrictStr, StringConstraints(min_length=1, max_length=255)]
_LAST_MESSAGE_CHARS = 1000


class CreateChat(BaseModel):
    """``POST {path}``: ``{"mode": "standard", "title": "New Chat"}`` (both optional)."""

    model_config = ConfigDict(extra="ignore")
    mode: Mode = "standard"
    title: Annotated[StrictStr, StringConstraints(max_length=1000)] = "New Chat"


class MessageKey(BaseModel):
    """The part of a message the store reads: its key."""

    model_config = ConfigDict(extra="ignore")
    messageId: Key | None = None
    id: Key | None = None

    @model_validator(mode="after")
    def _keyed(self) -> MessageKey:
        if self.messageId is None and self.id is None:
            raise ValueError("a message needs a messageId or an id (a message whose key is "
                             "already stored replaces it, so a retried PUT never duplicates)")
        return self

    @property
    def key(self) -> str:
        key = self.messageId if self.messageId is not None else self.id
        assert key is not None
        return key


class PutMessages(BaseModel):
    """``PUT {path}/{chatId}/messages`` and ``PUT {path}/{chatId}``: ``{"messages": [...]}``."""

    model_config = ConfigDict(extra="ignore")
    messages: list[MessageKey]


def first_problem(e: ValidationError) -> tuple[str, str]:
    """The field (``messages[2].messageId``, or ``body``) and what is wrong with it."""
    err = e.errors(include_url=False)[0]
    where = ""
    for part in err["loc"]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "is required"
    return where or "body", msg


def content_text(message: dict[str, Any]) -> str:
    """A message's ``content`` as text (for a chat's ``lastMessage``): a string as is, the text
    parts of a list of parts joined, anything else empty; at most 1,000 characters."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p if isinstance(p, str) else str(p.get("text", ""))
                          for p in content if isinstance(p, str | dict))
    return content[:_LAST_MESSAGE_CHARS] if isinstance(content, str) else ""
