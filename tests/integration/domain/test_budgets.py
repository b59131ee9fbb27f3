"""Rules the SQL writes again, held to the one Python function of each by running both
on the same rows: "at most max_bytes of bodies, but at least one message"
(``app.domain.limits.within_budget``: a page's SQL, a receive on each store) and a first
delivery's lease (``app.domain.leasing``: PostgreSQL's one-statement receive computes it
in SQL)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from app.domain import leasing
from app.domain.limits import MAX_INT64, within_budget
from app.domain.subscription_receives import receive
from app.storage import log
from app.storage import subscription_leases as leases
from app.storage import subscriptions as store
from app.storage.db import each_statement_alone, write_transaction
from app.storage.schema import subscription, subscription_offset
from tests.front_client import front
from tests.integration.helpers import finish, register, send
from tests.integration.subscription_helpers import create

SIZES = [5, 3, 10, 1, 7, 0, 4]
BUDGETS = [0, 1, 4, 5, 8, 17, 18, 19, 25, 26, 29, 30, 1000]


def engine_of(app: Any) -> Engine:
    return app.extensions["txmsg"].engine


def taken(sizes: list[int], max_bytes: int) -> int:
    """How many of ``sizes``, in order, the rule takes."""
    n = used = 0
    for size in sizes:
        if not within_budget(n, used, size, max_bytes):
            break
        n, used = n + 1, used + size
    return n


def commit_sizes(client: Any, sizes: list[int]) -> None:
    register(client)
    sent = send(client, messages=[{"topic": "t", "body": "x" * n} for n in sizes])
    assert sent.status_code == 201, sent.json
    assert finish(client, sent.json["transaction_id"], "commit").status_code == 200


def test_the_rule_takes_at_least_one_then_what_fits() -> None:
    assert [taken(SIZES, b) for b in BUDGETS] == [1, 1, 1, 1, 2, 2, 3, 4, 4, 6, 6, 7, 7]
    assert taken([], 0) == 0


def test_a_page_takes_what_the_rule_takes(app: Any, client: Any) -> None:
    commit_sizes(client, SIZES)
    with engine_of(app).connect() as conn:
        for max_bytes in BUDGETS:
            _, rows = log.read_page(conn, "t", 0, len(SIZES), max_bytes)
            assert len(rows) == taken(SIZES, max_bytes), max_bytes


def test_a_receive_takes_what_the_rule_takes(app: Any, client: Any) -> None:
    """On PostgreSQL the one-statement receive picks them, on SQLite the general way."""
    commit_sizes(client, SIZES)
    for i, max_bytes in enumerate(BUDGETS):
        create(client, name=f"s{i}", initial_position="earliest")
        got = receive(engine_of(app), "t", f"s{i}", len(SIZES), max_bytes).messages
        assert [m["offset"] for m in got] == list(range(taken(SIZES, max_bytes))), max_bytes


NOW = datetime(2025, 1, 1, 12, 0, 0, 123_456, tzinfo=UTC)


@pytest.mark.parametrize(("ack_timeout_ms", "backoff_min_ms", "backoff_max_ms"), [
    (1000, 0, 0),
    (30_000, 1000, 60_000),
    (5000, 4096, 1000),  # min over max (stored bounds are not re-validated): the max
    (43_200_000, 3_600_000, 3_600_000),
    (1001, 1, 3_600_000),
])
def test_the_one_statement_receive_leases_as_leasing_says(
        postgres_url: str, ack_timeout_ms: int, backoff_min_ms: int, backoff_max_ms: int
) -> None:
    from app.web import create_app
    from tests.conftest import make_settings

    app = create_app(make_settings(postgres_url))
    try:
        client, engine = front(app), engine_of(app)
        commit_sizes(client, [1, 2, 3])
        create(client, initial_position="earliest")
        with write_transaction(engine) as conn:
            conn.execute(update(subscription).where(subscription.c.name == "s").values(
                ack_timeout_ms=ack_timeout_ms, backoff_min_ms=backoff_min_ms,
                backoff_max_ms=backoff_max_ms))
        assert leases.one_statement_leases(engine)
        with each_statement_alone(engine) as conn:
            rows = leases.first_deliveries(conn, "t", "s", NOW, 10, 1000, max_offset=MAX_INT64,
                                           deliveries=leasing.FIRST_DELIVERY, consumer=None)
        assert rows is not None and [r.queue_offset for r in rows] == [0, 1, 2]
        with engine.connect() as conn:
            sub = store.get(conn, "t", "s")
            assert sub is not None
            stored = conn.execute(select(subscription_offset.c.deliveries,
                                         subscription_offset.c.leased_until,
                                         subscription_offset.c.next_at)
                                  .where(subscription_offset.c.subscription_id == sub.id)).all()
        until = leasing.lease_until(sub, NOW)
        expected = (leasing.FIRST_DELIVERY, until, leasing.redeliverable_at(sub, until, 0))
        assert [tuple(r) for r in stored] == [expected] * 3
    finally:
        app.extensions["txmsg"].close()
