"""The benchmark's own PostgreSQL database: created, migrated with ``txmsg migrate``, dropped."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def admin_url() -> str:
    return os.environ.get("TXMSG_BENCH_PG_URL", DEFAULT_ADMIN_URL)


def libpq_url(url: str) -> str:
    """psycopg takes plain libpq URLs; SQLAlchemy ones carry a +driver."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def sqlalchemy_url(url: str) -> str:
    return libpq_url(url).replace("postgresql://", "postgresql+psycopg://", 1)


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def txmsg_command() -> list[str]:
    script = Path(sys.executable).parent / "txmsg"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def clean_env(**settings: str) -> dict[str, str]:
    """This environment without TXMSG_* settings (the benchmark sets its own), plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    env.update(settings)
    return env


@contextmanager
def bench_database(admin: str | None = None, migrate: bool = True) -> Iterator[str]:
    """A fresh database at schema head (empty without ``migrate``); its SQLAlchemy URL.
    Dropped on exit."""
    admin = libpq_url(admin or admin_url())
    name = f"txmsg_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = sqlalchemy_url(admin.rsplit("/", 1)[0] + "/" + name)
    try:
        if not migrate:
            yield url
            return
        done = subprocess.run([*txmsg_command(), "migrate"], check=False, capture_output=True,
                              env=clean_env(TXMSG_DATABASE_URL=url), text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"txmsg migrate failed: {done.stderr}")
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))


def truncate_all(url: str) -> None:
    """Empty the txmsg tables (between phases), keeping the schema."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename <> 'alembic_version'")]
        conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
            sql.SQL(", ").join(sql.Identifier(t) for t in tables)))
        conn.execute("VACUUM ANALYZE")
