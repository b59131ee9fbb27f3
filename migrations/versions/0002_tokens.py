"""Scoped API bearer tokens (access control): one row per token, its secret only hashed.

Revision ID: 0002_tokens
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0002_tokens"
down_revision = "0001"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("token_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_api_token"),
        sa.UniqueConstraint("token_id", name="uq_api_token_token_id"),
    )


def downgrade() -> None:
    op.drop_table("api_token")
