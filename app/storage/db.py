"""One engine per process, with explicit pool sizes and timeouts; migrations to head."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.config import Settings
from app.errors import DatabaseUnavailable

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"

P = ParamSpec("P")
R = TypeVar("R")


def make_engine(settings: Settings, *, pool: bool = True) -> Engine:
    """Build the process's engine: SQLite in WAL mode with a busy timeout, or pooled PostgreSQL."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        database = url.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"timeout": settings.sqlite_busy_timeout_ms / 1000,
                          "check_same_thread": False},
            poolclass=None if pool else NullPool,
        )
        _configure_sqlite(engine, settings)
        return engine
    if url.get_backend_name() == "postgresql" and url.get_driver_name() in ("", "psycopg2"):
        url = url.set(drivername="postgresql+psycopg")
    # plan_cache_mode: statements prepared by psycopg are planned for their parameters each
    # time. A generic plan, made once while a table was small, keeps its scan of the whole
    # table as the table grows (nothing replans it until an ANALYZE), and commit batches
    # slow down with every transaction stored; planning each batch costs far less.
    options = (f"-c statement_timeout={settings.db_statement_timeout_ms}"
               " -c plan_cache_mode=force_custom_plan")
    kwargs: dict = {}
    if pool:
        kwargs.update(
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            pool_timeout=settings.db_pool_timeout_seconds,
            pool_pre_ping=True,
        )
    else:
        kwargs["poolclass"] = NullPool
    return create_engine(
        url,
        connect_args={"connect_timeout": settings.db_connect_timeout_seconds, "options": options},
        **kwargs,
    )


def _configure_sqlite(engine: Engine, settings: Settings) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
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
    if conn.dialect.name == "sqlite":
        conn = conn.execution_options(sqlite_begin="IMMEDIATE")
    return conn


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A read-write transaction on a pooled connection (see ``write_connection``)."""
    with write_connection(engine) as conn, conn.begin():
        yield conn


def wraps_db_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a lost or unreachable database into the domain's DatabaseUnavailable (503)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
            raise DatabaseUnavailable(f"database unavailable: {type(exc.orig or exc).__name__}") from exc

    return wrapper


def alembic_config(database_url: str):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade_to_head(settings: Settings) -> None:
    """Bring the schema to head; safe to repeat and to run from several processes at once."""
    from alembic import command

    command.upgrade(alembic_config(settings.database_url), "head")


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()
