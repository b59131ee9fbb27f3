"""PostgreSQL: a retention batch reads only the rows it deletes, whatever the statistics.

The job deletes as fast as the load writes, and on a server without autovacuum nothing
analyzes the tables: two of a batch's statements were planned for tables without
statistics, one reading every retained row of the topic (and sorting them) to find a
batch of 2,000, the other hashing the whole committed log to learn which of 20
transactions it still refers to. Each test writes 20k messages, drops the statistics
and counts the rows each node of those statements' plans produced.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from app.storage import retention as store
from app.storage.db import make_engine
from tests.conftest import make_settings
from tests.plans import drop_statistics, most_rows, plans, plans_of, tables_scanned_whole

TOPIC = "plans"
TXNS = 200
PER_TXN = 100
BATCH = 2_000


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    """20k messages of TOPIC in 200 transactions of 100, committed and resolved a day ago,
    in tables vacuumed (PostgreSQL knows their row counts) but without statistics."""
    engine = make_engine(make_settings(postgres_url))
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO txn (producer_group, transaction_id, state, fingerprint,"
            " message_count, check_immunity_seconds, check_times, next_check_at,"
            " created_at, resolved_at)"
            " SELECT 'g', 't' || i, 'COMMITTED', 'f', :per, 0, 0, t, t, t"
            " FROM generate_series(1, :n) AS i, (SELECT now() - interval '1 day' AS t) d"),
            {"n": TXNS, "per": PER_TXN})
        conn.execute(text(
            "INSERT INTO half_message (message_id, txn_id, seq, topic, keys, properties,"
            " body, body_is_text, created_at)"
            " SELECT t.id || '-' || s, t.id, s, :topic, '[]', '{}',"
            " convert_to(repeat('x', 100), 'UTF8'), true, t.created_at"
            " FROM txn t, generate_series(0, :per - 1) AS s"), {"topic": TOPIC, "per": PER_TXN})
        conn.execute(text(
            "INSERT INTO message_log (topic, queue_offset, half_message_id, committed_at)"
            " SELECT topic, row_number() OVER (ORDER BY id) - 1, id, created_at"
            " FROM half_message"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM txn, half_message, message_log"))  # row counts, as the job's
        drop_statistics(conn, "txn", "half_message", "message_log")
    try:
        yield engine
    finally:
        engine.dispose()


def test_a_topic_batch_reads_only_its_offsets(engine: Engine) -> None:
    with engine.connect() as conn, plans(conn) as found:
        head = store.expired_head(conn, TOPIC, 0, datetime.now(UTC), BATCH)
        assert (head.end, head.more) == (BATCH, True)
        tail = store.expired_head(conn, TOPIC, TXNS * PER_TXN - 10, datetime.now(UTC), BATCH)
        assert (tail.end, tail.more) == (TXNS * PER_TXN, False)
        conn.rollback()
    for counted in plans_of(found, "SELECT min("):
        assert most_rows(counted) <= BATCH, counted


def test_a_transaction_batch_looks_up_only_its_messages(engine: Engine) -> None:
    """20 transactions, the first 10 with their log rows gone: those 10 go with their
    1,000 half messages, the other 10 are still referred to."""
    with engine.begin() as conn:
        ids = list(conn.execute(text("SELECT id FROM txn ORDER BY id LIMIT 20")).scalars())
        conn.execute(text("DELETE FROM message_log WHERE half_message_id IN"
                          " (SELECT id FROM half_message WHERE txn_id = ANY(:ids))"),
                     {"ids": ids[:10]})
    with engine.connect() as conn, plans(conn) as found:
        gone = store.expire_transactions(conn, ids, datetime.now(UTC) - timedelta(hours=1))
        assert gone == store.Deleted(10, 10 * PER_TXN, 0, 0)
        conn.rollback()
    [lookup] = plans_of(found, "SELECT half_message.txn_id")
    assert "message_log" not in tables_scanned_whole(lookup), lookup
    assert most_rows(lookup) <= 20 * PER_TXN, lookup
