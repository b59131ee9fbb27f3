"""One engine per process, with explicit pool sizes and timeouts; migrations to head."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry, NullPool, QueuePool

from app.config import Settings
from app.errors import DatabaseUnavailable
from app.storage.dialects import dialect_for_url, dialect_of

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"

_KEEPALIVES_INTERVAL_SECONDS = 2
_KEEPALIVES_COUNT = 3
# SQLSTATE 25006: a write on a read-only server (a standby) or in a read-only transaction
_READ_ONLY_SQLSTATE = "25006"
# the execution option that marks an engine whose URL goes through a transaction pooler
POOLING_OPTION = "txmsg_pooling"


def make_engine(settings: Settings, *, pool: bool = True, domain_errors: bool = True) -> Engine:
    """Build the process's engine: SQLite in WAL mode with a busy timeout, or pooled
    PostgreSQL; raising the domain's errors (``raising_unavailable``) unless told not to
    (migrations, whose failures surface as the driver's)."""
    url = make_url(settings.database_url)
    dialect = dialect_for_url(url)
    if dialect.in_process:
        database = url.database
        if database and database != ":memory:" and not url.query.get("uri"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"timeout": settings.sqlite_busy_timeout_ms / 1000,
                          "check_same_thread": False},
            poolclass=(NullPool if not pool else None if database in (None, "", ":memory:")
                       else UnavailableWhenExhausted),
        )
        _configure_sqlite(engine, settings)
        return raising_unavailable(engine) if domain_errors else engine
    url = dialect.with_driver(url)
    # plan_cache_mode: statements prepared by psycopg are planned for their parameters each
    # time. A generic plan, made once while a table was small, keeps its scan of the whole
    # table as the table grows (nothing replans it until an ANALYZE), and commit batches
    # slow down with every transaction stored; planning each batch costs far less.
    options = (f"-c statement_timeout={settings.db_statement_timeout_ms}"
               " -c plan_cache_mode=force_custom_plan")
    kwargs: dict[str, Any] = {}
    pooled = settings.database_pooling == "transaction"
    connect_args = pg_connect_args(settings, "" if pooled else options)
    if pooled:
        # PgBouncer refuses startup options, and a statement prepared on one server
        # connection is unknown on the next: psycopg prepares nothing
        connect_args["prepare_threshold"] = None
        kwargs["execution_options"] = {POOLING_OPTION: "transaction"}
    if pool:
        kwargs.update(
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            pool_timeout=settings.db_pool_timeout_seconds,
            pool_pre_ping=True,
            pool_use_lifo=True,  # a lone client keeps meeting its warm connection
            poolclass=UnavailableWhenExhausted,
        )
    else:
        kwargs["poolclass"] = NullPool
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    event.listen(engine, "handle_error", _failed_ping_is_a_disconnect)
    if pooled:
        _settings_with_each_transaction(engine, settings)
    return raising_unavailable(engine) if domain_errors else engine


def make_read_engine(settings: Settings, primary: Engine) -> Engine:
    """The engine of reads that may lag (a hot standby: TXMSG_READ_DATABASE_URL), else
    ``primary`` itself.

    A standby replays the primary's commits in their order, and a topic's offsets are
    given out in commit order (one commit at a time per topic), so what a snapshot of the
    standby shows of a topic is a prefix of its log: dense, like the primary's."""
    if not settings.read_database_url:
        return primary
    return make_engine(replica_settings(settings))


REPLICA_TIMEOUT_SECONDS = 1


def replica_settings(settings: Settings) -> Settings:
    """The read settings with the replica's timeouts: a replica that does not connect or
    answer a statement within ``REPLICA_TIMEOUT_SECONDS`` counts as unreachable (its reads
    go to the primary: ``app.storage.replica``), and a free pooled connection is waited
    for no longer."""
    return read_settings(settings).model_copy(update={
        "db_connect_timeout_seconds": REPLICA_TIMEOUT_SECONDS,
        "db_statement_timeout_ms": REPLICA_TIMEOUT_SECONDS * 1000,
        "db_pool_timeout_seconds": min(settings.db_pool_timeout_seconds,
                                       REPLICA_TIMEOUT_SECONDS)})


def read_settings(settings: Settings) -> Settings:
    """These settings with the read URL as the database (unchanged without one)."""
    if not settings.read_database_url:
        return settings
    return settings.model_copy(update={"database_url": settings.read_database_url})


def pg_connect_args(settings: Settings, options: str) -> dict[str, object]:
    """libpq parameters that bound every wait on the network: the connection attempt, data
    the server does not acknowledge (tcp_user_timeout) and an answer that never comes on a
    silent connection (keepalives: a partition is noticed, not waited out)."""
    args: dict[str, object] = {
        "connect_timeout": settings.db_connect_timeout_seconds,
        "keepalives": 1,
        "keepalives_idle": settings.db_keepalives_idle_seconds,
        "keepalives_interval": _KEEPALIVES_INTERVAL_SECONDS,
        "keepalives_count": _KEEPALIVES_COUNT,
        "tcp_user_timeout": settings.db_tcp_user_timeout_ms,
    }
    if options:
        args["options"] = options
    return args


def transaction_pooled(engine: Engine | Connection) -> bool:
    """Whether this engine's connections go through a transaction pooler
    (``TXMSG_DATABASE_POOLING=transaction``): each transaction may run on another server
    session, so nothing may rely on a session's state, nor on a statement outside a
    transaction having the settings."""
    return engine.get_execution_options().get(POOLING_OPTION) == "transaction"


def _settings_with_each_transaction(engine: Engine, settings: Settings) -> None:
    """Behind a transaction pooler, what the startup options set for a session is set for
    each transaction instead (its first statement; gone at its end, as the pooler wants)."""
    statement = f"SET LOCAL statement_timeout = {int(settings.db_statement_timeout_ms)}"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            conn.exec_driver_sql(statement)


def raising_unavailable(engine: Engine) -> Engine:
    """The engine's edge, where database errors become the domain's: every failure that
    ``unavailable`` names (a lost or refused connection, a statement timeout, a read-only
    server; and, through ``UnavailableWhenExhausted``, no pooled connection free in time)
    is raised as ``DatabaseUnavailable``, so
    the code above the engine never sees the driver's exceptions for them. A lost
    connection is still invalidated by SQLAlchemy as before; the error says so in
    ``connection_invalidated``. Other errors (a constraint, a bug) pass unchanged."""
    event.listen(engine, "handle_error", _raise_unavailable)
    return engine


def _raise_unavailable(ctx: ExceptionContext) -> None:
    if ctx.is_pre_ping:  # the pool reconnects by itself
        return
    error = unavailable(ctx.sqlalchemy_exception or ctx.original_exception)
    if error is not None:
        error.connection_invalidated = ctx.is_disconnect
        raise error


class UnavailableWhenExhausted(QueuePool):
    """A queue pool whose checkout timeout (``db_pool_timeout_seconds``: every connection
    busy) is ``DatabaseUnavailable``, like every other way the database fails to answer.

    It logs as SQLAlchemy's own pools do (under ``sqlalchemy.pool``, WARNING unless asked):
    named after this module, its "Pool disposed ... Current Overflow: -5" lines at each
    shutdown were INFO lines of txmsg's."""

    _sqla_logger_namespace = "sqlalchemy.pool.impl.QueuePool"

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return super()._do_get()
        except sa_exc.TimeoutError as exc:
            error = unavailable(exc)
            assert error is not None
            raise error from exc


def _failed_ping_is_a_disconnect(ctx: ExceptionContext) -> None:
    # psycopg's do_ping can mask the lost connection with "can't change 'autocommit' now"
    if ctx.is_pre_ping:
        ctx.is_disconnect = True


def _configure_sqlite(engine: Engine, settings: Settings) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # SQLAlchemy, not pysqlite, issues BEGIN (so writers can take BEGIN IMMEDIATE);
        # synchronous=FULL: an answered commit survives power loss, not just a crash
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={settings.sqlite_busy_timeout_ms}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def write_connection(engine: Engine) -> Connection:
    """A connection whose transactions are read-write; on SQLite each takes the write lock
    up front (BEGIN IMMEDIATE: no deadlock upgrading a read lock)."""
    conn = engine.connect()
    if dialect_of(conn).one_writer:
        conn = conn.execution_options(sqlite_begin="IMMEDIATE")
    return conn


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A read-write transaction on a pooled connection (see ``write_connection``)."""
    with write_connection(engine) as conn, conn.begin():
        yield conn


@contextmanager
def each_statement_alone(engine: Engine) -> Iterator[Connection]:
    """A connection on which each statement is a transaction of its own (PostgreSQL), for
    work whose statements need not be one transaction: no BEGIN nor COMMIT round trips.
    On SQLite, and behind a transaction pooler, one write transaction (see
    ``write_transaction``)."""
    if not dialect_of(engine).statements_alone or transaction_pooled(engine):
        with write_transaction(engine) as conn:
            yield conn
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        yield conn


def read_connection(engine: Engine) -> Connection:
    """A connection for reads that need no snapshot across their statements: on
    PostgreSQL each statement sees the latest commits and runs without BEGIN nor
    ROLLBACK (two round trips fewer per read); on SQLite, and behind a transaction pooler
    (where a statement gets its settings from its transaction), a plain connection."""
    conn = engine.connect()
    if dialect_of(engine).statements_alone and not transaction_pooled(engine):
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
    return conn


def commit_with_flush(conn: Connection) -> None:
    """This transaction's commit waits for its flush (undoes ``commit_without_flush``)."""
    if dialect_of(conn).relaxed_commits:
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO on")


def commit_without_flush(conn: Connection) -> None:
    """Let this transaction's commit return before its WAL reaches the disk (PostgreSQL's
    ``synchronous_commit`` for this transaction only). Only for transactions whose loss in
    a crash is harmless: the database still applies them whole or not at all, in order,
    and the next transaction that does wait for its flush makes them durable too."""
    if dialect_of(conn).relaxed_commits:
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO off")


def unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """The 503 a database failure answers with, or None if ``exc`` is not one (a bug).

    The one list of what counts as the database being unavailable: unreachable or lost
    (OperationalError, InterfaceError, an invalidated connection), too slow (a statement
    timeout is an OperationalError; the pool's checkout timeout), or refusing writes (a
    standby or a read-only database; SQLite's "readonly database" is an OperationalError).
    """
    if isinstance(exc, DatabaseUnavailable):
        return exc
    if isinstance(exc, sa_exc.TimeoutError):
        return DatabaseUnavailable(f"no database connection was free in time: {exc}")
    if not isinstance(exc, sa_exc.DBAPIError):
        return None
    cause = type(exc.orig).__name__
    if getattr(exc.orig, "sqlstate", None) == _READ_ONLY_SQLSTATE:
        return DatabaseUnavailable(f"the database refuses writes (read-only): {cause}")
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)) \
            or exc.connection_invalidated:
        return DatabaseUnavailable(f"database unavailable: {cause}")
    return None


def refuses_writes(conn: Connection) -> bool:
    """Whether the database would refuse a write now (PostgreSQL: a standby, or read-only
    by default); one cheap query. SQLite cannot tell without writing: False."""
    if not dialect_of(conn).tells_read_only:
        return False
    return bool(conn.exec_driver_sql(
        "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool"
    ).scalar())


def alembic_config(database_url: str, pooling: str = "session") -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = database_url
    cfg.attributes["database_pooling"] = pooling
    return cfg


def upgrade_to_head(settings: Settings) -> None:
    """Bring the schema to head; safe to repeat and to run from several processes at once.

    Behind a transaction pooler, on the session URL when there is one (a migration's
    session lock and settings want a session); else through the pooler, all revisions in
    one transaction under a transaction-scoped lock (``migrations/env.py``)."""
    from alembic import command

    if settings.database_pooling == "transaction" and settings.session_database_url:
        cfg = alembic_config(settings.session_database_url)
    else:
        cfg = alembic_config(settings.database_url, settings.database_pooling)
    command.upgrade(cfg, "head")


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()
