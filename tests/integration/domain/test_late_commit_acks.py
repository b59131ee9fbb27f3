"""Late commits keep exactly-once (issue #23, item 1), on both stores: a transaction whose
holds were released (by a discard) takes its acks again when it is committed late, or
resumed; an input is acknowledged by at most one committed transaction, ever. And a seek
keeps the holds of unresolved transactions (item 9e)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.domain.lifecycle import FinishCmd, apply_finishes
from app.errors import ApiError
from app.storage.db import write_transaction
from app.storage.schema import subscription_offset, txn
from app.vocabulary import Op
from tests.integration.helpers import finish, row_counts
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


def discard(app: Any, txid: str) -> None:
    """As the check service does after the last unanswered check."""
    assert app.extensions["txmsg"].lifecycle.finish(GROUP, txid, Op.DISCARD, source="check",
                                                    check_times=15).applied


def txn_state(client: Any, txid: str) -> str:
    r = client.get(f"/v1/producer-groups/{GROUP}/transactions/{txid}")
    assert r.status_code == 200, r.json
    return str(r.json["state"])


def snapshot(app: Any, client: Any) -> dict[str, Any]:
    """Everything a refused commit must leave as it was."""
    engine = app.extensions["txmsg"].engine
    with engine.connect() as conn:
        offsets = sorted(tuple(r) for r in conn.execute(select(subscription_offset)))
        txns = sorted(tuple(r) for r in conn.execute(
            select(txn.c.transaction_id, txn.c.state, txn.c.held_acks, txn.c.check_times)))
    topics = client.get("/v1/topics").json["topics"]
    return {"rows": row_counts(engine), "offsets": offsets, "txns": txns, "topics": topics,
            "subscription": state(client)}


def refused(client: Any, txid: str, code: str) -> None:
    r = finish(client, txid, "commit", GROUP)
    assert (r.status_code, r.json.get("code")) == (409, code), r.json


def reacquired_elsewhere(app: Any, client: Any, clock: Clock) -> None:
    """The reproduction: T1 holds input 0, is discarded (its hold released); input 0 is
    delivered again and T2 commits with it."""
    setup(client, 1)
    receive(client)
    assert produce(client, "T1", [0]).status_code == 201
    discard(app, "T1")
    assert [m["offset"] for m in receive(client)] == [0]
    assert produce(client, "T2", [0]).status_code == 201
    assert finish(client, "T2", "commit", GROUP).status_code == 200


def test_a_late_commit_of_an_input_acknowledged_since_is_refused(
        app: Any, client: Any, clock: Clock) -> None:
    reacquired_elsewhere(app, client, clock)
    before = snapshot(app, client)
    refused(client, "T1", "ack_not_pending")
    assert snapshot(app, client) == before
    assert txn_state(client, "T1") == "DISCARDED"
    assert outputs(client) == Counter({0: 1})
    assert finish(client, "T1", "rollback", GROUP).status_code == 200


def test_a_resumed_transaction_whose_input_was_acknowledged_since_cannot_commit(
        app: Any, client: Any, clock: Clock) -> None:
    reacquired_elsewhere(app, client, clock)
    resumed = finish(client, "T1", "resume-check", GROUP)
    assert (resumed.status_code, resumed.json["state"]) == (200, "PREPARED")
    before = snapshot(app, client)
    refused(client, "T1", "ack_not_pending")
    with pytest.raises(ApiError) as by_checker:  # the producer answered a check: COMMIT
        app.extensions["txmsg"].lifecycle.finish(GROUP, "T1", Op.COMMIT, source="check")
    assert by_checker.value.code == "ack_not_pending"
    assert snapshot(app, client) == before
    assert txn_state(client, "T1") == "PREPARED"
    assert outputs(client) == Counter({0: 1})


@pytest.mark.parametrize("delivered_again", [False, True])
def test_a_late_commit_whose_inputs_are_free_takes_and_acknowledges_them(
        app: Any, client: Any, clock: Clock, delivered_again: bool) -> None:
    setup(client, 2)
    receive(client)
    assert produce(client, "T1", [0, 1]).status_code == 201
    discard(app, "T1")
    if delivered_again:  # leased to another consumer now, not acknowledged
        assert [m["offset"] for m in receive(client)] == [0, 1]
    assert finish(client, "T1", "commit", GROUP).status_code == 200
    after = state(client)
    assert (after["ack_cursor"], after["backlog"]) == (2, 0)
    clock.now += timedelta(minutes=10)
    assert receive(client) == []
    assert outputs(client) == Counter({0: 1, 1: 1})
    r = produce(client, "T3", [0])
    assert (r.status_code, r.json.get("code")) == (409, "ack_not_pending")


def test_a_late_commit_of_an_input_held_by_another_transaction_is_refused(
        app: Any, client: Any, clock: Clock) -> None:
    setup(client, 2)
    receive(client)
    assert produce(client, "T1", [0, 1]).status_code == 201
    discard(app, "T1")
    receive(client)
    assert produce(client, "T2", [1]).status_code == 201
    before = snapshot(app, client)
    refused(client, "T1", "ack_conflict")
    assert snapshot(app, client) == before
    assert txn_state(client, "T1") == "DISCARDED"
    # once T2 rolls back, nothing else holds them: T1's commit takes both
    assert finish(client, "T2", "rollback", GROUP).status_code == 200
    assert finish(client, "T1", "commit", GROUP).status_code == 200
    assert outputs(client) == Counter({0: 1, 1: 1})
    assert (state(client)["ack_cursor"], state(client)["backlog"]) == (2, 0)


def test_a_resume_takes_the_holds_again_when_it_can(app: Any, client: Any,
                                                    clock: Clock) -> None:
    setup(client, 1)
    receive(client)
    assert produce(client, "T1", [0]).status_code == 201
    discard(app, "T1")
    assert finish(client, "T1", "resume-check", GROUP).status_code == 200
    clock.now += timedelta(minutes=10)
    assert receive(client) == []  # held again: not redelivered
    assert client.post(f"{SUB}/ack", json={"offsets": [0]}).json == {"acked": 0}
    r = produce(client, "T2", [0])
    assert (r.status_code, r.json.get("code")) == (409, "ack_conflict")
    assert finish(client, "T1", "commit", GROUP).status_code == 200
    assert outputs(client) == Counter({0: 1})
    assert state(client)["ack_cursor"] == 1


def test_a_discard_and_a_late_commit_in_one_batch_acknowledge_the_input(
        app: Any, client: Any, clock: Clock) -> None:
    """The group-commit writer's batched path: the commit follows the discard that
    released its holds, in one database transaction."""
    setup(client, 1)
    receive(client)
    assert produce(client, "T1", [0]).status_code == 201
    with write_transaction(app.extensions["txmsg"].engine) as conn:
        out = apply_finishes(conn, [FinishCmd(GROUP, "T1", Op.DISCARD, "check", 15),
                                    FinishCmd(GROUP, "T1", Op.COMMIT)])
    assert [getattr(o, "applied", None) for o in out] == [True, True]
    assert (state(client)["ack_cursor"], state(client)["backlog"]) == (1, 0)
    clock.now += timedelta(minutes=10)
    assert receive(client) == []


def test_two_late_commits_of_one_input_in_one_batch(app: Any, client: Any,
                                                    clock: Clock) -> None:
    setup(client, 1)
    receive(client)
    for txid in ("T1", "T2"):
        assert produce(client, txid, [0]).status_code == 201
        discard(app, txid)
        receive(client)
    with write_transaction(app.extensions["txmsg"].engine) as conn:
        out = apply_finishes(conn, [FinishCmd(GROUP, "T1", Op.COMMIT),
                                    FinishCmd(GROUP, "T2", Op.COMMIT)])
    assert getattr(out[0], "applied", None) is True
    assert getattr(out[1], "code", None) == "ack_not_pending"
    assert outputs(client) == Counter({0: 1})
    assert txn_state(client, "T2") == "DISCARDED"


def test_a_seek_keeps_the_holds_of_unresolved_transactions(app: Any, client: Any,
                                                           clock: Clock) -> None:
    setup(client, 3)
    assert [m["offset"] for m in receive(client)] == [0, 1, 2]
    assert produce(client, "T1", [1]).status_code == 201
    client.post(f"{SUB}/seek", json={"offset": 0})
    assert [m["offset"] for m in receive(client)] == [0, 2]  # 1 stays held
    clock.now += timedelta(minutes=10)
    assert [m["offset"] for m in receive(client)] == [0, 2]
    r = produce(client, "T2", [1])
    assert (r.status_code, r.json.get("code")) == (409, "ack_conflict")
    assert client.post(f"{SUB}/ack", json={"offsets": [0, 1, 2]}).json == {"acked": 2}
    assert finish(client, "T1", "commit", GROUP).status_code == 200
    assert outputs(client) == Counter({1: 1})
    after = state(client)
    assert (after["ack_cursor"], after["backlog"]) == (3, 0)


@pytest.mark.parametrize("resolution", ["commit", "rollback"])
def test_a_seek_past_a_held_offset_leaves_it_to_its_transaction(
        app: Any, client: Any, clock: Clock, resolution: str) -> None:
    setup(client, 3)
    receive(client)
    assert produce(client, "T1", [1]).status_code == 201
    client.post(f"{SUB}/seek", json={"offset": 3})
    assert (state(client)["ack_cursor"], state(client)["backlog"]) == (1, 1)
    r = produce(client, "T2", [1])
    assert (r.status_code, r.json.get("code")) == (409, "ack_conflict")
    assert finish(client, "T1", resolution, GROUP).status_code == 200
    if resolution == "commit":
        assert receive(client) == []
        assert (state(client)["ack_cursor"], state(client)["backlog"]) == (3, 0)
    else:  # released: delivered again, once
        assert [m["offset"] for m in receive(client)] == [1]
