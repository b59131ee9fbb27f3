"""What differs per database, behind one object per database: ``POSTGRESQL`` and
``SQLITE``, chosen once from an engine, a connection or a URL (``dialect_of``,
``dialect_for_url``), the way SQLAlchemy's dialects and DTM's ``DBSpecial`` keep what
differs out of their callers. Callers ask for a capability, named for what it does, never
for a database's name: no module of app, checker or spark_outbox but this one names a
database (tests/unit/storage/test_dialects.py holds them to it).

Two kinds of difference live here:

- small pieces of SQL and settings that differ (an INSERT that takes ``ON CONFLICT``, a
  list as one array parameter, a row lock, ``GREATEST``): methods, each database's own;
- statements that a table family's module holds in two forms, next to each other (a batch
  of sends as one statement on PostgreSQL, as a statement per table on SQLite): flags
  that say which form the database runs. The flags say why, so that a reader of one
  family learns what the database can do, not which one it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Select,
    Table,
    any_,
    func,
    literal,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.engine import Dialect as SADialect


class Dialect:
    """The capabilities every database answers."""

    # SQLAlchemy's name of the database: how it is found, never asked by a caller
    backend: ClassVar[str]

    # The database is a file this process opens (SQLite): its engine is set up so (WAL,
    # busy timeout, BEGIN issued by SQLAlchemy), and a statement costs no round trip.
    in_process: ClassVar[bool]
    # Writers take turns on one lock of the whole database (SQLite): a write transaction
    # takes it up front (BEGIN IMMEDIATE: no deadlock upgrading a read lock), and a batch
    # job rests between its batches so that the writers it keeps waiting get their turn.
    one_writer: ClassVar[bool]
    # Each statement can be a transaction of its own (autocommit), without BEGIN nor
    # COMMIT round trips; a read then sees the latest commits at each statement.
    statements_alone: ClassVar[bool]
    # A transaction's commit can return before its flush (``synchronous_commit``).
    relaxed_commits: ClassVar[bool]
    # Whether it would refuse a write can be asked without writing (a standby).
    tells_read_only: ClassVar[bool]
    # Processes can tell one another of commits (LISTEN/NOTIFY); SQLite's writers are
    # one process.
    notifications: ClassVar[bool]
    # Deleted rows' space is reused only once the table is vacuumed, which its own
    # autovacuum may not do.
    vacuums: ClassVar[bool]
    # Datetimes are stored without their time zone (SQLite stores naive text).
    naive_datetimes: ClassVar[bool]
    # Access is granted to roles (``txmsg migrate --grant-to``); SQLite's is its file's.
    roles: ClassVar[bool]
    # A list of values travels as one array parameter (``= ANY(:ids)``, ``unnest``): one
    # statement text whatever its length, parsed and planned once.
    arrays: ClassVar[bool]
    # Rows lock one by one (FOR UPDATE, SKIP LOCKED, FOR KEY SHARE); without, writers
    # exclude one another by taking turns (``one_writer``).
    row_locks: ClassVar[bool]
    # A batch of sends is one statement (its rows one JSON parameter, data-modifying
    # CTEs): atomic without BEGIN (``app.storage.sends``).
    one_statement_sends: ClassVar[bool]
    # A finish batch locks its transactions with their messages as one JSON array per
    # transaction, and writes what it decided in one statement (``app.storage.finishes``).
    one_statement_finishes: ClassVar[bool]
    # An ack by subscription name is one statement, the lookup and the delete together
    # (``app.storage.subscription_acks``).
    one_statement_acks: ClassVar[bool]
    # A receive's common case is one statement that also moves the ack cursor
    # (``app.storage.subscription_leases.first_deliveries``).
    one_statement_first_deliveries: ClassVar[bool]
    # An ack that acknowledged the offset at the stored cursor moves the cursor right
    # after, in a second write transaction (``app.domain.subscription_acks``): where a
    # statement costs no round trip. Elsewhere the next receive's one statement moves it,
    # and a second statement for one ack in a few would cost more than the lag it saves.
    acks_move_the_cursor: ClassVar[bool]

    def insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that takes ``ON CONFLICT`` clauses."""
        raise NotImplementedError

    def among(self, col: Any, ids: Sequence[int]) -> Any:
        """``col`` is one of ``ids``."""
        return col.in_(ids)

    def lock_rows(self, stmt: Select[Any], of: Any = None) -> Select[Any]:
        """``stmt`` locking the rows it reads (of ``of`` only, unless None)."""
        return stmt

    def lock_rows_unless_busy(self, stmt: Select[Any]) -> Select[Any]:
        """``stmt`` locking the rows it reads, skipping those another transaction holds."""
        return stmt

    def greatest(self, *values: Any) -> Any:
        """The greatest of ``values`` (SQL)."""
        raise NotImplementedError

    def take_turns_on(self, conn: Connection, scope: int, names: Sequence[int]) -> None:
        """Lock these names (32-bit integers) of ``scope`` until the transaction ends, in
        the order given: writers that decide from rows another one may be changing take
        turns on what they decide about. Where writers take turns on the whole database
        (``one_writer``) there is nothing to do."""

    def with_driver(self, url: URL) -> URL:
        """The URL with the driver txmsg uses for this database."""
        return url

    def missing_file(self, url: URL) -> Path | None:
        """The absolute path of the database file ``url`` names when there is none (an
        admin command must not create an empty store); None for a database that is not a
        file of this process's."""
        return None


_ADVISORY_LOCKS = text(
    "SELECT count(pg_advisory_xact_lock(CAST(:scope AS integer), n))"
    " FROM unnest(CAST(:names AS integer[])) AS n")


class PostgreSQL(Dialect):
    backend = "postgresql"
    in_process = False
    roles = True
    one_writer = False
    statements_alone = True
    relaxed_commits = True
    tells_read_only = True
    notifications = True
    vacuums = True
    naive_datetimes = False
    arrays = True
    row_locks = True
    one_statement_sends = True
    one_statement_finishes = True
    one_statement_acks = True
    one_statement_first_deliveries = True
    acks_move_the_cursor = False

    def insert(self, table: Table) -> postgresql.Insert:
        return postgresql.insert(table)

    def among(self, col: Any, ids: Sequence[int]) -> Any:
        """``col = ANY(:array)``: one parameter, so one statement text whatever the number of
        ids (planned and prepared once, not rendered anew)."""
        return col == any_(literal(list(ids), postgresql.ARRAY(BigInteger)))

    def lock_rows(self, stmt: Select[Any], of: Any = None) -> Select[Any]:
        return stmt.with_for_update() if of is None else stmt.with_for_update(of=of)

    def lock_rows_unless_busy(self, stmt: Select[Any]) -> Select[Any]:
        return stmt.with_for_update(skip_locked=True)

    def greatest(self, *values: Any) -> Any:
        return func.greatest(*values)

    def take_turns_on(self, conn: Connection, scope: int, names: Sequence[int]) -> None:
        """Advisory transaction locks, taken one by one in the array's order (a function
        scan evaluates row by row), so two writers that sort their names never deadlock."""
        if names:
            conn.execute(_ADVISORY_LOCKS, {"scope": scope % 2**31, "names": list(names)})

    def with_driver(self, url: URL) -> URL:
        """psycopg 3 unless the URL names another driver than psycopg2's default."""
        if url.get_driver_name() in ("", "psycopg2"):
            return url.set(drivername="postgresql+psycopg")
        return url


class SQLite(Dialect):
    backend = "sqlite"

    def missing_file(self, url: URL) -> Path | None:
        """In memory or a ``file:`` URI: none to miss."""
        database = url.database
        if not database or database == ":memory:" or url.query.get("uri"):
            return None
        path = Path(database).absolute()
        return None if path.exists() else path
    in_process = True
    roles = False
    one_writer = True
    statements_alone = False
    relaxed_commits = False
    tells_read_only = False
    notifications = False
    vacuums = False
    naive_datetimes = True
    arrays = False
    row_locks = False
    one_statement_sends = False
    one_statement_finishes = False
    one_statement_acks = False
    one_statement_first_deliveries = False
    acks_move_the_cursor = True

    def insert(self, table: Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def greatest(self, *values: Any) -> Any:
        return func.max(*values)  # SQLite's max of several values is the greatest



POSTGRESQL = PostgreSQL()
SQLITE = SQLite()
_BY_BACKEND: dict[str, Dialect] = {d.backend: d for d in (POSTGRESQL, SQLITE)}


def dialect_of(bind: Connection | Engine) -> Dialect:
    """The dialect of an engine's or a connection's database."""
    return of_sqlalchemy(bind.dialect)


def of_sqlalchemy(dialect: SADialect) -> Dialect:
    """The dialect of SQLAlchemy's dialect of a database."""
    return _BY_BACKEND[dialect.name]


class UnknownDatabase(ValueError):
    """A database URL of a database txmsg does not store in."""

    def __init__(self, backend: str) -> None:
        super().__init__(f"txmsg stores its data in PostgreSQL or SQLite, not {backend!r}")
        self.backend = backend


def dialect_for_url(url: URL) -> Dialect:
    """The dialect of a database URL (``UnknownDatabase`` for another database)."""
    backend = url.get_backend_name()
    found = _BY_BACKEND.get(backend)
    if found is None:
        raise UnknownDatabase(backend)
    return found
