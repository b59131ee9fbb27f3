"""The dashboard's sessions on the server: signing out ends a session in every process
(the cookie carries a session id, stored here only as its SHA-256).

Revision ID: 0011_dashboard_sessions
Revises: 0010_txn_acks
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0011_dashboard_sessions"
down_revision = "0010_txn_acks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_session",
        sa.Column("session_hash", sa.String(64), nullable=False),
        sa.Column("token_id", sa.String(32), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("session_hash", name="pk_ui_session"),
    )
    op.create_index("ix_ui_session_expires_at", "ui_session", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_ui_session_expires_at", table_name="ui_session")
    op.drop_table("ui_session")
