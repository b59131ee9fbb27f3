"""Shared fixtures: both stores (SQLite file, real PostgreSQL) migrated with Alembic.

Each store is migrated once per test session; each test then starts from empty tables
(SQLite: a copy of the migrated file; PostgreSQL: TRUNCATE). PostgreSQL databases come
from ``tests/databases.py``.
"""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from werkzeug.serving import make_server

from app.config import Settings
from app.storage.db import upgrade_to_head
from app.storage.schema import metadata
from app.web import create_app
from tests.databases import scratch_pg_database


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A migrated PostgreSQL database for this test session (dropped at the end)."""
    with scratch_pg_database() as url:
        upgrade_to_head(Settings(database_url=url))
        yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "txmsg.db"
    upgrade_to_head(Settings(database_url=f"sqlite:///{path}"))
    return path


def _truncate_pg(url: str) -> None:
    engine = create_engine(url)
    tables = ", ".join(t.name for t in metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database on each store."""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_database")
        _truncate_pg(url)
        return url
    return _sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)


def _sqlite_copy(template: Path, tmp_path: Path) -> str:
    path = tmp_path / "txmsg.db"
    shutil.copy(template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated, empty SQLite file (for SQLite-only tests)."""
    return _sqlite_copy(sqlite_template, tmp_path)


@pytest.fixture
def postgres_url(pg_database: str) -> str:
    """A migrated, empty PostgreSQL database (for PostgreSQL-only tests)."""
    _truncate_pg(pg_database)
    return pg_database


def make_settings(database_url: str, **overrides: object) -> Settings:
    """Settings for a test; /metrics computes its database series at every scrape (tests
    read them right after what they did) unless the test sets a window."""
    overrides.setdefault("metrics_cache_seconds", 0)
    return Settings(database_url=database_url, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def settings(database_url: str) -> Settings:
    return make_settings(database_url)


@pytest.fixture
def app(settings: Settings):  # type: ignore[no-untyped-def]
    app = create_app(settings)
    yield app
    app.extensions["txmsg"].close()


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """The app on a real HTTP socket (threaded werkzeug server) in this process."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=5)


@pytest.fixture
def live_server(app) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    server = LiveServer(app)
    yield server
    server.stop()
