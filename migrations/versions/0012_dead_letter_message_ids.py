"""A dead-letter copy is a new message: ``message_log.message_id`` gives it its own id
(NULL for every other log row, which shows its half message's id), and the
``committed_messages`` view shows that id.

Revision ID: 0012_dead_letter_message_ids
Revises: 0011_dashboard_sessions
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_dead_letter_message_ids"
down_revision = "0011_dashboard_sessions"
branch_labels = None
depends_on = None

INDEX = "ix_message_log_message_id"
VIEW = """
CREATE VIEW committed_messages AS
SELECT ml.topic AS topic,
       ml.queue_offset AS queue_offset,
       {message_id} AS message_id,
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


def _create_view(message_id: str) -> None:
    decode = ("convert_from(hm.body, 'UTF8')" if op.get_bind().dialect.name == "postgresql"
              else "CAST(hm.body AS TEXT)")
    op.execute(VIEW.format(message_id=message_id, decode=decode))


def upgrade() -> None:
    op.execute("DROP VIEW committed_messages")
    op.add_column("message_log", sa.Column("message_id", sa.String(32), nullable=True))
    op.create_index(INDEX, "message_log", ["message_id"], unique=True,
                    postgresql_where=sa.text("message_id IS NOT NULL"),
                    sqlite_where=sa.text("message_id IS NOT NULL"))
    _create_view("COALESCE(ml.message_id, hm.message_id)")


def downgrade() -> None:
    # SQLite drops a column by recreating the table, which a view on it would stop
    op.execute("DROP VIEW committed_messages")
    op.drop_index(INDEX, table_name="message_log")
    with op.batch_alter_table("message_log") as batch:
        batch.drop_column("message_id")
    _create_view("hm.message_id")
