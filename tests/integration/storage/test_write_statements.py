"""The write path's round trips on PostgreSQL: a batch of sends is one statement run
without BEGIN/COMMIT, a batch of finishes is a locking read, the offset counter and one
write. (SQLite takes a statement per table.) The statements are counted as the database
driver receives them, and their effect is read back from another connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy import Engine, event

from tests.front_client import front
from tests.integration.helpers import finish, register, send


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        seen.append(statement.split(None, 1)[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@pytest.fixture
def pg_app(postgres_url):  # type: ignore[no-untyped-def]
    from app.web import create_app
    from tests.conftest import make_settings

    app = create_app(make_settings(postgres_url))
    yield app
    app.extensions["txmsg"].close()


def test_send_and_commit_round_trips_on_postgres(pg_app, postgres_url) -> None:  # type: ignore[no-untyped-def]
    client = front(pg_app)
    register(client)
    engine = pg_app.extensions["txmsg"].engine
    with statements(engine) as sent:
        r = send(client, messages=[{"topic": "orders", "body": "a"},
                                   {"topic": "orders", "body_base64": "AAEC"}])
    assert r.status_code == 201, r.json
    assert sent == ["WITH"]
    send_conn = pg_app.extensions["txmsg"].lifecycle.send_writer._conn
    assert send_conn.connection.dbapi_connection.autocommit is True
    txid = r.json["transaction_id"]
    libpq = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as other:  # stored for everyone, not only this session
        count = other.execute("SELECT count(*) FROM half_message h JOIN txn t ON t.id = h.txn_id"
                              " WHERE t.transaction_id = %s", (txid,)).fetchone()
        assert count == (2,)

    with statements(engine) as committed:
        r = finish(client, txid, "commit")
    assert r.status_code == 200, r.json
    assert committed == ["SELECT", "WITH"]
    with psycopg.connect(libpq) as other:
        rows = other.execute("SELECT t.state, count(m.*), count(o.*) FROM txn t"
                             " JOIN half_message h ON h.txn_id = t.id"
                             " LEFT JOIN message_log m ON m.half_message_id = h.id"
                             " LEFT JOIN op_log o ON o.txn_id = t.id AND h.seq = 0"
                             " WHERE t.transaction_id = %s GROUP BY t.state", (txid,)).fetchall()
        assert rows == [("COMMITTED", 2, 1)]


def test_a_retried_send_reads_after_its_one_statement(pg_app) -> None:  # type: ignore[no-untyped-def]
    client = front(pg_app)
    register(client)
    first = send(client, transaction_id="t-1")
    engine = pg_app.extensions["txmsg"].engine
    with statements(engine) as sent:
        again = send(client, transaction_id="t-1")
    assert again.status_code == 200 and again.json["messages"] == first.json["messages"]
    assert sent[0] == "WITH" and all(s == "SELECT" for s in sent[1:])
    with statements(engine) as sent:
        unregistered = send(client, group="nobody", transaction_id="t-1")
    assert unregistered.status_code == 422, unregistered.json
    assert sent == ["WITH", "SELECT"]
