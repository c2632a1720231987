"""The tables, as the newest migration leaves them (a test compares the two).

Times are integer microseconds since the epoch (UTC), the same on SQLite and PostgreSQL.
A chat's messages are numbered ``seq`` 0, 1, 2, ... in the order they were first stored; messages
are never removed one by one, so ``message_count`` is also the next ``seq``. ``body`` is the
message exactly as the client sent it (JSON text), whatever its shape.
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

__all__ = ["chats", "messages", "metadata"]

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
