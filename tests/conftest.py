"""Shared fixtures: both stores (SQLite file, real PostgreSQL) migrated with Alembic.

Each store is migrated once per test session; each test then starts from empty tables
(SQLite: a copy of the migrated file; PostgreSQL: TRUNCATE). PostgreSQL databases come
from ``tests/databases.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server
from sqlalchemy import create_engine, text

from app.api.asgi import Api
from app.config import Settings
from app.storage.db import upgrade_to_head
from app.storage.schema import metadata
from app.web import create_app
from tests import front_client
from tests.databases import scratch_pg_database
from tests.front_client import FrontClient

# the checker tests' fixtures (harness, harness_factory), for every test that needs them
pytest_plugins = ["tests.integration.checker_harness"]


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
def settings(request: pytest.FixtureRequest, database_url: str) -> Settings:
    """The test's settings: the defaults, with a module's or a test's
    ``@pytest.mark.settings(name=value, ...)`` over them (the closest mark wins)."""
    marks = reversed(list(request.node.iter_markers("settings")))
    overrides: dict[str, object] = {}
    for mark in marks:
        overrides.update(mark.kwargs)
    return make_settings(database_url, **overrides)


@pytest.fixture
def app(settings: Settings):  # type: ignore[no-untyped-def]
    app = create_app(settings)
    yield app
    app.extensions["txmsg"].close()


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    """The app as ``txmsg serve`` serves it (its ASGI front), in this process."""
    return FrontClient(app)


@pytest.fixture(autouse=True)
def _close_front_clients() -> Iterator[None]:
    yield
    front_client.close_all()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """The app as served, on a real HTTP socket: its ASGI front (``Api``) on Granian,
    embedded in this process on an event loop thread of its own. The app's state stays
    its owner's to close (no lifespan events)."""

    START_SECONDS = 15

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.api = Api(app)
        for _ in range(3):  # a port taken between its choice and the bind: another
            port = free_port()
            self._loop = asyncio.new_event_loop()
            self._server = Server(self.api, address="127.0.0.1", port=port,
                                  interface=Interfaces.ASGINL, http=HTTPModes.http1,
                                  log_enabled=False)
            self._server.workers_kill_timeout = 5
            self.thread = threading.Thread(target=self._run, daemon=True,
                                           name=f"granian-{port}")
            self.thread.start()
            if self._listening(port):
                self.url = f"http://127.0.0.1:{port}"
                return
            self.stop()
        raise RuntimeError("the embedded Granian server did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._server.serve())
        finally:
            self._loop.close()

    def _listening(self, port: int) -> bool:
        deadline = time.monotonic() + self.START_SECONDS
        while time.monotonic() < deadline and self.thread.is_alive():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.02)
        return False

    def stop(self) -> None:
        if self.thread.is_alive():
            self._loop.call_soon_threadsafe(self._server.stop)
            self.thread.join(timeout=10)
        self.api.stop_threads()


@pytest.fixture
def live_server(app) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    server = LiveServer(app)
    yield server
    server.stop()
