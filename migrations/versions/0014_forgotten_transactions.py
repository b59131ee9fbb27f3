"""The ids of the transactions retention deleted (``forgotten_txn``): a send that uses one
again is refused, not published a second time.

Revision ID: 0014_forgotten_transactions
Revises: 0013_dead_letter_redrive
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0014_forgotten_transactions"
down_revision = "0013_dead_letter_redrive"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forgotten_txn",
        sa.Column("producer_group", sa.String(127), nullable=False),
        sa.Column("transaction_id", sa.String(128), nullable=False),
        sa.Column("forgotten_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("producer_group", "transaction_id", name="pk_forgotten_txn"),
    )


def downgrade() -> None:
    op.drop_table("forgotten_txn")
