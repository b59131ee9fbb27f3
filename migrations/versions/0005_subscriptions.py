"""Shared subscriptions: a cursor per subscription and the offsets above it that were looked
at; delayed delivery: the time a half message asked for, and the committed message's
deliverable time; transactional acks: how many offsets a transaction holds.

Revision ID: 0005_subscriptions
Revises: 0004_signing_secrets
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0005_subscriptions"
down_revision = "0004_signing_secrets"
branch_labels = None
depends_on = None

NAME = sa.String(127)
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("txn", sa.Column("held_acks", sa.Integer(), nullable=True))
    op.add_column("half_message", sa.Column("deliver_after_ms", sa.BigInteger(), nullable=True))
    op.add_column("half_message", sa.Column("deliver_at", UTCDateTime(), nullable=True))
    op.add_column("message_log", sa.Column("deliver_at", UTCDateTime(), nullable=True))
    op.create_table(
        "subscription",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("topic", NAME, nullable=False),
        sa.Column("name", NAME, nullable=False),
        sa.Column("ack_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("max_redeliveries", sa.Integer(), nullable=False),
        sa.Column("backoff_min_ms", sa.Integer(), nullable=False),
        sa.Column("backoff_max_ms", sa.Integer(), nullable=False),
        sa.Column("dead_letter_topic", NAME, nullable=False),
        sa.Column("ack_cursor", sa.BigInteger(), nullable=False),
        sa.Column("read_offset", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_subscription"),
        sa.UniqueConstraint("topic", "name", name="uq_subscription_topic_name"),
    )
    op.create_table(
        "subscription_offset",
        sa.Column("subscription_id", BigId, nullable=False),
        sa.Column("queue_offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("acked", sa.Boolean(), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("leased_until", UTCDateTime(), nullable=True),
        sa.Column("next_at", UTCDateTime(), nullable=True),
        sa.Column("held_by", BigId, nullable=True),
        sa.ForeignKeyConstraint(["subscription_id"], ["subscription.id"],
                                name="fk_subscription_offset_subscription_id_subscription"),
        sa.PrimaryKeyConstraint("subscription_id", "queue_offset",
                                name="pk_subscription_offset"),
    )
    op.create_index("ix_subscription_offset_held_by", "subscription_offset", ["held_by"],
                    postgresql_where=sa.text("held_by IS NOT NULL"),
                    sqlite_where=sa.text("held_by IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_subscription_offset_held_by", table_name="subscription_offset")
    op.drop_table("subscription_offset")
    op.drop_table("subscription")
    op.drop_column("message_log", "deliver_at")
    op.drop_column("half_message", "deliver_at")
    op.drop_column("half_message", "deliver_after_ms")
    op.drop_column("txn", "held_acks")
