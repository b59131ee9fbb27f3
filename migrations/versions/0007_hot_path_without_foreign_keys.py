"""No foreign keys among the transaction tables: half_message, op_log and check_log to txn,
message_log to half_message. Their indexes stay (retention's deletes and the reads use them).

The storage layer is the only writer of these tables and keeps them consistent itself
(see ``app.storage.schema``). The constraints cost one trigger query per row: per parent
row retention deletes (3.5 times slower emptying expired transactions) and per child row
inserted on the send and commit paths. ``subscription_offset``'s foreign key (a small table) stays.

On SQLite dropping a constraint recreates the table (batch mode), and SQLite refuses to
rename the new table while a view names the dropped one: the views are dropped for the
while and created again as they were.

Revision ID: 0007_hot_path_no_foreign_keys
Revises: 0006_check_duration
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import op
from sqlalchemy import text

# shorter than the file name: alembic_version.version_num is VARCHAR(32)
revision = "0007_hot_path_no_foreign_keys"
down_revision = "0006_check_duration"
branch_labels = None
depends_on = None

# (table, column, referred table). On SQLite a table is recreated by dropping the old one,
# which no constraint may refer to then: the upgrade takes message_log's first, the
# downgrade restores it last.
FOREIGN_KEYS = (
    ("half_message", "txn_id", "txn"),
    ("op_log", "txn_id", "txn"),
    ("check_log", "txn_id", "txn"),
    ("message_log", "half_message_id", "half_message"),
)
# names SQLite's reflection gives a constraint that was created without one
NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def _name(table: str, column: str, referred: str) -> str:
    return f"fk_{table}_{column}_{referred}"


@contextmanager
def _views_set_aside() -> Iterator[None]:
    """On SQLite, the views dropped while the block recreates tables, then created again."""
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        yield
        return
    views = conn.execute(text(
        "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name")).all()
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    yield
    for _, sql in views:
        op.execute(sql)


def upgrade() -> None:
    with _views_set_aside():
        for table, column, referred in reversed(FOREIGN_KEYS):
            with op.batch_alter_table(table, naming_convention=NAMING) as batch:
                batch.drop_constraint(_name(table, column, referred), type_="foreignkey")


def downgrade() -> None:
    with _views_set_aside():
        for table, column, referred in FOREIGN_KEYS:
            with op.batch_alter_table(table, naming_convention=NAMING) as batch:
                batch.create_foreign_key(_name(table, column, referred), referred,
                                         [column], ["id"])
