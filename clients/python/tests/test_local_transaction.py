"""``Producer.local_transaction``: the half message, the producer's database transaction with
its barrier row, then the commit, against a real ``txmsg serve``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import requests

sqlalchemy = pytest.importorskip("sqlalchemy")

from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from txmsg_client import Producer, Resolution, message
from txmsg_client.barrier import Barrier, RolledBackByCheck
from txmsg_client.errors import AlreadyCommitted

metadata = MetaData()
orders = Table("orders", metadata, Column("id", Integer, primary_key=True),
               Column("transaction_id", String(128), nullable=False))


@pytest.fixture
def barrier(engine: Any) -> Barrier:
    made = Barrier(engine)
    made.create_table()
    metadata.create_all(engine)
    return made


def order_count(barrier: Barrier) -> int:
    with barrier.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(orders)).scalar_one())


def test_both_commit(producer: Producer, barrier: Barrier, topic: str) -> None:
    with producer.local_transaction(barrier, [message(topic, "order 1")]) as local:
        assert local.state == "PREPARED"
        local.connection.execute(orders.insert().values(id=1,
                                                        transaction_id=local.transaction_id))
    assert local.state == "COMMITTED" and local.end_error is None
    assert [m["offset"] for m in local.messages] == [0]
    assert order_count(barrier) == 1
    assert producer.read(topic)["messages"][0]["body"] == "order 1"
    assert barrier.checker.check({"producer_group": producer.group,
                                  "transaction_id": local.transaction_id}) is Resolution.COMMIT


def test_an_exception_in_the_block_rolls_both_back(producer: Producer, barrier: Barrier,
                                                   topic: str) -> None:
    with pytest.raises(KeyError, match="out of stock"), \
            producer.local_transaction(barrier, message(topic, "order 2")) as local:
        local.connection.execute(orders.insert().values(id=2,
                                                        transaction_id=local.transaction_id))
        raise KeyError("out of stock")
    assert order_count(barrier) == 0
    assert producer.get(local.transaction_id)["state"] == "ROLLED_BACK"
    assert local.state == "PREPARED"
    assert barrier.checker.check({"producer_group": producer.group,
                                  "transaction_id": local.transaction_id}) is \
        Resolution.ROLLBACK


def test_a_commit_that_cannot_reach_the_service_is_left_to_the_check(
        producer: Producer, barrier: Barrier, topic: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def unreachable(transaction_id: str) -> dict[str, Any]:
        raise requests.ConnectionError("the service is gone")

    monkeypatch.setattr(producer, "commit", unreachable)
    with producer.local_transaction(barrier, message(topic, "order 3")) as local:
        local.connection.execute(orders.insert().values(id=3,
                                                        transaction_id=local.transaction_id))
    assert local.state == "PREPARED"
    assert isinstance(local.end_error, requests.ConnectionError)
    assert "the check will" in caplog.text
    assert order_count(barrier) == 1
    assert producer.get(local.transaction_id)["state"] == "PREPARED"
    # what the service's check then hears
    assert barrier.checker.check({"producer_group": producer.group,
                                  "transaction_id": local.transaction_id}) is Resolution.COMMIT


def test_a_transaction_the_check_rolled_back_does_not_run(producer: Producer, barrier: Barrier,
                                                          topic: str) -> None:
    txid = f"slow-{uuid.uuid4().hex}"
    assert barrier.checker.check({"producer_group": producer.group,
                                  "transaction_id": txid}) is Resolution.ROLLBACK
    ran = []
    with pytest.raises(RolledBackByCheck), \
            producer.local_transaction(barrier, message(topic, "late"), transaction_id=txid):
        ran.append(True)
    assert ran == []
    assert producer.get(txid)["state"] == "ROLLED_BACK"


def test_send_in_transaction_is_unchanged(producer: Producer, topic: str) -> None:
    done = producer.send_in_transaction(message(topic, "x"), lambda sent: Resolution.COMMIT)
    assert done.state == "COMMITTED"


def test_a_retry_after_the_local_commit_commits_and_does_not_run_again(
        producer: Producer, barrier: Barrier, topic: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer died after its database commit, before txmsg's; run again with the same
    transaction id, the block does not run twice and the messages are committed."""
    real_commit = producer.commit

    def lost(transaction_id: str) -> dict[str, Any]:
        raise requests.ConnectionError("the producer died here")

    monkeypatch.setattr(producer, "commit", lost)
    txid = f"order-{uuid.uuid4().hex[:8]}"
    with producer.local_transaction(barrier, message(topic, "order 7"),
                                    transaction_id=txid) as local:
        local.connection.execute(orders.insert().values(id=7, transaction_id=txid))
    assert local.state == "PREPARED"
    monkeypatch.setattr(producer, "commit", real_commit)
    ran = []
    with pytest.raises(AlreadyCommitted), \
            producer.local_transaction(barrier, message(topic, "order 7"),
                                       transaction_id=txid) as again:
        ran.append(again)
    assert ran == [] and order_count(barrier) == 1
    assert producer.get(txid)["state"] == "COMMITTED"
    assert [m["body"] for m in producer.read(topic)["messages"]] == ["order 7"]
