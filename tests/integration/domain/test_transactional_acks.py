"""Transactional acknowledgement (consume → process → produce exactly once) on both
stores: acks carried by a send are held while the transaction is unresolved, applied by
its commit in the same database transaction, released by its rollback or discard (the
check service's included); and a crash between any two steps neither loses nor doubles
an output, nor acknowledges an input without its output."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.domain import lifecycle as lifecycle_module
from app.errors import DatabaseUnavailable
from app.storage.schema import txn
from app.vocabulary import Op
from tests.integration.helpers import finish, row_counts, send
from tests.integration.transactional_ack_helpers import (
    GROUP,
    SUB,
    Clock,
    outputs,
    produce,
    receive,
    setup,
    state,
)
from tests.integration.transactional_ack_helpers import clock as clock_fixture

clock = clock_fixture


def test_acks_are_held_then_applied_by_the_commit(client: Any, clock: Clock) -> None:
    setup(client, 2)
    assert [m["offset"] for m in receive(client)] == [0, 1]
    sent = produce(client, "p1", [0, 1])
    assert sent.status_code == 201, sent.json
    clock.now += timedelta(minutes=10)  # the leases ran out long ago: still held
    assert receive(client) == []
    assert client.post(f"{SUB}/ack", json={"offsets": [0]}).json == {"acked": 0}
    assert client.post(f"{SUB}/nack", json={"offsets": [0], "delay_ms": 0}).json == {
        "nacked": 0}
    assert state(client)["ack_cursor"] == 0
    assert finish(client, "p1", "commit", GROUP).status_code == 200
    after = state(client)
    assert (after["ack_cursor"], after["backlog"]) == (2, 0)
    assert outputs(client) == Counter({0: 1, 1: 1})
    assert receive(client) == []


@pytest.mark.parametrize("resolution", ["rollback", "discard"])
def test_rollback_or_discard_releases_the_acks_at_once(app: Any, client: Any, clock: Clock,
                                                       resolution: str) -> None:
    setup(client, 1)
    receive(client)
    assert produce(client, "p1", [0]).status_code == 201
    if resolution == "rollback":
        assert finish(client, "p1", "rollback", GROUP).status_code == 200
    else:  # as the check service resolves an unanswered transaction
        lifecycle = app.extensions["txmsg"].lifecycle
        assert lifecycle.finish(GROUP, "p1", Op.DISCARD, source="checker",
                                check_times=15).applied
    again = receive(client)  # at once: not after the lease
    assert [(m["offset"], m["redelivery_count"]) for m in again] == [(0, 1)]
    assert outputs(client) == Counter()


def test_acks_that_cannot_be_held_refuse_the_send(app: Any, client: Any, clock: Clock) -> None:
    setup(client, 4)
    assert [m["offset"] for m in receive(client, 2)] == [0, 1]
    client.post(f"{SUB}/ack", json={"offsets": [1]})
    assert produce(client, "holder", [0]).status_code == 201
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    cases = [([2], 409, "ack_not_pending"),  # never delivered
             ([1], 409, "ack_not_pending"),  # acknowledged already
             ([0], 409, "ack_conflict")]  # held by another transaction
    for offsets, status, code in cases:
        r = produce(client, "other", offsets)
        assert (r.status_code, r.json["code"]) == (status, code), r.json
    r = send(client, GROUP, topic="out", body="x",
             acks=[{"topic": "in", "subscription": "nope", "offsets": [0]}])
    assert (r.status_code, r.json["code"]) == (404, "subscription_not_found")
    for acks, code in [([{"topic": "in", "subscription": "s", "offsets": [-1]}],
                        "invalid_offset"),
                       ([{"topic": "RMQ_SYS_X", "subscription": "s", "offsets": [0]}],
                        "reserved_topic"),
                       ([{"topic": "in", "subscription": "a b", "offsets": [0]}],
                        "invalid_subscription"),
                       ([{"topic": "in", "subscription": "s", "offsets": list(range(600))},
                         {"topic": "in", "subscription": "t", "offsets": list(range(401))}],
                        "too_many_acks")]:
        r = send(client, GROUP, topic="out", body="x", acks=acks)
        assert (r.status_code, r.json["code"]) == (400, code), r.json
    assert row_counts(engine) == before  # nothing written
    # a retried send: the same acks answer as before, others conflict
    assert produce(client, "holder", [0]).status_code == 200
    r = produce(client, "holder", [0, 3])
    assert (r.status_code, r.json["code"]) == (409, "transaction_id_conflict")
    with engine.connect() as conn:
        assert conn.execute(select(txn.c.held_acks).where(
            txn.c.transaction_id == "holder")).scalar_one() == 1


def test_a_crash_between_any_two_steps_neither_loses_nor_doubles(
        app: Any, client: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs 0..5, each processed once with a crash at another point:
    0 after receive (lease runs out); 1 after the send (the check service discards it);
    2 after the send, the producer restarts and sends and commits the same transaction
    again; 3 inside the commit's database transaction; 4 after the commit, its answer
    lost (the commit is repeated); 5 none. Then a healthy consumer drains the rest."""
    setup(client, 6)
    lifecycle = app.extensions["txmsg"].lifecycle
    got = {m["offset"]: m for m in receive(client)}
    assert sorted(got) == list(range(6))

    def txid(offset: int) -> str:
        return f"proc-{offset}-{got[offset]['redelivery_count']}"

    # 1: sent, never committed; the producer is gone, the checker gives up
    assert produce(client, txid(1), [1]).status_code == 201
    assert lifecycle.finish(GROUP, txid(1), Op.DISCARD, source="checker", check_times=15).applied
    # 2: sent; after a restart the same transaction is sent again and committed
    assert produce(client, txid(2), [2]).status_code == 201
    assert produce(client, txid(2), [2]).status_code == 200
    assert finish(client, txid(2), "commit", GROUP).status_code == 200
    # 3: the commit's database transaction fails after the acks were applied in it
    assert produce(client, txid(3), [3]).status_code == 201
    real = lifecycle_module.finishes.record_finishes

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailable("database unavailable: server went away")

    monkeypatch.setattr(lifecycle_module.finishes, "record_finishes", crash)
    assert finish(client, txid(3), "commit", GROUP).status_code == 503
    monkeypatch.setattr(lifecycle_module.finishes, "record_finishes", real)
    assert state(client)["ack_cursor"] == 0 and outputs(client)[3] == 0  # neither happened
    assert finish(client, txid(3), "commit", GROUP).status_code == 200  # the retry
    # 4: committed, its answer lost: the commit is repeated
    assert produce(client, txid(4), [4]).status_code == 201
    first = finish(client, txid(4), "commit", GROUP)
    assert finish(client, txid(4), "commit", GROUP).json == first.json
    # 5: no crash
    assert produce(client, txid(5), [5]).status_code == 201
    assert finish(client, txid(5), "commit", GROUP).status_code == 200
    # every input acknowledged so far has exactly its output
    assert outputs(client) == Counter({2: 1, 3: 1, 4: 1, 5: 1})

    clock.now += timedelta(seconds=2)  # 0's lease runs out; 1 was released by the discard
    while True:  # a healthy consumer drains what is left
        batch = receive(client)
        if not batch:
            break
        for m in batch:
            got[m["offset"]] = m
            assert produce(client, txid(m["offset"]), [m["offset"]]).status_code == 201
            assert finish(client, txid(m["offset"]), "commit", GROUP).status_code == 200
    assert outputs(client) == Counter(dict.fromkeys(range(6), 1))
    final = state(client)
    assert (final["ack_cursor"], final["backlog"], final["in_flight"]) == (6, 0, 0)
