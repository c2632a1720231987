"""The tables, as the newest migration leaves them (a test compares the two).

Times are integer microseconds since the epoch (UTC), the same on SQLite and PostgreSQL.
A chat's messages are numbered ``seq`` 0, 1, 2, ... in the order they were first stored; messages
are never removed one by one, so ``message_count`` is also the next ``seq``. ``body`` is the
message exactly as the client sent it (JSON text), whatever its shape.

Stored responses (a stateful client API such as OpenAI's Responses, kept by the gateway for its
clients: docs/translation.md): ``responses`` holds each answer as the client got it, and
``response_items`` its input items (``role`` ``in``, the request's own, references resolved)
then its output items (``out``), numbered ``seq`` 0, 1, 2, ... in that order. ``owner`` is as for
chats; ``previous_id`` the stored response the request continued (a chain the gateway walks).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = ["chats", "messages", "metadata", "response_items", "responses"]

metadata = MetaData()

chats = Table(
    "chats", metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(64), nullable=False),
    # '' when the gateway has no API keys, else the SHA-256 of the key that created the chat.
    Column("mode", String(16), nullable=False),
    Column("title", Text, nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("message_count", Integer, nullable=False),
    Column("last_message", Text, nullable=False),
    # The list endpoint's one query: one owner's chats of one mode, newest first.
    Index("ix_chats_owner_mode_updated", "owner", "mode", "updated_us", "id"),
)

messages = Table(
    "messages", metadata,
    Column("chat_id", String(64), ForeignKey("chats.id", ondelete="CASCADE"),
           primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("msg_key", String(255), nullable=False),
    Column("body", Text, nullable=False),
    UniqueConstraint("chat_id", "msg_key", name="uq_messages_chat_key"),
)

responses = Table(
    "responses", metadata,
    Column("id", String(128), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("previous_id", String(128), nullable=True),
    Column("body", Text, nullable=False),
    # The retention purge's one query: everything created before a time.
    Index("ix_responses_created", "created_us"),
)

response_items = Table(
    "response_items", metadata,
    Column("response_id", String(128), ForeignKey("responses.id", ondelete="CASCADE"),
           primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("role", String(8), nullable=False),
    Column("item_id", String(128), nullable=False),
    Column("owner", String(64), nullable=False),
    Column("body", Text, nullable=False),
    # An item_reference's lookup: one owner's item by its id.
    Index("ix_response_items_owner_item", "owner", "item_id"),
)
