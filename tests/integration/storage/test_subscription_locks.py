"""Which locks the subscription operations take, on PostgreSQL (SQLite's writers take turns
anyway): acks, nacks, renews and transactional holds lock only their offset rows, so they
go on while a receive holds the subscription row; an ack deletes its offset's row, and
the stored cursor the acks leave behind moves at the next receive, which is one statement
when nothing is due."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, select

from app.storage.schema import subscription, subscription_offset
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import register, row_counts
from tests.integration.subscription_helpers import (
    SUBS,
    commit,
    create,
    describe,
    offsets,
    receive,
)

# a guard against a hang, not a measure: an operation that waits for the held lock never
# finishes while it is held, one that does not finishes in milliseconds
GUARD_SECONDS = 30


@pytest.fixture
def pg_client(postgres_url: str) -> Iterator[Any]:
    app = create_app(make_settings(postgres_url))
    yield front(app)
    app.extensions["txmsg"].close()


class RowLock:
    """The subscription row ``s`` of topic ``t`` locked as a receive locks it, from
    another connection, until ``release``."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))

    def hold(self) -> None:
        self.conn.execute("SELECT id FROM subscription WHERE topic = 't' AND name = 's'"
                          " FOR UPDATE")

    def release(self) -> None:
        self.conn.rollback()


@pytest.fixture
def row_lock(postgres_url: str) -> Iterator[RowLock]:
    lock = RowLock(postgres_url)
    yield lock
    lock.release()
    lock.conn.close()


def finishes_while_held(call: Callable[[], Any]) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(GUARD_SECONDS)
    assert not worker.is_alive(), "the operation waited for the subscription row"
    return out[0]


def stored_cursor(app_client: Any) -> int:
    engine = app_client.application.extensions["txmsg"].engine
    with engine.connect() as conn:
        return int(conn.execute(select(subscription.c.ack_cursor)).scalar_one())


def test_acks_nacks_renews_do_not_wait_for_a_receive(pg_client: Any, row_lock: RowLock) -> None:
    register(pg_client)
    create(pg_client, ack_timeout_ms=60_000)
    commit(pg_client, 4)
    assert offsets(receive(pg_client, 4)) == [0, 1, 2, 3]
    row_lock.hold()

    def post(action: str, body: dict[str, Any]) -> Any:
        return pg_client.post(f"{SUBS}/s/{action}", json=body)

    acked = finishes_while_held(lambda: post("ack", {"offsets": [0, 1]}))
    assert (acked.status_code, acked.json) == (200, {"acked": 2})
    renewed = finishes_while_held(lambda: post("renew", {"offsets": [2]}))
    assert (renewed.status_code, renewed.json) == (200, {"renewed": 1})
    nacked = finishes_while_held(lambda: post("nack", {"offsets": [3], "delay_ms": 0}))
    assert (nacked.status_code, nacked.json) == (200, {"nacked": 1})
    # the cursor could not move (the row was held), yet the subscription says where it is
    assert stored_cursor(pg_client) == 0
    state = finishes_while_held(lambda: describe(pg_client))
    assert (state["ack_cursor"], state["backlog"], state["in_flight"]) == (2, 2, 1)


def test_the_cursor_left_behind_moves_at_the_next_receive(pg_client: Any,
                                                          row_lock: RowLock) -> None:
    register(pg_client)
    create(pg_client)
    commit(pg_client, 3)
    assert offsets(receive(pg_client, 2)) == [0, 1]
    row_lock.hold()
    finishes_while_held(lambda: pg_client.post(f"{SUBS}/s/ack", json={"offsets": [0, 1]}))
    engine = pg_client.application.extensions["txmsg"].engine
    # the acks' rows are gone; the stored cursor could not move
    assert (stored_cursor(pg_client), row_counts(engine)["subscription_offset"]) == (0, 0)
    assert describe(pg_client)["ack_cursor"] == 2
    row_lock.release()
    assert offsets(receive(pg_client)) == [2]
    assert (stored_cursor(pg_client), row_counts(engine)["subscription_offset"]) == (2, 1)


def test_the_cursor_moves_with_the_next_receive(pg_client: Any) -> None:
    """An ack deletes its rows and leaves the stored cursor (a second statement for it
    cost more than the lag); the next receive, which locks the row anyway, moves it."""
    register(pg_client)
    create(pg_client)
    commit(pg_client, 3)
    assert offsets(receive(pg_client, 2)) == [0, 1]
    assert pg_client.post(f"{SUBS}/s/ack", json={"offsets": [1, 0]}).json == {"acked": 2}
    engine = pg_client.application.extensions["txmsg"].engine
    with engine.connect() as conn:  # the acknowledged head's rows are gone with it
        assert conn.execute(select(subscription_offset.c.queue_offset)).scalars().all() == []
    assert (stored_cursor(pg_client), describe(pg_client)["ack_cursor"]) == (0, 2)
    assert offsets(receive(pg_client)) == [2]
    assert stored_cursor(pg_client) == 2


def _statements_of(engine: Any, call: Callable[[], Any]) -> list[tuple[str, bool]]:
    """The statements ``call`` sent on ``engine``: first words, and whether each was a
    transaction of its own (the connection in autocommit)."""
    sent: list[tuple[str, bool]] = []

    def on_execute(conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        alone = bool(conn.connection.dbapi_connection.autocommit)
        sent.append((" ".join(statement.split()[:2]), alone))

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    return sent


def test_a_plain_receive_locks_the_row_for_one_statement(pg_client: Any) -> None:
    """Nothing due, nothing expired: a receive is one statement (the subscription's
    lookup, the leases, the messages), a transaction of its own, so the row is locked
    only while the server runs it (not across round trips to the service). With a message
    due again it takes the general way, a transaction of several statements."""
    register(pg_client)
    create(pg_client, redelivery_backoff={"min_ms": 0, "max_ms": 0})
    commit(pg_client, 3)
    engine = pg_client.application.extensions["txmsg"].engine
    got: list[list[dict[str, Any]]] = []
    sent = _statements_of(engine, lambda: got.append(receive(pg_client, 2)))
    assert offsets(got[0]) == [0, 1]
    assert [m["redelivery_count"] for m in got[0]] == [0, 0]
    assert [alone for _, alone in sent] == [True], sent
    assert stored_cursor(pg_client) == 0
    assert pg_client.post(f"{SUBS}/s/nack", json={"offsets": [1]}).json == {"nacked": 1}
    sent = _statements_of(engine, lambda: got.append(receive(pg_client, 2)))
    assert [(m["offset"], m["redelivery_count"]) for m in got[1]] == [(1, 1), (2, 0)]
    assert len([s for s, alone in sent if not alone]) > 2, sent


def test_a_receive_that_waited_for_the_row_leaves_the_cursor(pg_client: Any,
                                                              postgres_url: str) -> None:
    """A receive's statement takes its snapshot before it waits for the subscription row.
    When the row changed meanwhile (here a seek back to 0 and the lease of 0..9, in the
    transaction it waited for), the snapshot lacks rows below the read offset: the
    statement must not move the cursor from it. It would have moved it to 5, the lowest
    row it saw, over the unacknowledged 0..4."""
    register(pg_client)
    create(pg_client, ack_timeout_ms=60_000)
    commit(pg_client, 10)
    assert offsets(receive(pg_client, 5)) == [0, 1, 2, 3, 4]
    assert pg_client.post(f"{SUBS}/s/ack", json={"offsets": [0, 1, 2, 3, 4]}).json == {"acked": 5}
    assert offsets(receive(pg_client, 5)) == [5, 6, 7, 8, 9]
    assert stored_cursor(pg_client) == 5
    other = psycopg.connect(postgres_url.replace("postgresql+psycopg://", "postgresql://"))
    try:
        sub_id = other.execute("SELECT id FROM subscription WHERE topic = 't' AND name = 's'"
                               " FOR UPDATE").fetchone()[0]  # type: ignore[index]
        other.execute("DELETE FROM subscription_offset WHERE subscription_id = %s", [sub_id])
        other.execute("INSERT INTO subscription_offset (subscription_id, queue_offset,"
                      " deliveries, leased_until, next_at)"
                      " SELECT %s, o, 1, now() + interval '1 hour', now() + interval '1 hour'"
                      " FROM generate_series(0, 9) AS o", [sub_id])
        other.execute("UPDATE subscription SET ack_cursor = 0, read_offset = 10"
                      " WHERE id = %s", [sub_id])
        out: list[list[dict[str, Any]]] = []
        waiting = threading.Thread(target=lambda: out.append(receive(pg_client)), daemon=True)
        waiting.start()
        deadline = time.monotonic() + GUARD_SECONDS
        while not other.execute("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                                " current_database() AND wait_event_type = 'Lock'"
                                ).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the receive never waited for the row"
            time.sleep(0.01)
        other.commit()
        waiting.join(GUARD_SECONDS)
        assert out == [[]]
    finally:
        other.close()
    assert stored_cursor(pg_client) == 0
    state = describe(pg_client)
    assert (state["ack_cursor"], state["backlog"], state["in_flight"]) == (0, 10, 10)
