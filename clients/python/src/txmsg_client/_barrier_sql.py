"""The barrier's table and statements, for ``Barrier`` and ``AsyncBarrier`` alike.

DTM's msg barrier (``dtmcli/barrier.go``): one row per transaction, keyed by the group and
the transaction id. The local transaction's first statement inserts it with reason
``commit``; the check inserts it with reason ``rollback`` if absent, then reads which one
is there. The unique key decides: whichever insert comes first wins, and an insert that
meets the other's uncommitted row waits for that transaction to end.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Executable,
    Index,
    MetaData,
    String,
    Table,
    delete,
    insert,
    select,
    text,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

TABLE_NAME = "txmsg_barrier"
COMMIT = "commit"
ROLLBACK = "rollback"
DIALECTS = ("postgresql", "sqlite", "mysql", "mariadb")
# MySQL's and MariaDB's default collations compare without case or accents: "ORDER-x" would
# find the row of "order-x". Keys compare byte for byte (ids hold no spaces, so the
# collation's padding of trailing spaces never applies).
MYSQL_KEY_COLLATION = "utf8mb4_bin"
KEY_COLUMNS = {"producer_group": 127, "transaction_id": 128}


def _key(length: int) -> String:
    binary = mysql.VARCHAR(length, charset="utf8mb4", collation=MYSQL_KEY_COLLATION)
    return String(length).with_variant(binary, "mysql", "mariadb")


def barrier_table(metadata: MetaData | None = None, name: str = TABLE_NAME) -> Table:
    """The barrier table; ``metadata``: the producer's own, for Alembic's autogenerate."""
    return Table(
        name, metadata if metadata is not None else MetaData(),
        # names of groups are at most 127 characters, transaction ids at most 128
        *(Column(column, _key(length), primary_key=True)
          for column, length in KEY_COLUMNS.items()),
        Column("reason", String(8), nullable=False),
        Column("created_at", DateTime(), nullable=False),  # UTC, for the cleanup
        Index(f"{name}_created_at", "created_at"),
    )


def now() -> datetime:
    """Naive UTC: the same on every dialect (MySQL's DATETIME keeps no time zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


def is_mysql(dialect: Dialect) -> bool:
    return dialect.name in ("mysql", "mariadb")


def key_collations(table: Table) -> Executable:
    """MySQL: the collations of the key columns of an existing table."""
    return text("SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :table").bindparams(
        table=table.name)


def binary_keys(table: Table) -> Executable:
    """MySQL: the key columns of a table made before keys compared byte for byte, made so."""
    columns = ", ".join(
        f"MODIFY `{column}` VARCHAR({length}) CHARACTER SET utf8mb4 "
        f"COLLATE {MYSQL_KEY_COLLATION} NOT NULL" for column, length in KEY_COLUMNS.items())
    return text(f"ALTER TABLE `{table.name}` {columns}")


def check_dialect(dialect: Dialect) -> None:
    if dialect.name not in DIALECTS:
        raise ValueError(f"the barrier supports {', '.join(DIALECTS)}, not {dialect.name}")


def insert_barrier(table: Table, group: str, transaction_id: str) -> Executable:
    """The local transaction's first statement: fails on a rollback marker already there."""
    return insert(table).values(producer_group=group, transaction_id=transaction_id,
                                reason=COMMIT, created_at=now())


def insert_rollback_if_absent(dialect: Dialect, table: Table, group: str,
                              transaction_id: str) -> Executable:
    """The check's rollback marker, written only if no row has the key."""
    row = {"producer_group": group, "transaction_id": transaction_id, "reason": ROLLBACK,
           "created_at": now()}
    if dialect.name == "postgresql":
        return postgresql.insert(table).values(row).on_conflict_do_nothing()
    if dialect.name == "sqlite":
        return sqlite.insert(table).values(row).on_conflict_do_nothing()
    return mysql.insert(table).values(row).prefix_with("IGNORE")


def select_reason(table: Table, group: str, transaction_id: str) -> Executable:
    return select(table.c.reason).where(table.c.producer_group == group,
                                        table.c.transaction_id == transaction_id)


def delete_older_than(table: Table, before: datetime) -> Executable:
    return delete(table).where(table.c.created_at < before)


def wait_bound(dialect: Dialect, seconds: float) -> Executable:
    """How long the check's insert may wait for an open local transaction, this transaction
    (PostgreSQL), this session (MySQL, whole seconds, reset by ``wait_unbound``) or this
    connection (SQLite's busy timeout, also reset)."""
    ms = max(1, int(seconds * 1000))
    if dialect.name == "postgresql":
        return text(f"SET LOCAL lock_timeout = {ms}")
    if is_mysql(dialect):
        return text(f"SET SESSION innodb_lock_wait_timeout = {max(1, round(seconds))}")
    return text(f"PRAGMA busy_timeout = {ms}")


def wait_unbound(dialect: Dialect, sqlite_busy_ms: int) -> Executable | None:
    """The statement that gives the connection back its own wait (None: nothing to do)."""
    if is_mysql(dialect):
        return text("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    if dialect.name == "sqlite":
        return text(f"PRAGMA busy_timeout = {int(sqlite_busy_ms)}")
    return None


SQLITE_BUSY_TIMEOUT = text("PRAGMA busy_timeout")


def lock_timed_out(exc: DBAPIError) -> bool:
    """The database answered that the check's insert waited too long for a lock."""
    orig: Any = exc.orig
    if getattr(orig, "sqlstate", None) == "55P03" or getattr(orig, "pgcode", None) == "55P03":
        return True  # PostgreSQL lock_not_available
    args = getattr(orig, "args", ())
    if args and args[0] == 1205:  # MySQL ER_LOCK_WAIT_TIMEOUT
        return True
    return "database is locked" in str(orig)  # SQLite SQLITE_BUSY


def keys_need_binary(collations: Any) -> bool:
    """Whether rows of ``key_collations`` show a key column that does not compare bytes."""
    return any(column in KEY_COLUMNS and collation != MYSQL_KEY_COLLATION
               for column, collation in collations)
