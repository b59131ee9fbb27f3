"""A real ``txmsg serve`` (on a SQLite file) for the tests that talk to the service.

The SDK never imports the server: it is started as a command, the ``txmsg`` next to this
Python (the development venv has both), else the one on PATH; without it these tests
skip (the SDK installed alone).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests


def txmsg_command() -> str | None:
    beside = Path(sys.executable).parent / "txmsg"
    return str(beside) if beside.exists() else shutil.which("txmsg")


@dataclass
class Service:
    url: str
    log: Path


def wait_until(condition: Callable[[], object], timeout: float = 30, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    command = txmsg_command()
    if command is None:
        pytest.skip("needs the txmsg server (pip install the project)")
    where = tmp_path_factory.mktemp("service")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    env["TXMSG_DATABASE_URL"] = f"sqlite:///{where / 'txmsg.db'}"
    log = where / "serve.log"
    proc = subprocess.Popen([command, "serve", "--port", str(port)], env=env, cwd=where,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"txmsg serve exited: {log.read_text()}")
        try:
            return requests.get(f"{url}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(ready, timeout=90, what="txmsg serve to be ready")
        yield Service(url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:  # its workers too, should the main process have left them behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@pytest.fixture
def producer(service: Service) -> Iterator[Any]:
    """A producer group of this test's own on the shared service, registered."""
    from txmsg_client import Producer

    with Producer(service.url, f"g-{uuid.uuid4().hex[:8]}") as made:
        made.register(["http://127.0.0.1:9/check"])
        yield made


@pytest.fixture
def topic() -> str:
    """A topic of this test's own on the shared service."""
    return f"t-{uuid.uuid4().hex[:12]}"


# -- the producer's own database, for the barrier: SQLite, PostgreSQL, MySQL/MariaDB --------

PG_ADMIN_URL = os.environ.get("TXMSG_TEST_PG_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
MYSQL_ADMIN_URL = os.environ.get("TXMSG_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DATABASES = ["sqlite", "postgresql", "mysql"]


def _unreachable(what: str, exc: Exception) -> None:
    if IN_CI and what == "PostgreSQL":
        pytest.fail(f"PostgreSQL unreachable in CI: {exc}")
    pytest.skip(f"{what} unreachable: {exc}")


@contextmanager
def scratch_database(kind: str, where: Path) -> Iterator[str]:
    """The URL of an empty database of this kind, dropped afterwards (a file for SQLite)."""
    if kind == "sqlite":
        yield f"sqlite:///{where / f'producer-{uuid.uuid4().hex[:6]}.db'}"
        return
    sqlalchemy = pytest.importorskip("sqlalchemy")
    admin_url = PG_ADMIN_URL if kind == "postgresql" else MYSQL_ADMIN_URL
    name = f"txmsg_sdk_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    quoted = f'"{name}"' if kind == "postgresql" else f"`{name}`"
    try:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f"CREATE DATABASE {quoted}"))
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server
        admin.dispose()
        _unreachable("PostgreSQL" if kind == "postgresql" else "MySQL", exc)
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        drop = f"DROP DATABASE IF EXISTS {quoted}" + (" WITH (FORCE)" if kind == "postgresql"
                                                      else "")
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(drop))
        admin.dispose()


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A scratch database of the producer's, on each dialect the barrier supports."""
    with scratch_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[Any]:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    made = sqlalchemy.create_engine(database_url, pool_size=10)
    yield made
    made.dispose()
