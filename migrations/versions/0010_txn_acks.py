"""The acks a send carried are kept (``txn_ack``) while its transaction is unresolved, so
that a late commit, or a resume, of a discarded transaction can take them again (or be
refused); ``txn.held_acks`` 0 now means "has acks, holds none".

The upgrade fills ``txn_ack`` from the offsets transactions hold now. A transaction
discarded before it had already released its holds: what its acks were is not known, and
its late commit acknowledges nothing, as before.

Revision ID: 0010_txn_acks
Revises: 0009_due_offsets_index
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_txn_acks"
down_revision = "0009_due_offsets_index"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "txn_ack",
        sa.Column("txn_id", BigId, nullable=False),
        sa.Column("subscription_id", BigId, nullable=False),
        sa.Column("queue_offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("txn_id", "subscription_id", "queue_offset",
                                name="pk_txn_ack"),
    )
    op.execute("INSERT INTO txn_ack (txn_id, subscription_id, queue_offset)"
               " SELECT held_by, subscription_id, queue_offset FROM subscription_offset"
               " WHERE held_by IS NOT NULL")


def downgrade() -> None:
    op.drop_table("txn_ack")
