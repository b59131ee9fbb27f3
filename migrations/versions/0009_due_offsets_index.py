"""An index of the offset rows by their time to be delivered: every receive asks whether
any row of its subscription is due, and without it the question read every row of the
subscription (on PostgreSQL, the acknowledged ones too until a vacuum removes them).
Offset rows deliverable at once had ``next_at`` NULL; it is now always a time (the
upgrade gives those a time long past), so that one probe of the index answers.

Revision ID: 0009_due_offsets_index
Revises: 0008_open_offsets_only
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_due_offsets_index"
down_revision = "0008_open_offsets_only"
branch_labels = None
depends_on = None

INDEX = "ix_subscription_offset_due"


LONG_PAST = {"postgresql": "'1970-01-01 00:00:00+00'",
             "sqlite": "'1970-01-01 00:00:00.000000'"}


def upgrade() -> None:
    past = LONG_PAST[op.get_bind().dialect.name]
    op.execute(f"UPDATE subscription_offset SET next_at = {past} WHERE next_at IS NULL")
    op.create_index(INDEX, "subscription_offset", ["subscription_id", "next_at"],
                    postgresql_where=sa.text("next_at IS NOT NULL"),
                    sqlite_where=sa.text("next_at IS NOT NULL"))


def downgrade() -> None:
    op.drop_index(INDEX, table_name="subscription_offset")
