"""The barrier: answering the service's checks from the producer's own database.

Needs SQLAlchemy, the ``[barrier]`` extra: ``pip install 'txmsg-client[barrier]'``.

``Producer.local_transaction(barrier, messages)`` runs the producer's work in a database
transaction whose first statement inserts the transaction's barrier row; ``barrier.checker``
answers a check by inserting a rollback marker under the same key unless a row is there,
then reading which row it is (DTM's msg barrier, ``dtmcli/barrier.go``). The local
transaction committed: its row is there, COMMIT. It rolled back, or never began: the
marker is, ROLLBACK, and a local transaction beginning later fails on its first
statement. It is still open: the marker's insert waits on the key until it ends (at most
``wait_seconds``: keep it below the group's ``check_timeout_ms``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

try:
    from sqlalchemy import Connection, Engine, MetaData, Table
    from sqlalchemy.exc import DBAPIError, IntegrityError
except ImportError as exc:
    raise ImportError("txmsg_client.barrier needs SQLAlchemy: "
                      "pip install 'txmsg-client[barrier]'") from exc

from txmsg_client import _barrier_sql as sql
from txmsg_client.errors import AlreadyCommitted, NotPrepared
from txmsg_client.resolution import Resolution

log = logging.getLogger(__name__)

DEFAULT_WAIT_SECONDS = 2.0
DEFAULT_KEEP = timedelta(days=7)


class RolledBackByCheck(NotPrepared):
    """The barrier holds a rollback marker for this transaction (a check came before its
    local transaction began, the producer being slower than the service's transaction
    timeout, or an earlier local transaction of this id failed): the local work is not
    done, and the messages are not sent."""

    def __init__(self, transaction_id: str) -> None:
        super().__init__(transaction_id, "ROLLED_BACK",
                         f"transaction {transaction_id} was rolled back by a check")


def _taken(reason: str | None, transaction_id: str) -> Exception:
    """What a barrier row already there means for a local transaction about to begin."""
    if reason == sql.COMMIT:
        return AlreadyCommitted(transaction_id)
    return RolledBackByCheck(transaction_id)


class Barrier:
    """The barrier table ``txmsg_barrier`` in the producer's database (``engine``:
    PostgreSQL, SQLite or MySQL/MariaDB).

    ``table`` is the SQLAlchemy ``Table`` (give ``metadata`` to have it in yours, for
    Alembic); ``create_table()`` creates it if absent. ``wait_seconds``: how long a check
    waits for a local transaction still open before answering UNKNOWN (asked again
    later); below the group's ``check_timeout_ms``.
    """

    def __init__(self, engine: Engine, *, metadata: MetaData | None = None,
                 table_name: str = sql.TABLE_NAME,
                 wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        sql.check_dialect(engine.dialect)
        self.engine = engine
        self.table: Table = sql.barrier_table(metadata, table_name)
        self.wait_seconds = wait_seconds
        self.checker = BarrierChecker(self)

    def create_table(self) -> None:
        """Create the table and its index unless they exist; on MySQL, make the keys of a
        table created by an earlier version compare byte for byte."""
        self.table.create(self.engine, checkfirst=True)
        if sql.is_mysql(self.engine.dialect):
            with self.engine.begin() as connection:
                if sql.keys_need_binary(connection.execute(sql.key_collations(self.table))):
                    connection.execute(sql.binary_keys(self.table))

    @contextmanager
    def begin(self, group: str, transaction_id: str) -> Iterator[Connection]:
        """A database transaction whose first statement writes the barrier row: committed
        when the block ends, rolled back when it raises. ``RolledBackByCheck``: the check
        came first; ``AlreadyCommitted``: this transaction's local work committed before."""
        with self.engine.begin() as connection:
            try:
                connection.execute(sql.insert_barrier(self.table, group, transaction_id))
            except IntegrityError as exc:
                with self.engine.connect() as other:  # this one's transaction is aborted
                    reason = other.execute(
                        sql.select_reason(self.table, group, transaction_id)).scalar()
                raise _taken(reason, transaction_id) from exc
            yield connection

    def resolve(self, group: str, transaction_id: str) -> Resolution:
        """COMMIT if the local transaction committed; else ROLLBACK, for good."""
        dialect = self.engine.dialect
        with self.engine.connect() as connection:
            busy_ms = 0
            if dialect.name == "sqlite":
                busy_ms = connection.execute(sql.SQLITE_BUSY_TIMEOUT).scalar_one()
                connection.commit()
            try:
                with connection.begin():
                    connection.execute(sql.wait_bound(dialect, self.wait_seconds))
                    connection.execute(sql.insert_rollback_if_absent(
                        dialect, self.table, group, transaction_id))
                    reason = connection.execute(
                        sql.select_reason(self.table, group, transaction_id)).scalar_one()
            except DBAPIError as exc:
                if not sql.lock_timed_out(exc):
                    raise
                log.warning("transaction %s: its local transaction is still open after "
                            "%.1f s, UNKNOWN for now", transaction_id, self.wait_seconds)
                return Resolution.UNKNOWN
            finally:
                reset = sql.wait_unbound(dialect, busy_ms)
                if reset is not None and not connection.invalidated:
                    connection.execute(reset)
                    connection.commit()
        return Resolution.COMMIT if reason == sql.COMMIT else Resolution.ROLLBACK

    def cleanup(self, older_than: timedelta = DEFAULT_KEEP) -> int:
        """Delete the rows older than ``older_than``; how many. Keep them longer than a
        transaction can stay unresolved on the service (its checks, and the time an
        operator may take over a DISCARDED one): a check after the row is gone would
        answer ROLLBACK for work that committed."""
        with self.engine.begin() as connection:
            done = connection.execute(sql.delete_older_than(self.table, sql.now() - older_than))
        return int(done.rowcount)


class BarrierChecker:
    """A ``TransactionChecker`` answering from the barrier (``Barrier.checker``)."""

    def __init__(self, barrier: Barrier) -> None:
        self.barrier = barrier

    def check(self, transaction: dict[str, Any]) -> Resolution:
        return self.barrier.resolve(str(transaction["producer_group"]),
                                    str(transaction["transaction_id"]))
