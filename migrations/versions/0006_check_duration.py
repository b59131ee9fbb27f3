"""Each check's duration (``check_log.duration_ms``), and an index on when checks were
made, so the dashboard counts the last hour's checks without reading the whole log.

Checks recorded before this revision have no duration (NULL).

Revision ID: 0006_check_duration
Revises: 0005_subscriptions
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_check_duration"
down_revision = "0005_subscriptions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("check_log") as batch:
        batch.add_column(sa.Column("duration_ms", sa.Float(), nullable=True))
    op.create_index("ix_check_log_created_at", "check_log", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_check_log_created_at", table_name="check_log")
    with op.batch_alter_table("check_log") as batch:
        batch.drop_column("duration_ms")
