"""Initial schema: producer groups, half table, op log, committed log, views.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

NAME = sa.String(127)
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

COMMITTED_MESSAGES_VIEW = """
CREATE VIEW committed_messages AS
SELECT ml.topic AS topic,
       ml.queue_offset AS queue_offset,
       hm.message_id AS message_id,
       t.transaction_id AS transaction_id,
       t.producer_group AS producer_group,
       hm.keys AS keys,
       hm.tag AS tag,
       COALESCE(ml.properties, hm.properties) AS properties,
       CASE WHEN hm.body_is_text THEN {decode} END AS body,
       hm.body AS body_bytes,
       hm.created_at AS created_at,
       ml.committed_at AS committed_at
FROM message_log ml
JOIN half_message hm ON hm.id = ml.half_message_id
JOIN txn t ON t.id = hm.txn_id
"""

TOPIC_WATERMARKS_VIEW = """
CREATE VIEW topic_watermarks AS
SELECT topic, next_offset FROM topic_offset
"""


def upgrade() -> None:
    op.create_table(
        "producer_group",
        sa.Column("name", NAME, nullable=False),
        sa.Column("check_urls", sa.Text(), nullable=False),
        sa.Column("check_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_producer_group"),
    )
    op.create_table(
        "txn",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("producer_group", NAME, nullable=False),
        sa.Column("transaction_id", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("check_url", sa.Text(), nullable=True),
        sa.Column("check_immunity_seconds", sa.Integer(), nullable=False),
        sa.Column("check_times", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_check_at", UTCDateTime(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_txn"),
        sa.UniqueConstraint(
            "producer_group", "transaction_id", name="uq_txn_producer_group_transaction_id"
        ),
    )
    op.create_index(
        "ix_txn_due",
        "txn",
        ["next_check_at"],
        postgresql_where=sa.text("state = 'PREPARED'"),
        sqlite_where=sa.text("state = 'PREPARED'"),
    )
    op.create_index("ix_txn_group_state", "txn", ["producer_group", "state", "id"])
    op.create_table(
        "half_message",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.Column("txn_id", BigId, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("topic", NAME, nullable=False),
        sa.Column("tag", sa.Text(), nullable=True),
        sa.Column("keys", sa.Text(), nullable=False),
        sa.Column("properties", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("body_is_text", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["txn_id"], ["txn.id"], name="fk_half_message_txn_id_txn"),
        sa.PrimaryKeyConstraint("id", name="pk_half_message"),
        sa.UniqueConstraint("message_id", name="uq_half_message_message_id"),
    )
    op.create_index("ix_half_message_txn_id_seq", "half_message", ["txn_id", "seq"])
    op.create_table(
        "op_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("txn_id", BigId, nullable=False),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("check_times", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["txn_id"], ["txn.id"], name="fk_op_log_txn_id_txn"),
        sa.PrimaryKeyConstraint("id", name="pk_op_log"),
    )
    op.create_index("ix_op_log_txn_id", "op_log", ["txn_id"])
    op.create_table(
        "check_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("txn_id", BigId, nullable=False),
        sa.Column("check_times", sa.Integer(), nullable=False),
        sa.Column("result", sa.String(16), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["txn_id"], ["txn.id"], name="fk_check_log_txn_id_txn"),
        sa.PrimaryKeyConstraint("id", name="pk_check_log"),
    )
    op.create_index("ix_check_log_txn_id", "check_log", ["txn_id"])
    op.create_table(
        "message_log",
        sa.Column("topic", NAME, nullable=False),
        sa.Column("queue_offset", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("half_message_id", BigId, nullable=False),
        sa.Column("properties", sa.Text(), nullable=True),
        sa.Column("committed_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["half_message_id"], ["half_message.id"],
            name="fk_message_log_half_message_id_half_message",
        ),
        sa.PrimaryKeyConstraint("topic", "queue_offset", name="pk_message_log"),
    )
    op.create_index("ix_message_log_half_message_id", "message_log", ["half_message_id"])
    op.create_table(
        "topic_offset",
        sa.Column("topic", NAME, nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic", name="pk_topic_offset"),
    )
    decode = (
        "convert_from(hm.body, 'UTF8')"
        if op.get_bind().dialect.name == "postgresql"
        else "CAST(hm.body AS TEXT)"
    )
    op.execute(COMMITTED_MESSAGES_VIEW.format(decode=decode))
    op.execute(TOPIC_WATERMARKS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW topic_watermarks")
    op.execute("DROP VIEW committed_messages")
    for table in ("topic_offset", "message_log", "check_log", "op_log", "half_message", "txn",
                  "producer_group"):
        op.drop_table(table)
