"""Dead letters republished by `txmsg dead-letters redrive`: each (dead-letter topic,
offset) once, with the redrive transaction that publishes it and, once committed, the
new message's id.

Revision ID: 0013_dead_letter_redrive
Revises: 0012_dead_letter_message_ids
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import NAME, UTCDateTime

revision = "0013_dead_letter_redrive"
down_revision = "0012_dead_letter_message_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dead_letter_redrive",
        sa.Column("dlq_topic", NAME, nullable=False),
        sa.Column("dlq_offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("target_topic", NAME, nullable=False),
        sa.Column("transaction_id", NAME, nullable=False),
        sa.Column("message_id", sa.String(32), nullable=True),
        sa.Column("redriven_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("dlq_topic", "dlq_offset", name="pk_dead_letter_redrive"),
    )


def downgrade() -> None:
    op.drop_table("dead_letter_redrive")
