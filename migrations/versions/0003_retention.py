"""Retention: each topic's first retained offset and retention, the walk over resolved
transactions, and the partial index it walks.

Revision ID: 0003_retention
Revises: 0002_tokens
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0003_retention"
down_revision = "0002_tokens"
branch_labels = None
depends_on = None

NAME = sa.String(127)
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

WATERMARKS_WITH_FIRST_OFFSET = """
CREATE VIEW topic_watermarks AS
SELECT o.topic AS topic, o.next_offset AS next_offset,
       COALESCE(r.first_offset, 0) AS first_offset
FROM topic_offset o LEFT JOIN topic_retention r ON r.topic = o.topic
"""
WATERMARKS = """
CREATE VIEW topic_watermarks AS
SELECT topic, next_offset FROM topic_offset
"""


def upgrade() -> None:
    op.create_table(
        "topic_retention",
        sa.Column("topic", NAME, nullable=False),
        sa.Column("first_offset", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("retention_seconds", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("topic", name="pk_topic_retention"),
    )
    op.create_table(
        "retention_pending",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("txn_id", BigId, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_retention_pending"),
    )
    op.create_table(
        "retention_cursor",
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.Column("txn_id", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("kind", name="pk_retention_cursor"),
    )
    op.create_index("ix_txn_resolved", "txn", ["resolved_at", "id"],
                    postgresql_where=sa.text("resolved_at IS NOT NULL"),
                    sqlite_where=sa.text("resolved_at IS NOT NULL"))
    op.execute("DROP VIEW topic_watermarks")
    op.execute(WATERMARKS_WITH_FIRST_OFFSET)


def downgrade() -> None:
    op.execute("DROP VIEW topic_watermarks")
    op.execute(WATERMARKS)
    op.drop_index("ix_txn_resolved", table_name="txn")
    for table in ("retention_cursor", "retention_pending", "topic_retention"):
        op.drop_table(table)
