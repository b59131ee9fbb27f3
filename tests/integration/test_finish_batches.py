"""Several commands on one transaction inside one group-committed batch."""

from __future__ import annotations

from app.domain.lifecycle import FinishCmd, apply_finishes
from app.storage.db import write_transaction
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
