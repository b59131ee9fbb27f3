"""``Barrier`` on a SQLAlchemy ``AsyncEngine`` (asyncpg or psycopg, aiosqlite, aiomysql or
asyncmy): the same table and statements, awaited."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import MetaData, Table
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from txmsg_client import _barrier_sql as sql
from txmsg_client.barrier import DEFAULT_KEEP, DEFAULT_WAIT_SECONDS, _taken
from txmsg_client.resolution import Resolution

log = logging.getLogger(__name__)


class AsyncBarrier:
    """The barrier table in the producer's database, on an ``AsyncEngine``; see
    ``txmsg_client.barrier.Barrier``. ``checker.check`` is a coroutine."""

    def __init__(self, engine: AsyncEngine, *, metadata: MetaData | None = None,
                 table_name: str = sql.TABLE_NAME,
                 wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        sql.check_dialect(engine.dialect)
        self.engine = engine
        self.table: Table = sql.barrier_table(metadata, table_name)
        self.wait_seconds = wait_seconds
        self.checker = AsyncBarrierChecker(self)

    async def create_table(self) -> None:
        """Create the table and its index unless they exist (see ``Barrier.create_table``)."""
        async with self.engine.begin() as connection:
            await connection.run_sync(self.table.create, checkfirst=True)
            if sql.is_mysql(self.engine.dialect) and sql.keys_need_binary(
                    await connection.execute(sql.key_collations(self.table))):
                await connection.execute(sql.binary_keys(self.table))

    @asynccontextmanager
    async def begin(self, group: str, transaction_id: str) -> AsyncIterator[AsyncConnection]:
        """A database transaction whose first statement writes the barrier row."""
        async with self.engine.begin() as connection:
            try:
                await connection.execute(sql.insert_barrier(self.table, group, transaction_id))
            except IntegrityError as exc:
                async with self.engine.connect() as other:  # this one's is aborted
                    reason = (await other.execute(
                        sql.select_reason(self.table, group, transaction_id))).scalar()
                raise _taken(reason, transaction_id) from exc
            yield connection

    async def resolve(self, group: str, transaction_id: str) -> Resolution:
        """COMMIT if the local transaction committed; else ROLLBACK, for good."""
        dialect = self.engine.dialect
        async with self.engine.connect() as connection:
            busy_ms = 0
            if dialect.name == "sqlite":
                busy_ms = (await connection.execute(sql.SQLITE_BUSY_TIMEOUT)).scalar_one()
                await connection.commit()
            try:
                async with connection.begin():
                    await connection.execute(sql.wait_bound(dialect, self.wait_seconds))
                    await connection.execute(sql.insert_rollback_if_absent(
                        dialect, self.table, group, transaction_id))
                    reason = (await connection.execute(
                        sql.select_reason(self.table, group, transaction_id))).scalar_one()
            except DBAPIError as exc:
                if not sql.lock_timed_out(exc):
                    raise
                log.warning("transaction %s: its local transaction is still open after "
                            "%.1f s, UNKNOWN for now", transaction_id, self.wait_seconds)
                return Resolution.UNKNOWN
            finally:
                reset = sql.wait_unbound(dialect, busy_ms)
                if reset is not None and not connection.invalidated:
                    await connection.execute(reset)
                    await connection.commit()
        return Resolution.COMMIT if reason == sql.COMMIT else Resolution.ROLLBACK

    async def cleanup(self, older_than: timedelta = DEFAULT_KEEP) -> int:
        """Delete the rows older than ``older_than`` (see ``Barrier.cleanup``); how many."""
        async with self.engine.begin() as connection:
            done = await connection.execute(
                sql.delete_older_than(self.table, sql.now() - older_than))
        return int(done.rowcount)


class AsyncBarrierChecker:
    """An ``AsyncTransactionChecker`` answering from the barrier (``AsyncBarrier.checker``)."""

    def __init__(self, barrier: AsyncBarrier) -> None:
        self.barrier = barrier

    async def check(self, transaction: dict[str, Any]) -> Resolution:
        return await self.barrier.resolve(str(transaction["producer_group"]),
                                          str(transaction["transaction_id"]))
