"""Stored responses and their items (the gateway keeps a stateful client API's answers).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("created_us", sa.BigInteger, nullable=False),
        sa.Column("previous_id", sa.String(128), nullable=True),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_responses_created", "responses", ["created_us"])
    op.create_table(
        "response_items",
        sa.Column("response_id", sa.String(128),
                  sa.ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("item_id", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_response_items_owner_item", "response_items", ["owner", "item_id"])


def downgrade() -> None:
    # The gateway never runs downgrades: a newer schema is refused at start, never dropped.
    raise NotImplementedError
