"""Chats and their messages.

Revision ID: 0001
Revises:
Create Date: 2026-11-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chats",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("created_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        sa.Column("message_count", sa.Integer, nullable=False),
        sa.Column("last_message", sa.Text, nullable=False),
    )
    op.create_index("ix_chats_owner_mode_updated", "chats",
                    ["owner", "mode", "updated_us", "id"])
    op.create_table(
        "messages",
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("msg_key", sa.String(255), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.UniqueConstraint("chat_id", "msg_key", name="uq_messages_chat_key"),
    )


def downgrade() -> None:
    # The gateway never runs downgrades: a newer schema is refused at start, never dropped.
    raise NotImplementedError
