"""`txmsg` through PgBouncer in transaction pooling mode (a private pgbouncer,
tests/pgbouncer.py): refused at connect without ``TXMSG_DATABASE_POOLING=transaction``
(its startup ``options``); with it, migrate, serve, the check service, subscriptions and
the wake-ups (on ``TXMSG_SESSION_DATABASE_URL``) all work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from sqlalchemy import text

from app.config import Settings
from app.storage import notices
from app.storage.db import make_engine, read_connection, write_transaction
from tests.acceptance.conftest import run_txmsg
from tests.callbacks import CallbackServer, answer, wait_until
from tests.databases import scratch_pg_database
from tests.pgbouncer import private_pgbouncer, through

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

GROUP = "shop"
SUB = "/v1/topics/orders/subscriptions/s"
# more than psycopg's prepare_threshold (5): a driver that prepared statements would
# meet one prepared on another server connection within these rounds
ROUNDS = 12
CHECKER_ENV = {"TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0", "TXMSG_CHECK_MAX_TIMES": "3",
               "TXMSG_CHECKER_POLL_SECONDS": "0.1"}


@pytest.fixture
def direct_url() -> Iterator[str]:
    """An empty (unmigrated) PostgreSQL database, its direct URL."""
    with scratch_pg_database("txmsg_pgbouncer") as url:
        yield url


@pytest.fixture
def pooled_url(direct_url: str, tmp_path: Path) -> Iterator[str]:
    """The same database through a private pgbouncer (pool_mode=transaction)."""
    with private_pgbouncer(tmp_path / "pgbouncer") as port:
        yield through(port, direct_url)


def test_without_transaction_pooling_pgbouncer_refuses_the_connection(
        pooled_url: str, tmp_path: Path) -> None:
    done = run_txmsg(["migrate"], {"TXMSG_DATABASE_URL": pooled_url}, tmp_path)
    assert done.returncode != 0
    assert "unsupported startup parameter: options" in done.stderr


def test_the_service_works_through_pgbouncer_in_transaction_pooling(
        pooled_url: str, direct_url: str, tmp_path: Path, serve_factory: Any) -> None:
    pooled = {"TXMSG_DATABASE_URL": pooled_url, "TXMSG_DATABASE_POOLING": "transaction"}
    migrated = run_txmsg(["migrate"], pooled, tmp_path)  # through the pooler itself
    assert migrated.returncode == 0, migrated.stderr
    callback = CallbackServer(answer("COMMIT"))
    try:
        served = serve_factory({**pooled, **CHECKER_ENV,
                                "TXMSG_SESSION_DATABASE_URL": direct_url})
        s = requests.Session()
        url = served.url
        assert s.put(f"{url}/v1/producer-groups/{GROUP}",
                     json={"check_urls": [callback.url]}).status_code == 200
        assert s.put(f"{url}{SUB}", json={}).status_code == 201
        txs = f"{url}/v1/producer-groups/{GROUP}/transactions"
        for n in range(ROUNDS):
            r = s.post(txs, json={"transaction_id": f"t-{n}", "topic": "orders",
                                  "body": f"m{n}"})
            assert r.status_code == 201, r.text
            r = s.post(f"{txs}/t-{n}/commit")
            assert r.status_code == 200 and r.json()["state"] == "COMMITTED", r.text
        page = s.get(f"{url}/v1/topics/orders/messages").json()
        assert [m["body"] for m in page["messages"]] == [f"m{n}" for n in range(ROUNDS)]
        got: list[dict[str, Any]] = []
        while len(got) < ROUNDS:
            r = s.post(f"{url}{SUB}/receive", json={"max_messages": 5})
            assert r.status_code == 200, r.text
            batch = r.json()["messages"]
            assert batch
            r = s.post(f"{url}{SUB}/ack", json={"offsets": [m["offset"] for m in batch]})
            assert r.status_code == 200, r.text
            got += batch
        assert sorted(m["offset"] for m in got) == list(range(ROUNDS))
        # left PREPARED: the embedded check service asks the callback, and commits it
        assert s.post(txs, json={"transaction_id": "checked", "topic": "orders",
                                 "body": "c"}).status_code == 201
        wait_until(lambda: s.get(f"{txs}/checked").json()["state"] == "COMMITTED",
                   what="the check service, through the pooler")
        assert callback.numbers("checked") == [1]
        _listens_directly(direct_url)
    finally:
        callback.close()
    assert "prepared statement" not in served.log.read_text()


def _listens_directly(direct_url: str) -> None:
    libpq = direct_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq, autocommit=True) as admin:
        def listening() -> bool:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = %s AND query LIKE 'LISTEN%%'",
                (notices.LISTENER_NAME,)).fetchone()
            return bool(row and row[0])

        wait_until(listening, what="the listener on the session URL")


def test_the_statement_timeout_holds_in_each_transaction_through_the_pooler(
        pooled_url: str) -> None:
    settings = Settings(database_url=pooled_url, database_pooling="transaction",
                        db_statement_timeout_ms=4321)
    engine = make_engine(settings)
    try:
        with read_connection(engine) as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "4321ms"
        with write_transaction(engine) as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "4321ms"
    finally:
        engine.dispose()


def test_without_a_session_url_a_pooled_service_has_no_notifications(
        pooled_url: str) -> None:
    settings = Settings(database_url=pooled_url, database_pooling="transaction")
    engine = make_engine(settings, pool=False)
    assert notices.publisher(engine, settings) is None
