"""Ordered consumption (Pulsar's Key_Shared, Failover and Exclusive, RocketMQ's tags):
a message's ordering key; a subscription's type, consumer timeout, tag filter and active
consumer; who holds each lease and the key of each offset row; the consumers of each
subscription and when each was last seen.

Revision ID: 0015_ordered_consumption
Revises: 0014_forgotten_transactions
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0015_ordered_consumption"
down_revision = "0014_forgotten_transactions"
branch_labels = None
depends_on = None

_KEYED = "ordering_key IS NOT NULL"
# the view of 0012_dead_letter_message_ids, with the ordering key (``txmsg ingest``'s column)
_VIEW = """
CREATE VIEW committed_messages AS
SELECT ml.topic AS topic,
       ml.queue_offset AS queue_offset,
       COALESCE(ml.message_id, hm.message_id) AS message_id,
       t.transaction_id AS transaction_id,
       t.producer_group AS producer_group,
       hm.keys AS keys,
       hm.tag AS tag,{ordering_key}
       COALESCE(ml.properties, hm.properties) AS properties,
       CASE WHEN hm.body_is_text THEN {decode} END AS body,
       hm.body AS body_bytes,
       hm.created_at AS created_at,
       ml.committed_at AS committed_at
FROM message_log ml
JOIN half_message hm ON hm.id = ml.half_message_id
JOIN txn t ON t.id = hm.txn_id
"""


def _create_view(*, ordering_key: bool) -> None:
    decode = ("convert_from(hm.body, 'UTF8')" if op.get_bind().dialect.name == "postgresql"
              else "CAST(hm.body AS TEXT)")
    op.execute(_VIEW.format(decode=decode, ordering_key=(
        "\n       hm.ordering_key AS ordering_key," if ordering_key else "")))


def upgrade() -> None:
    op.execute("DROP VIEW committed_messages")
    op.add_column("half_message", sa.Column("ordering_key", sa.String(256), nullable=True))
    _create_view(ordering_key=True)
    with op.batch_alter_table("subscription") as batch:
        batch.add_column(sa.Column("type", sa.String(16), nullable=False,
                                   server_default="shared"))
        batch.add_column(sa.Column("consumer_timeout_ms", sa.Integer(), nullable=False,
                                   server_default="30000"))
        batch.add_column(sa.Column("tag_filter", sa.Text(), nullable=False,
                                   server_default="*"))
        batch.add_column(sa.Column("active_consumer", sa.String(127), nullable=True))
    op.add_column("subscription_offset", sa.Column("consumer", sa.String(127), nullable=True))
    op.add_column("subscription_offset",
                  sa.Column("ordering_key", sa.String(256), nullable=True))
    op.create_index("ix_subscription_offset_key", "subscription_offset",
                    ["subscription_id", "ordering_key", "queue_offset"],
                    postgresql_where=sa.text(_KEYED), sqlite_where=sa.text(_KEYED))
    op.create_table(
        "subscription_consumer",
        sa.Column("subscription_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=False),
        sa.Column("name", sa.String(127), nullable=False),
        sa.Column("last_seen", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("subscription_id", "name", name="pk_subscription_consumer"),
    )


def downgrade() -> None:
    # SQLite drops a column by recreating the table, which a view on it would stop
    op.execute("DROP VIEW committed_messages")
    op.drop_table("subscription_consumer")
    op.drop_index("ix_subscription_offset_key", table_name="subscription_offset")
    with op.batch_alter_table("subscription_offset") as batch:
        batch.drop_column("ordering_key")
        batch.drop_column("consumer")
    with op.batch_alter_table("subscription") as batch:
        batch.drop_column("active_consumer")
        batch.drop_column("tag_filter")
        batch.drop_column("consumer_timeout_ms")
        batch.drop_column("type")
    with op.batch_alter_table("half_message") as batch:
        batch.drop_column("ordering_key")
    _create_view(ordering_key=False)
