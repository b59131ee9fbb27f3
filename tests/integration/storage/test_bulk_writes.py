"""Large batches through the write path (on PostgreSQL each batch is one statement taking
its rows as JSON): every field comes back as it was sent, on both stores."""

from __future__ import annotations

import base64

import orjson
from sqlalchemy import func, select

from app.domain.lifecycle import FinishCmd, apply_finishes
from app.domain.names import DISCARD_TOPIC
from app.storage.db import write_transaction
from app.storage.schema import op_log
from app.vocabulary import Op
from tests.integration.helpers import finish, register, send


def _message(i: int) -> dict:
    m: dict = {"topic": f"t{i % 3}", "keys": [f"k{i}", "ключ"] if i % 2 else [],
               "properties": {"n": str(i), "tab\tnew\nline": "back\\slash"} if i % 4 else {}}
    if i % 5 == 0:
        m["body_base64"] = base64.b64encode(bytes([0, 1, 92, 10, 9, 255, i % 256])).decode()
    else:
        m["body"] = f"hé\t\\N {i}\n" * (1 + i % 7)
    if i % 3:
        m["tag"] = f"tag-{i}"
    return m


def test_a_large_transaction_reads_back_exactly(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    messages = [_message(i) for i in range(60)]
    sent = send(client, transaction_id="big-1", messages=messages)
    assert sent.status_code == 201
    committed = finish(client, "big-1", "commit").json
    assert [m["message_id"] for m in committed["messages"]] == \
        [m["message_id"] for m in sent.json["messages"]]
    read: dict[str, dict] = {}
    for topic in ("t0", "t1", "t2"):
        page = client.get(f"/v1/topics/{topic}/messages?limit=1000").json
        assert [m["offset"] for m in page["messages"]] == list(range(len(page["messages"])))
        read.update({m["message_id"]: {**m, "topic": topic} for m in page["messages"]})
    assert len(read) == 60
    for original, ids in zip(messages, sent.json["messages"], strict=True):
        got = read[ids["message_id"]]
        assert got["topic"] == original["topic"]
        assert got["keys"] == original["keys"] and got["properties"] == original["properties"]
        assert got.get("tag") == original.get("tag")
        assert got.get("body") == original.get("body")
        assert got.get("body_base64") == original.get("body_base64")
        assert got["transaction_id"] == "big-1"


def test_many_transactions_in_one_batch(client, app) -> None:  # type: ignore[no-untyped-def]
    """One database transaction resolving many: commits, rollbacks and discards."""
    register(client)
    txids = [f"tx-{i}" for i in range(30)]
    for i, txid in enumerate(txids):
        assert send(client, transaction_id=txid, messages=[_message(i), _message(i + 1)]
                    ).status_code == 201
    ops = [Op.COMMIT, Op.ROLLBACK, Op.DISCARD]
    cmds = [FinishCmd("orders-svc", txid, ops[i % 3], source="check" if i % 3 == 2 else "api",
                      check_times=15 if i % 3 == 2 else None) for i, txid in enumerate(txids)]
    with write_transaction(app.extensions["txmsg"].engine) as conn:
        outcomes = apply_finishes(conn, cmds)
    assert [o.body["state"] for o in outcomes] == ["COMMITTED", "ROLLED_BACK", "DISCARDED"] * 10
    discarded = client.get(f"/v1/topics/{DISCARD_TOPIC}/messages?limit=1000").json["messages"]
    assert [m["offset"] for m in discarded] == list(range(20))
    for m in discarded:
        props = m["properties"]
        assert props["PRODUCER_GROUP"] == "orders-svc" and props["CHECK_TIMES"] == "15"
        assert props["REAL_TOPIC"] in ("t0", "t1", "t2")
        assert int(props["TRANSACTION_ID"].split("-")[1]) % 3 == 2
    committed = sum(len(client.get(f"/v1/topics/{t}/messages?limit=1000").json["messages"])
                    for t in ("t0", "t1", "t2"))
    assert committed == 20
    for i, txid in enumerate(txids):
        got = client.get(f"/v1/producer-groups/orders-svc/transactions/{txid}").json
        assert got["state"] == ["COMMITTED", "ROLLED_BACK", "DISCARDED"][i % 3]
    # the op log has one row per resolution
    with app.extensions["txmsg"].engine.connect() as conn:
        rows = conn.execute(select(op_log.c.op, func.count()).group_by(op_log.c.op)).all()
    assert dict(rows) == {"COMMIT": 10, "ROLLBACK": 10, "DISCARD": 10}
    assert orjson.loads(orjson.dumps(discarded))  # serialisable as the API answered it
