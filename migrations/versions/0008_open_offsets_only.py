"""A subscription keeps rows only for the offsets it has not acknowledged: an ack deletes
its row instead of marking it, and ``subscription_offset`` loses ``acked`` and its
foreign key to ``subscription``.

Below a subscription's read offset, an offset without a row is acknowledged. The upgrade
deletes the rows marked acknowledged; the downgrade gives every offset in
``[ack_cursor, read_offset)`` without a row one marked acknowledged, as the earlier
revisions expect.

Revision ID: 0008_open_offsets_only
Revises: 0007_hot_path_no_foreign_keys
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_open_offsets_only"
down_revision = "0007_hot_path_no_foreign_keys"
branch_labels = None
depends_on = None

FOREIGN_KEY = "fk_subscription_offset_subscription_id_subscription"

_ACKED_ROWS_PG = """
INSERT INTO subscription_offset (subscription_id, queue_offset, acked, deliveries)
SELECT s.id, g, true, 1
FROM subscription s, generate_series(s.ack_cursor, s.read_offset - 1) AS g
WHERE NOT EXISTS (SELECT 1 FROM subscription_offset o
                  WHERE o.subscription_id = s.id AND o.queue_offset = g)
"""

_ACKED_ROWS_SQLITE = """
WITH RECURSIVE span(sid, o, e) AS (
    SELECT id, ack_cursor, read_offset FROM subscription WHERE ack_cursor < read_offset
    UNION ALL
    SELECT sid, o + 1, e FROM span WHERE o + 1 < e
)
INSERT INTO subscription_offset (subscription_id, queue_offset, acked, deliveries)
SELECT sid, o, 1, 1 FROM span
WHERE NOT EXISTS (SELECT 1 FROM subscription_offset x
                  WHERE x.subscription_id = span.sid AND x.queue_offset = span.o)
"""


def upgrade() -> None:
    op.execute("DELETE FROM subscription_offset WHERE acked")
    with op.batch_alter_table("subscription_offset") as batch:
        batch.drop_constraint(FOREIGN_KEY, type_="foreignkey")
        batch.drop_column("acked")


def downgrade() -> None:
    with op.batch_alter_table("subscription_offset") as batch:
        batch.add_column(sa.Column("acked", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.create_foreign_key(FOREIGN_KEY, "subscription", ["subscription_id"], ["id"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.execute(_ACKED_ROWS_SQLITE if sqlite else _ACKED_ROWS_PG)
    with op.batch_alter_table("subscription_offset") as batch:
        batch.alter_column("acked", server_default=None)
