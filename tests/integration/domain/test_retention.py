"""Retention on both stores: what expires, what stays, first_offset, per-topic retention,
several processes at once, and the metrics."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select, text, update

from app.config import Settings
from app.domain.clock import utcnow
from app.domain.lifecycle import apply_sends
from app.domain.messages import parse_transaction
from app.domain.names import DISCARD_TOPIC
from app.domain.retention import Retention
from app.errors import ApiError
from app.storage.schema import check_log, forgotten_txn, message_log, txn
from app.vocabulary import Op
from tests.conftest import make_settings
from tests.integration.helpers import finish, register, row_counts, send

HOUR = 3600
DATA_TABLES = ("txn", "half_message", "op_log", "check_log", "message_log",
               "retention_pending")


pytestmark = pytest.mark.settings(retention_seconds=HOUR, retention_batch_size=7)


def engine_of(app: Any) -> Engine:
    return app.extensions["txmsg"].engine


def commit(client: Any, *topics: str) -> dict[str, Any]:
    """One transaction with a message per topic, committed; the commit's answer."""
    sent = send(client, messages=[{"topic": t, "body": f"to {t}"} for t in topics])
    assert sent.status_code == 201, sent.json
    done = finish(client, sent.json["transaction_id"], "commit")
    assert done.status_code == 200
    return done.json


def data_rows(app: Any) -> dict[str, int]:
    counts = row_counts(engine_of(app))
    return {t: counts[t] for t in DATA_TABLES}


def backdate(engine: Engine, hours: float, topic: str | None = None) -> None:
    """Make committed log rows (of ``topic``, else all) and every resolution ``hours`` old."""
    then = utcnow() - timedelta(hours=hours)
    with engine.begin() as conn:
        rows = update(message_log).values(committed_at=then)
        conn.execute(rows.where(message_log.c.topic == topic) if topic else rows)
        conn.execute(update(txn).where(txn.c.resolved_at.is_not(None)).values(resolved_at=then))


def retention(app: Any, later: float = 0) -> Retention:
    """A retention worker whose clock runs ``later`` seconds ahead."""
    return Retention(engine_of(app), app.extensions["txmsg"].settings,
                     clock=lambda: utcnow() + timedelta(seconds=later))


def test_expired_head_goes_and_readers_start_at_first_offset(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    for _ in range(5):
        commit(client, "orders")
    backdate(engine_of(app), hours=2)
    for _ in range(3):
        commit(client, "orders")

    deleted = retention(app).run()

    assert deleted == Counter(messages=5, transactions=5, half_messages=5, op_records=5)
    page = client.get("/v1/topics/orders/messages?from_offset=0").json
    assert [m["offset"] for m in page["messages"]] == [5, 6, 7]
    assert page["first_offset"] == 5 and page["next_offset"] == 8
    assert client.get("/v1/topics/orders").json == {
        "topic": "orders", "first_offset": 5, "next_offset": 8, "retention_seconds": HOUR,
        "retention_default": True}
    counts = row_counts(engine_of(app))
    assert (counts["message_log"], counts["txn"], counts["half_message"]) == (3, 3, 3)
    # offsets are never reused
    assert commit(client, "orders")["messages"][0]["offset"] == 8


def test_a_forgotten_transactions_id_is_refused_for_good(client, app) -> None:  # type: ignore[no-untyped-def]
    """After retention deleted a transaction, a send with its id (the SDK retrying, say)
    is 409 and stores nothing: its message is never published a second time (#37)."""
    register(client)
    register(client, "other-svc")
    body = {"transaction_id": "order-7", "topic": "orders", "body": "once"}
    assert send(client, **body).status_code == 201
    assert finish(client, "order-7", "commit").status_code == 200
    rolled = {"transaction_id": "order-8", "topic": "orders", "body": "never"}
    assert send(client, **rolled).status_code == 201
    assert finish(client, "order-8", "rollback").status_code == 200
    backdate(engine_of(app), hours=2)
    assert retention(app).run()["transactions"] == 2
    with engine_of(app).connect() as conn:
        kept = conn.execute(select(forgotten_txn.c.producer_group, forgotten_txn.c.transaction_id,
                                   forgotten_txn.c.forgotten_at)).all()
    assert sorted((g, x) for g, x, _ in kept) == [("orders-svc", "order-7"),
                                                  ("orders-svc", "order-8")]
    before = row_counts(engine_of(app))
    for again in (body, rolled, {**body, "body": "other"}):
        r = send(client, **again)
        assert (r.status_code, r.json["code"]) == (409, "transaction_id_conflict"), r.json
        assert "retention" in r.json["detail"]
    # in one batch with a new send too (the writer's batches mix them)
    lifecycle = app.extensions["txmsg"].lifecycle
    with engine_of(app).begin() as conn:
        out = apply_sends(conn, [lifecycle._send_cmd("orders-svc", parse_transaction(
            b, max_body_bytes=1024)) for b in (body, {**body, "transaction_id": "order-9"})])
    assert isinstance(out[0], ApiError) and out[0].code == "transaction_id_conflict"
    assert not isinstance(out[1], ApiError) and out[1].created
    assert finish(client, "order-7", "commit").json["code"] == "transaction_not_found"
    after = row_counts(engine_of(app))
    assert (after["txn"], after["half_message"]) == (before["txn"] + 1,
                                                     before["half_message"] + 1)
    assert after["forgotten_txn"] == 2
    assert [m["body"] for m in client.get("/v1/topics/orders/messages").json["messages"]] == []
    # the id is forgotten in its group only
    assert send(client, group="other-svc", **body).status_code == 201


def test_the_forgotten_keys_are_committed_before_their_transactions_go(client, app) -> None:  # type: ignore[no-untyped-def]
    """A send's statement sees the transaction's row or, once it is gone, its kept key: the
    keys' transaction commits before the one that deletes the rows (kept in the same one,
    a send that began before that commit saw neither and stored the id anew)."""
    from sqlalchemy import event

    register(client)
    assert send(client, transaction_id="order-1", topic="orders", body="x").status_code == 201
    assert finish(client, "order-1", "commit").status_code == 200
    backdate(engine_of(app), hours=2)
    engine = engine_of(app)
    events: list[str] = []

    def statement(conn, cursor, sql, *args) -> None:  # type: ignore[no-untyped-def]
        head = " ".join(sql.split()[:3]).upper()
        if head.startswith("INSERT INTO FORGOTTEN_TXN"):
            events.append("keep")
        elif head.startswith("DELETE FROM TXN"):
            events.append("delete")
        elif head.startswith("COMMIT"):
            events.append("commit")

    def committed(conn) -> None:  # type: ignore[no-untyped-def]
        events.append("commit")

    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", committed)
    try:
        assert retention(app).run()["transactions"] == 1
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", committed)
    keep, delete = events.index("keep"), events.index("delete")
    assert keep < delete and "commit" in events[keep:delete], events


def test_a_topic_expired_whole_reads_empty_from_its_next_offset(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    for _ in range(20):  # more than one batch (7 rows)
        commit(client, "orders")

    retention(app, later=2 * HOUR).run()

    page = client.get("/v1/topics/orders/messages?from_offset=3").json
    assert page == {"topic": "orders", "messages": [], "next_offset": 20, "first_offset": 20}
    topic = client.get("/v1/topics/orders").json
    assert topic["first_offset"] == topic["next_offset"] == 20
    assert data_rows(app) == dict.fromkeys(DATA_TABLES, 0)
    assert commit(client, "orders")["messages"][0]["offset"] == 20


def test_a_gap_longer_than_a_batch_does_not_stop_the_head(client, app) -> None:  # type: ignore[no-untyped-def]
    """Offsets 0..9 deleted by hand (batches of 7 here): the head moves past the gap, and
    their transactions, no longer referred to, go too."""
    register(client)
    for _ in range(20):
        commit(client, "orders")
    with engine_of(app).begin() as conn:
        conn.execute(message_log.delete().where(message_log.c.queue_offset < 10))
    backdate(engine_of(app), hours=2)

    assert retention(app).run() == Counter(messages=10, transactions=20, half_messages=20,
                                           op_records=20)
    assert client.get("/v1/topics/orders").json["first_offset"] == 20


def test_nothing_expires_before_its_time(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    commit(client, "orders")
    before = data_rows(app)
    assert retention(app, later=HOUR - 60).run() == Counter()
    assert data_rows(app) == before


def test_prepared_and_discarded_transactions_never_go(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    prepared = send(client, transaction_id="pending").json
    discarded = send(client, transaction_id="discarded").json
    rolled_back = send(client, transaction_id="rolled-back").json
    lifecycle = app.extensions["txmsg"].lifecycle
    lifecycle.finish("orders-svc", "discarded", Op.DISCARD, source="check", check_times=15)
    finish(client, "rolled-back", "rollback")

    deleted = retention(app, later=400 * 24 * HOUR).run()

    # the discard topic's entry expired, the transactions behind it did not
    assert deleted == Counter(messages=1, transactions=1, half_messages=1, op_records=1)
    states = {t: client.get(f"/v1/producer-groups/orders-svc/transactions/{t}").json["state"]
              for t in ("pending", "discarded")}
    assert states == {"pending": "PREPARED", "discarded": "DISCARDED"}
    gone = client.get(f"/v1/producer-groups/orders-svc/transactions/{rolled_back['transaction_id']}")
    assert gone.status_code == 404
    for sent in (prepared, discarded):
        message_id = sent["messages"][0]["message_id"]
        assert client.get(f"/v1/messages/{message_id}").status_code == 200
    assert client.get(f"/v1/topics/{DISCARD_TOPIC}").json["first_offset"] == 1


def test_a_topic_with_a_longer_retention_keeps_the_transaction(client, app) -> None:  # type: ignore[no-untyped-def]
    """A transaction goes only once no topic still holds one of its messages; when the
    longer topic lets go later, the transaction goes then (the walk has passed it)."""
    register(client)
    assert client.put("/v1/topics/audit", json={"retention_seconds": 10 * 24 * HOUR}
                      ).status_code == 200
    answer = commit(client, "orders", "audit")
    backdate(engine_of(app), hours=2 * 24)
    worker = retention(app)

    assert worker.run() == Counter(messages=1)
    assert client.get("/v1/topics/audit/messages").json["messages"][0]["offset"] == 0
    got = client.get(f"/v1/producer-groups/orders-svc/transactions/{answer['transaction_id']}")
    assert got.status_code == 200

    assert client.put("/v1/topics/audit", json={"retention_seconds": 24 * HOUR}
                      ).json["retention_seconds"] == 24 * HOUR
    assert worker.run() == Counter(messages=1, transactions=1, half_messages=2, op_records=1)
    got = client.get(f"/v1/producer-groups/orders-svc/transactions/{answer['transaction_id']}")
    assert got.status_code == 404
    assert row_counts(engine_of(app))["retention_pending"] == 0


def test_a_late_commit_after_a_discard_waits_for_the_discard_topic(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    send(client, transaction_id="late")
    app.extensions["txmsg"].lifecycle.finish("orders-svc", "late", Op.DISCARD, source="check",
                                             check_times=15)
    finish(client, "late", "commit")
    client.put(f"/v1/topics/{DISCARD_TOPIC}", json={"retention_seconds": 30 * 24 * HOUR})
    backdate(engine_of(app), hours=3 * 24, topic="orders")
    backdate(engine_of(app), hours=3 * 24, topic=DISCARD_TOPIC)

    assert retention(app).run() == Counter(messages=1)
    assert client.get("/v1/producer-groups/orders-svc/transactions/late").json["state"] == \
        "COMMITTED"
    assert len(client.get(f"/v1/topics/{DISCARD_TOPIC}/messages").json["messages"]) == 1


def test_check_records_go_with_their_transaction(client, app) -> None:  # type: ignore[no-untyped-def]
    from app.storage import checks
    from app.storage.db import write_transaction

    register(client)
    send(client, transaction_id="checked")
    with write_transaction(engine_of(app)) as conn:
        txn_id = conn.execute(select(txn.c.id)).scalar_one()
        conn.execute(update(txn).values(lease_owner="me"))
        assert checks.record_check(conn, txn_id=txn_id, owner="me", check_times=1,
                                   result="UNKNOWN", url=None, detail=None, now=utcnow(),
                                   next_check_at=utcnow())
    finish(client, "checked", "rollback")
    assert retention(app, later=2 * HOUR).run() == Counter(
        transactions=1, half_messages=1, op_records=1, check_records=1)
    assert row_counts(engine_of(app))["check_log"] == 0


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_check_recorded_while_its_transaction_goes_goes_too(client, app) -> None:  # type: ignore[no-untyped-def]
    """No foreign key guards ``check_log``: a check recorded (the transaction's row
    updated, then its record inserted) while retention deletes the transaction must not
    leave its record behind. On SQLite the two cannot overlap (one write lock)."""
    from app.storage import retention as store
    from app.storage.db import write_transaction
    from tests.callbacks import wait_until

    engine = engine_of(app)
    register(client)
    send(client, transaction_id="checked")
    finish(client, "checked", "rollback")
    backdate(engine, 2)
    with engine.connect() as conn:
        txn_id = conn.execute(select(txn.c.id)).scalar_one()
    gone: list[store.Deleted] = []

    def expire() -> None:
        with write_transaction(engine) as conn:
            gone.append(store.expire_transactions(conn, [txn_id], utcnow()))

    def waiting() -> int:
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'")).scalar_one()

    worker = threading.Thread(target=expire)
    with engine.connect() as recorder, recorder.begin():
        recorder.execute(update(txn).where(txn.c.id == txn_id).values(check_times=1))
        worker.start()
        wait_until(waiting, what="retention waiting for the transaction's row")
        recorder.execute(insert(check_log).values(
            txn_id=txn_id, check_times=1, result="UNKNOWN", created_at=utcnow()))
    worker.join(timeout=30)
    assert gone == [store.Deleted(1, 1, 1, 1)]
    assert data_rows(app) == dict.fromkeys(DATA_TABLES, 0)


def test_several_workers_share_a_backlog_and_count_each_row_once(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    for i in range(60):
        commit(client, "orders", f"t{i % 3}")
    workers = [retention(app, later=2 * HOUR) for _ in range(4)]
    results: list[Counter[str]] = []
    errors: list[BaseException] = []

    def run(worker: Retention) -> None:
        try:
            while True:
                done = worker.run()
                results.append(done)
                if not done:
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert sum(results, Counter()) == Counter(messages=120, transactions=60, half_messages=120,
                                              op_records=60)
    assert data_rows(app) == dict.fromkeys(DATA_TABLES, 0)


def test_metrics(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    text = client.get("/metrics").data.decode()
    for kind in ("messages", "transactions", "half_messages", "op_records", "check_records"):
        assert f'txmsg_retention_deleted_total{{kind="{kind}"}}' in text
    commit(client, "orders")
    backdate(engine_of(app), hours=0.5)
    commit(client, "orders")
    before = _sample(client.get("/metrics").data.decode(),
                     'txmsg_retention_deleted_total{kind="messages"}')
    age = _sample(client.get("/metrics").data.decode(),
                  'txmsg_retention_oldest_message_age_seconds{topic="orders"}')
    assert 0.5 * HOUR - 60 < age < 0.5 * HOUR + 60

    retention(app, later=0.75 * HOUR).run()

    text = client.get("/metrics").data.decode()
    assert _sample(text, 'txmsg_retention_deleted_total{kind="messages"}') == before + 1
    assert _sample(text, 'txmsg_retention_oldest_message_age_seconds{topic="orders"}') < 60


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def test_the_cursor_trails_the_walk(client, app) -> None:  # type: ignore[no-untyped-def]
    """A commit that became visible after the walk passed its resolution time is still
    found: the stored cursor stays CURSOR_LAG behind the cutoff."""
    from app.domain.retention import CURSOR_LAG
    from app.storage.schema import retention_cursor

    register(client)
    commit(client, "orders")
    worker = retention(app, later=2 * HOUR)
    worker.run()
    with engine_of(app).connect() as conn:
        stored: datetime = conn.execute(select(retention_cursor.c.resolved_at)).scalar_one()
    assert stored <= utcnow() + timedelta(seconds=2 * HOUR) - timedelta(seconds=HOUR) - CURSOR_LAG


def test_the_walk_reads_only_the_transactions_of_one_batch(client, app) -> None:  # type: ignore[no-untyped-def]
    """Batches hold 7 messages here: of ten resolved transactions of 3 messages, the walk
    takes three (the third takes the count past 7) and sends no more rows."""
    from app.storage import retention as store

    register(client)
    for _ in range(10):
        commit(client, "orders", "orders", "orders")
    with engine_of(app).connect() as conn:
        walked = store.walk_resolved(conn, store.WALK_START, utcnow() + timedelta(hours=1), 7)
        everything = store.walk_resolved(conn, store.WALK_START,
                                         utcnow() + timedelta(hours=1), 100)
    assert [r.message_count for r in walked] == [3, 3, 3]
    assert [r.id for r in walked] == [r.id for r in everything[:3]]
    assert len(everything) == 10


def test_put_and_get_a_topic(client) -> None:  # type: ignore[no-untyped-def]
    r = client.put("/v1/topics/audit", json={"retention_seconds": 7 * 24 * HOUR})
    assert r.status_code == 200
    assert r.json == {"topic": "audit", "first_offset": 0, "next_offset": 0,
                      "retention_seconds": 7 * 24 * HOUR, "retention_default": False}
    assert client.get("/v1/topics/audit").json == r.json
    assert client.get("/v1/topics").json["topics"] == [{"topic": "audit", "next_offset": 0}]
    register(client)
    assert commit(client, "audit")["messages"][0]["offset"] == 0
    back = client.put("/v1/topics/audit", json={"retention_seconds": None})
    assert back.json == {"topic": "audit", "first_offset": 0, "next_offset": 1,
                         "retention_seconds": HOUR, "retention_default": True}
    assert client.put(f"/v1/topics/{DISCARD_TOPIC}", json={"retention_seconds": 60}
                      ).json["retention_seconds"] == 60


def test_the_check_service_runs_retention(settings: Settings, client, app) -> None:  # type: ignore[no-untyped-def]
    """The retention job beside the check poll, in the check service."""
    from checker.service import CheckService
    from tests.callbacks import wait_until

    register(client)
    commit(client, "orders")
    backdate(engine_of(app), hours=2)
    service = CheckService(settings.model_copy(update={"retention_interval_seconds": 0.2}))
    service.start()
    try:
        assert wait_until(lambda: data_rows(app)["txn"] == 0, timeout=30) is True
    finally:
        service.shutdown()
    assert data_rows(app) == dict.fromkeys(DATA_TABLES, 0)


def test_storage_stays_flat_under_steady_traffic(database_url: str, client, app) -> None:  # type: ignore[no-untyped-def]
    """Steady send + commit traffic with a retention of 2 s: the rows held stop growing
    (every sample of the second half holds well under half of what was committed), and
    once traffic stops everything drains away."""
    from checker.service import CheckService
    from tests.callbacks import wait_until

    settings = make_settings(database_url, retention_seconds=2, retention_interval_seconds=0.5)
    register(client)
    service = CheckService(settings)
    service.start()
    samples: list[tuple[int, dict[str, int]]] = []
    committed = 0
    try:
        started = time.monotonic()
        next_sample = started + 1
        while time.monotonic() - started < 16:
            commit(client, "orders", "audit")
            committed += 1
            if time.monotonic() >= next_sample:
                samples.append((committed, data_rows(app)))
                next_sample += 1
            time.sleep(0.01)
        assert committed > 100 and len(samples) >= 10
        for total, rows in samples[len(samples) // 2:]:
            assert rows["txn"] < total / 2 and rows["message_log"] < total, (total, rows)
            assert rows["half_message"] < total and rows["op_log"] < total / 2, (total, rows)
        wait_until(lambda: data_rows(app)["txn"] == 0, timeout=60, what="drained")
    finally:
        service.shutdown()
    assert data_rows(app) == dict.fromkeys(DATA_TABLES, 0)
    topic = client.get("/v1/topics/orders").json
    assert topic["first_offset"] == topic["next_offset"] == committed


def vacuum_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {r.relname: r.vacuum_count for r in conn.execute(text(
            "SELECT relname, vacuum_count FROM pg_stat_user_tables"
            " WHERE relname IN ('txn', 'half_message', 'op_log', 'message_log')"))}


def autovacuum(monkeypatch: pytest.MonkeyPatch, on: bool) -> list[bool]:
    """The server's autovacuum as the job sees it; the list of times it asked."""
    from app.storage import retention as store

    asked: list[bool] = []

    def autovacuum_on(conn: Any) -> bool:
        asked.append(on)
        return on

    monkeypatch.setattr(store, "autovacuum_on", autovacuum_on)
    return asked


def expire(client: Any, app: Any, transactions: int) -> None:
    """Commit ``transactions`` one-message transactions and make them past retention."""
    for _ in range(transactions):
        commit(client, "orders")
    backdate(engine_of(app), hours=2)


def vacuuming_worker(app: Any) -> Retention:
    """A retention worker that vacuums a table after 4 of its rows were deleted."""
    return Retention(engine_of(app), make_settings(
        app.extensions["txmsg"].settings.database_url, retention_seconds=HOUR,
        retention_vacuum_rows=4))


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_tables_are_vacuumed_after_enough_deletions(  # type: ignore[no-untyped-def]
        client, app, monkeypatch: pytest.MonkeyPatch) -> None:
    """What lets a table emptied as fast as it fills reuse its space without autovacuum."""
    autovacuum(monkeypatch, on=False)
    engine = engine_of(app)
    before = vacuum_counts(engine)
    register(client)
    expire(client, app, 3)
    worker = vacuuming_worker(app)
    assert worker.run() == Counter(messages=3, transactions=3, half_messages=3, op_records=3)
    assert vacuum_counts(engine) == before  # 3 of each deleted: fewer than 4
    expire(client, app, 1)
    assert worker.run()["transactions"] == 1
    after = vacuum_counts(engine)  # 4 of each deleted since: every table vacuumed once
    assert {t: after[t] - before.get(t, 0) for t in after} == {
        "txn": 1, "half_message": 1, "op_log": 1, "message_log": 1}
    assert worker.run() == Counter()
    assert vacuum_counts(engine) == after  # nothing deleted since, nothing vacuumed


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_where_autovacuum_runs_the_job_leaves_vacuuming_to_it(  # type: ignore[no-untyped-def]
        client, app, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = autovacuum(monkeypatch, on=True)
    engine = engine_of(app)
    before = vacuum_counts(engine)
    register(client)
    expire(client, app, 4)
    assert vacuuming_worker(app).run()["transactions"] == 4
    assert asked and vacuum_counts(engine) == before
