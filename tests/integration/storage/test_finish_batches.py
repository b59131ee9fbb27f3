"""Several commands on one transaction inside one group-committed batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
from sqlalchemy import text

from app.domain.lifecycle import FinishCmd, apply_finishes
from app.storage.db import write_transaction
from app.storage.finishes import lock_txns
from app.vocabulary import Op
from tests.integration.helpers import register, send


def test_discard_then_late_commit_in_one_batch(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    txid = send(client, messages=[{"topic": "orders", "body": "a"},
                                  {"topic": "orders", "body": "b"}]).json["transaction_id"]
    engine = app.extensions["txmsg"].engine
    with write_transaction(engine) as conn:
        discard, commit, again = apply_finishes(conn, [
            FinishCmd("orders-svc", txid, Op.DISCARD, "check", check_times=15),
            FinishCmd("orders-svc", txid, Op.COMMIT),
            FinishCmd("orders-svc", txid, Op.COMMIT),
        ])
    assert discard.applied and commit.applied and not again.applied
    assert [(m["topic"], m["offset"]) for m in commit.body["messages"]] == [
        ("orders", 0), ("orders", 1)]
    assert again.body == commit.body
    got = client.get(f"/v1/producer-groups/orders-svc/transactions/{txid}").json
    assert got["state"] == "COMMITTED" and got["check_times"] == 15
    dead = client.get("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/messages").json["messages"]
    assert [m["offset"] for m in dead] == [0, 1]


def test_a_locked_transaction_reads_its_messages_as_sent(client, app) -> None:  # type: ignore[no-untyped-def]
    """In send order, each with its id, topic, properties and delay; a time as the instant
    it was sent, whatever the session's time zone (PostgreSQL hands the messages over as
    JSON, its times written with the session's offset)."""
    register(client)
    at = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=123400)
    sent = send(client, messages=[
        {"topic": "orders", "body": "a", "properties": {"k": "v"}},
        {"topic": "audit", "body": "b", "deliver_after_ms": 1500},
        {"topic": "orders", "body": "c",
         "deliver_at": at.astimezone(timezone(timedelta(hours=-7))).isoformat()},
    ]).json
    engine = app.extensions["txmsg"].engine
    with write_transaction(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SET LOCAL TIME ZONE 'Asia/Kathmandu'"))  # +05:45
        rows, messages = lock_txns(conn, [("orders-svc", sent["transaction_id"]),
                                          ("orders-svc", "never-sent")])
    (key, row), = rows.items()
    assert key == ("orders-svc", sent["transaction_id"]) and row.state == "PREPARED"
    got = messages[row.id]
    assert [(m.txn_id, m.message_id, m.topic) for m in got] == [
        (row.id, m["message_id"], m["topic"]) for m in sent["messages"]]
    assert [orjson.loads(m.properties) for m in got] == [{"k": "v"}, {}, {}]
    assert [(m.deliver_after_ms, m.deliver_at) for m in got] == [
        (None, None), (1500, None), (None, at)]
    assert got[2].deliver_at is not None and got[2].deliver_at.utcoffset() == timedelta(0)
    assert len({m.id for m in got}) == 3
