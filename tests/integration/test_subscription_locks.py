"""Which locks the subscription operations take, on PostgreSQL (SQLite's writers take turns
anyway): acks, nacks, renews and transactional holds lock only their offset rows, so they
go on while a receive holds the subscription row; an ack deletes its offset's row, and
the stored cursor the acks leave behind moves at the next receive."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from app.storage.schema import subscription, subscription_offset
from app.web import create_app
from tests.conftest import make_settings
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
    yield app.test_client()
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


def test_the_cursor_moves_with_the_ack_when_the_row_is_free(pg_client: Any) -> None:
    register(pg_client)
    create(pg_client)
    commit(pg_client, 3)
    assert offsets(receive(pg_client, 2)) == [0, 1]
    assert pg_client.post(f"{SUBS}/s/ack", json={"offsets": [1, 0]}).json == {"acked": 2}
    engine = pg_client.application.extensions["txmsg"].engine
    assert stored_cursor(pg_client) == 2
    with engine.connect() as conn:  # the acknowledged head's rows are gone with it
        assert conn.execute(select(subscription_offset.c.queue_offset)).scalars().all() == []
    assert offsets(receive(pg_client)) == [2]
