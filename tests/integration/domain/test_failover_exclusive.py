"""Failover and exclusive subscriptions through the API on both stores: one consumer
served at a time, takeover when it leaves or goes quiet with its leases released at once,
offset order (a message given back comes again before any higher one), cumulative acks,
and the refusals the contract names."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.integration.helpers import register
from tests.integration.subscription_helpers import SUBS, commit, create, describe, offsets
from tests.integration.transactional_ack_helpers import Clock, clock

__all__ = ["clock"]


def _receive(client: Any, consumer: str | None, n: int = 10, name: str = "s") -> Any:
    body: dict[str, Any] = {"max_messages": n}
    if consumer is not None:
        body["consumer"] = consumer
    return client.post(f"{SUBS}/{name}/receive", json=body)


def _got(client: Any, consumer: str, n: int = 10) -> list[int]:
    r = _receive(client, consumer, n)
    assert r.status_code == 200, r.json
    return offsets(r.json["messages"])


def _ack(client: Any, body: dict[str, Any]) -> Any:
    return client.post(f"{SUBS}/s/ack", json=body)


def _start(client: Any, kind: str, n: int, **settings: Any) -> None:
    register(client)
    create(client, type=kind, initial_position="earliest",
           redelivery_backoff={"min_ms": 1000, "max_ms": 1000}, **settings)
    commit(client, n)


def test_failover_serves_the_active_consumer_and_lists_the_others(client: Any) -> None:
    _start(client, "failover", 6)
    assert _got(client, "b", 2) == [0, 1]
    assert _got(client, "a", 2) == []  # b is active while alive, though "a" sorts first
    assert _got(client, "b", 2) == [2, 3]
    consumers = {c["name"]: c for c in describe(client)["consumers"]}
    assert {n: (c["active"], c["in_flight"]) for n, c in consumers.items()} == {
        "a": (False, 0), "b": (True, 4)}


def test_a_failover_consumer_that_leaves_hands_over_its_leases_at_once(client: Any) -> None:
    _start(client, "failover", 6)
    assert _got(client, "a", 3) == [0, 1, 2]
    assert _ack(client, {"offsets": [0], "consumer": "a"}).json == {"acked": 1}
    assert _got(client, "b") == []
    left = client.delete(f"{SUBS}/s/consumers/a")
    assert left.status_code == 204
    # the standby resumes from the lowest unacknowledged offset, nothing skipped
    assert _got(client, "b") == [1, 2, 3, 4, 5]
    described = describe(client)
    assert [(c["name"], c["active"]) for c in described["consumers"]] == [("b", True)]


def test_a_quiet_failover_consumer_is_taken_over(client: Any, clock: Clock) -> None:
    _start(client, "failover", 4, consumer_timeout_ms=5000, ack_timeout_ms=60000)
    assert _got(client, "a", 2) == [0, 1]
    clock.now += timedelta(milliseconds=2000)
    assert _got(client, "b") == []  # a is still alive
    clock.now += timedelta(milliseconds=4000)  # a's last call 6 s ago, b's 4 s ago
    assert _got(client, "b") == [0, 1, 2, 3]
    r = _receive(client, "a")
    assert r.status_code == 200 and r.json["messages"] == []  # a is a standby now


def test_given_back_messages_come_again_before_any_higher_one(client: Any,
                                                             clock: Clock) -> None:
    _start(client, "failover", 8, ack_timeout_ms=5000)
    assert _got(client, "a", 4) == [0, 1, 2, 3]
    r = client.post(f"{SUBS}/s/nack", json={"offsets": [1], "delay_ms": 3000, "consumer": "a"})
    assert r.json == {"nacked": 1}
    assert _got(client, "a") == []  # 1 is not due yet, and nothing above it goes first
    clock.now += timedelta(milliseconds=3000)
    assert _got(client, "a", 3) == [1, 4, 5]
    # 0, 2, 3 (leased 5 s, then 1 s of backoff) are due again; 1, 4, 5 timed out but
    # wait for their backoff: only what is below 1 goes
    clock.now += timedelta(milliseconds=5500)
    assert _got(client, "a") == [0]
    clock.now += timedelta(milliseconds=500)
    assert _got(client, "a") == [1, 2, 3, 4, 5, 6, 7]


def test_cumulative_acks_by_the_active_consumer(client: Any) -> None:
    _start(client, "failover", 6)
    assert _got(client, "a", 4) == [0, 1, 2, 3]
    assert _got(client, "b") == []
    not_active = _ack(client, {"through": 2, "consumer": "b"})
    assert (not_active.status_code, not_active.json["code"]) == (409, "not_active_consumer")
    past = _ack(client, {"through": 4, "consumer": "a"})
    assert (past.status_code, past.json["code"]) == (409, "ack_not_pending")
    assert _ack(client, {"through": 2, "consumer": "a"}).json == {"acked": 3}
    assert _ack(client, {"through": 2, "consumer": "a"}).json == {"acked": 0}
    described = describe(client)
    assert (described["ack_cursor"], described["backlog"]) == (3, 3)
    client.delete(f"{SUBS}/s/consumers/a")
    assert _got(client, "b") == [3, 4, 5]


def test_exclusive_refuses_another_consumer_while_the_holder_is_alive(client: Any,
                                                                     clock: Clock) -> None:
    _start(client, "exclusive", 3, consumer_timeout_ms=2000)
    assert _got(client, "a", 1) == [0]
    busy = _receive(client, "b")
    assert (busy.status_code, busy.json["code"]) == (409, "subscription_busy")
    assert _got(client, "a", 1) == [1]
    clock.now += timedelta(milliseconds=2500)
    assert _got(client, "b") == [0, 1, 2]
    busy = _receive(client, "a")
    assert (busy.status_code, busy.json["code"]) == (409, "subscription_busy")


@pytest.mark.parametrize("kind", ["failover", "exclusive"])
def test_a_receive_or_cumulative_ack_without_a_consumer_is_refused(client: Any,
                                                                   kind: str) -> None:
    _start(client, kind, 2)
    r = _receive(client, None)
    assert (r.status_code, r.json["code"]) == (400, "consumer_required")
    r = _ack(client, {"through": 0})
    assert (r.status_code, r.json["code"]) == (400, "consumer_required")
    assert describe(client)["in_flight"] == 0


@pytest.mark.parametrize("kind", ["shared", "key_shared"])
def test_cumulative_acks_are_refused_where_offsets_are_acked_one_by_one(client: Any,
                                                                        kind: str) -> None:
    _start(client, kind, 2)
    assert _got(client, "a") == [0, 1]
    r = _ack(client, {"through": 1, "consumer": "a"})
    assert (r.status_code, r.json["code"]) == (400, "cumulative_ack_unsupported")
    assert describe(client)["in_flight"] == 2


@pytest.mark.parametrize("body", [{}, {"offsets": [1], "through": 1}, {"through": -1},
                                  {"offsets": [0], "consumer": "bad name"}])
def test_bad_acks_are_refused(client: Any, body: dict[str, Any]) -> None:
    _start(client, "failover", 2)
    assert _got(client, "a") == [0, 1]
    r = _ack(client, body)
    assert r.status_code == 400, r.json
    assert describe(client)["in_flight"] == 2


def test_the_type_changes_only_while_nothing_is_leased(client: Any) -> None:
    _start(client, "shared", 3)
    assert _got(client, "a", 1) == [0]
    r = client.put(f"{SUBS}/s", json={"type": "failover"})
    assert (r.status_code, r.json["code"]) == (409, "subscription_busy")
    assert describe(client)["type"] == "shared"
    assert _ack(client, {"offsets": [0]}).json == {"acked": 1}
    r = client.put(f"{SUBS}/s", json={"type": "failover"})
    assert r.status_code == 200 and r.json["type"] == "failover"
    r = client.put(f"{SUBS}/s", json={"ack_timeout_ms": 5000})
    assert (r.json["type"], r.json["ack_timeout_ms"]) == ("failover", 5000)
    # "a", seen on the shared subscription a moment ago, is alive and sorts first
    assert _got(client, "z") == []
    assert _got(client, "a") == [1, 2]
