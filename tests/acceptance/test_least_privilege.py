"""`txmsg migrate --grant-to ROLE`: the service runs as a role that may read and write
txmsg's rows and nothing more (PostgreSQL); on SQLite the option is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.acceptance.conftest import Checker, run_txmsg
from tests.callbacks import CallbackServer, answer, wait_until
from tests.databases import PG_ADMIN_URL, scratch_pg_database

GROUP = "shop"
SUB = "/v1/topics/orders/subscriptions/s"
SERVICE_ENV = {"TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0", "TXMSG_CHECK_MAX_TIMES": "3",
               "TXMSG_CHECKER_POLL_SECONDS": "0.1", "TXMSG_RETENTION_INTERVAL_SECONDS": "0.5"}


@pytest.fixture
def role() -> Iterator[str]:
    """A LOGIN role without any privilege of its own (dropped afterwards)."""
    name = f"txmsg_app_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEDB '
                              "NOCREATEROLE"))
    except Exception as exc:  # noqa: BLE001 - PostgreSQL unreachable
        admin.dispose()
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    try:
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture
def granted(role: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(the owner's URL, the role's URL) of a scratch database migrated by its owner
    with ``--grant-to`` the role."""
    with scratch_pg_database("txmsg_grants") as owner_url:
        done = run_txmsg(["migrate", "--grant-to", role], {"TXMSG_DATABASE_URL": owner_url},
                         tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"granted {role}" in done.stdout
        try:
            yield owner_url, make_url(owner_url).set(username=role).render_as_string(
                hide_password=False)
        finally:
            with create_engine(owner_url).begin() as conn:  # for DROP ROLE to succeed
                conn.execute(text(f'DROP OWNED BY "{role}"'))


@pytest.mark.postgres
@pytest.mark.slow
def test_the_service_runs_as_the_granted_role(granted: tuple[str, str], serve_factory: Any,
                                              tmp_path: Path) -> None:
    owner_url, role_url = granted
    callback = CallbackServer(answer("COMMIT"))
    try:
        # serve's own migrate at head only reads alembic_version: no --no-migrate needed
        served = serve_factory({"TXMSG_DATABASE_URL": role_url, **SERVICE_ENV})
        s, url = requests.Session(), served.url
        txs = f"{url}/v1/producer-groups/{GROUP}/transactions"
        assert s.put(f"{url}/v1/producer-groups/{GROUP}",
                     json={"check_urls": [callback.url]}).status_code == 200
        assert s.put(f"{url}{SUB}", json={}).status_code == 201
        for n in range(3):
            assert s.post(txs, json={"transaction_id": f"t-{n}", "topic": "orders",
                                     "body": f"m{n}"}).status_code == 201
            r = s.post(f"{txs}/t-{n}/commit")
            assert r.status_code == 200, r.text
        page = s.get(f"{url}/v1/topics/orders/messages").json()
        assert [m["body"] for m in page["messages"]] == ["m0", "m1", "m2"]
        r = s.post(f"{url}{SUB}/receive", json={"max_messages": 10})
        assert [m["body"] for m in r.json()["messages"]] == ["m0", "m1", "m2"]
        r = s.post(f"{url}{SUB}/ack", json={"offsets": [0, 1, 2]})
        assert r.status_code == 200, r.text
        # the check cycle
        assert s.post(txs, json={"transaction_id": "checked", "topic": "orders",
                                 "body": "c"}).status_code == 201
        wait_until(lambda: s.get(f"{txs}/checked").json()["state"] == "COMMITTED",
                   what="the check service as the granted role")
        assert "permission denied" not in served.log.read_text()
        served.stop()
    finally:
        callback.close()
    # a retention run, by `txmsg checker` as the role, expires every message
    checker = Checker({"TXMSG_DATABASE_URL": role_url, **SERVICE_ENV,
                       "TXMSG_RETENTION_SECONDS": "1"}, tmp_path / "checker.log")
    try:
        checker.wait_started()
        with create_engine(owner_url).connect() as conn:
            wait_until(lambda: conn.execute(text("SELECT count(*) FROM message_log"))
                       .scalar() == 0, timeout=30, what="retention as the granted role")
        assert checker.terminate() == 0
    finally:
        checker.kill()
    assert "permission denied" not in checker.output()
    # what `txmsg ingest` reads
    with create_engine(role_url).connect() as conn:
        conn.execute(text("SELECT * FROM committed_messages")).fetchall()
        conn.execute(text("SELECT * FROM topic_watermarks")).fetchall()


@pytest.mark.postgres
@pytest.mark.parametrize("statement", [
    "CREATE TABLE intruder (id int)",
    "DROP TABLE message_log",
    "ALTER TABLE message_log ADD COLUMN intruder int",
    "CREATE INDEX intruder ON message_log (topic)",
    "DROP VIEW committed_messages",
    "TRUNCATE message_log",
    "CREATE SCHEMA intruder",
])
def test_the_granted_role_cannot_create_alter_or_drop(granted: tuple[str, str],
                                                      statement: str) -> None:
    _, role_url = granted
    libpq = role_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)


def test_grant_to_on_sqlite_is_refused_and_does_nothing(tmp_path: Path) -> None:
    db = tmp_path / "txmsg.db"
    done = run_txmsg(["migrate", "--grant-to", "someone"],
                     {"TXMSG_DATABASE_URL": f"sqlite:///{db}"}, tmp_path)
    assert done.returncode == 2
    assert "--grant-to needs PostgreSQL" in done.stderr
    assert not db.exists()


@pytest.mark.postgres
def test_grant_to_an_unknown_role_is_one_line(tmp_path: Path) -> None:
    with scratch_pg_database("txmsg_grants") as url:
        done = run_txmsg(["migrate", "--grant-to", "no_such_role_here"],
                         {"TXMSG_DATABASE_URL": url}, tmp_path)
    assert done.returncode == 1
    assert "role_not_found" in done.stderr
