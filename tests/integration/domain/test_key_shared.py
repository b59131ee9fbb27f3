"""Key_Shared subscriptions and tag filters through the API on both stores: one message of
an ordering key in flight at a time, in offset order; keys independent (a key waiting on
a redelivery, a backoff, a transaction or a dead letter holds back only itself); messages
without a key as on shared; RocketMQ's tag filter on every type."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from app import metrics
from tests.integration.helpers import finish, register, send
from tests.integration.subscription_helpers import (
    SUBS,
    create,
    describe,
    offsets,
    post,
    receive,
)
from tests.integration.transactional_ack_helpers import Clock, clock

__all__ = ["clock"]


def _commit(client: Any, messages: list[dict[str, Any]]) -> list[int]:
    sent = send(client, messages=[{"topic": "t", "body": f"m{i}", **m}
                                  for i, m in enumerate(messages)])
    assert sent.status_code == 201, sent.json
    done = finish(client, sent.json["transaction_id"], "commit")
    assert done.status_code == 200, done.json
    return [m["offset"] for m in done.json["messages"]]


def _keys(*keys: str | None) -> list[dict[str, Any]]:
    return [{} if k is None else {"ordering_key": k} for k in keys]


def _start(client: Any, **settings: Any) -> None:
    register(client)
    create(client, type="key_shared", initial_position="earliest",
           redelivery_backoff={"min_ms": 1000, "max_ms": 1000}, **settings)


def test_one_message_of_a_key_in_flight_at_a_time_in_offset_order(client: Any) -> None:
    redelivered = metrics.REDELIVERIES.labels("t", "s")._value.get()
    _start(client)
    _commit(client, _keys("A", "A", "B", "A", "B", "C"))
    first = receive(client)
    assert offsets(first) == [0, 2, 5]
    assert [m["ordering_key"] for m in first] == ["A", "B", "C"]
    assert receive(client) == []
    assert describe(client)["waiting"] == 3
    assert post(client, "ack", {"offsets": [2]}) == {"acked": 1}
    assert offsets(receive(client)) == [4]  # B's next; A's waits for 0
    assert post(client, "ack", {"offsets": [0, 4, 5]}) == {"acked": 3}
    assert offsets(receive(client)) == [1]
    assert post(client, "ack", {"offsets": [1]}) == {"acked": 1}
    assert offsets(receive(client)) == [3]
    assert post(client, "ack", {"offsets": [3]}) == {"acked": 1}
    assert receive(client) == []
    described = describe(client)
    assert (described["backlog"], described["waiting"], described["ack_cursor"]) == (0, 0, 6)
    # each went once: a message made due behind its key is a first delivery
    assert metrics.REDELIVERIES.labels("t", "s")._value.get() == redelivered


def test_a_key_waiting_on_a_redelivery_holds_back_only_itself(client: Any,
                                                             clock: Clock) -> None:
    _start(client, ack_timeout_ms=5000)
    _commit(client, _keys("A", "B", "A", "B"))
    assert offsets(receive(client)) == [0, 1]
    assert post(client, "nack", {"offsets": [0], "delay_ms": 10_000}) == {"nacked": 1}
    assert post(client, "ack", {"offsets": [1]}) == {"acked": 1}
    assert offsets(receive(client)) == [3]  # B goes on; A's 2 waits behind 0
    clock.now += timedelta(milliseconds=10_000)
    # 0 comes again; 3's lease ran out at 5 s and its backoff is over too
    assert offsets(receive(client)) == [0, 3]
    assert post(client, "ack", {"offsets": [0, 3]}) == {"acked": 2}
    assert offsets(receive(client)) == [2]


def test_a_dead_lettered_message_frees_its_key(client: Any, clock: Clock) -> None:
    _start(client, ack_timeout_ms=1000, max_redeliveries=0)
    _commit(client, _keys("A", "A"))
    assert offsets(receive(client)) == [0]
    clock.now += timedelta(milliseconds=2000)
    assert offsets(receive(client)) == [1]  # 0 went to the dead-letter topic
    dead = client.get("/v1/topics/t-s-DLQ/messages?from_offset=0").json["messages"]
    assert [m["properties"]["ORIGIN_OFFSET"] for m in dead] == ["0"]


def test_messages_without_a_key_go_as_on_shared(client: Any) -> None:
    _start(client)
    _commit(client, _keys(None, "A", None, "A", None))
    assert offsets(receive(client, 2)) == [0, 1]
    assert offsets(receive(client)) == [2, 4]
    assert post(client, "ack", {"offsets": [1]}) == {"acked": 1}
    assert offsets(receive(client)) == [3]


def test_a_transactional_ack_holds_the_next_message_of_its_key(client: Any) -> None:
    _start(client)
    register(client, "out-svc")
    _commit(client, _keys("A", "A"))
    assert offsets(receive(client)) == [0]
    held = send(client, "out-svc", transaction_id="x1", messages=[{"topic": "out", "body": "o"}],
                acks=[{"topic": "t", "subscription": "s", "offsets": [0]}])
    assert held.status_code == 201, held.json
    assert receive(client) == []
    assert finish(client, "x1", "commit", "out-svc").status_code == 200
    assert offsets(receive(client)) == [1]


def test_a_rolled_back_transactional_ack_gives_the_key_back_to_its_message(
        client: Any) -> None:
    _start(client)
    register(client, "out-svc")
    _commit(client, _keys("A", "A"))
    assert offsets(receive(client)) == [0]
    send(client, "out-svc", transaction_id="x2", messages=[{"topic": "out", "body": "o"}],
         acks=[{"topic": "t", "subscription": "s", "offsets": [0]}])
    assert finish(client, "x2", "rollback", "out-svc").status_code == 200
    assert offsets(receive(client)) == [0]


def test_a_seek_keeps_the_order_of_keys(client: Any) -> None:
    _start(client)
    _commit(client, _keys("A", "A", "B"))
    assert offsets(receive(client)) == [0, 2]
    post(client, "seek", {"offset": 0})
    assert offsets(receive(client)) == [0, 2]
    assert post(client, "ack", {"offsets": [0]}) == {"acked": 1}
    assert offsets(receive(client)) == [1]


def test_a_shared_subscription_that_becomes_key_shared_keeps_keys_in_order(
        client: Any) -> None:
    register(client)
    create(client, initial_position="earliest")
    _commit(client, _keys("A", "A", "B"))
    assert offsets(receive(client, 3)) == [0, 1, 2]
    post(client, "nack", {"offsets": [0, 1, 2], "delay_ms": 0})
    assert client.put(f"{SUBS}/s", json={"type": "key_shared"}).status_code == 200
    assert offsets(receive(client)) == [0, 2]
    assert client.put(f"{SUBS}/s", json={"type": "shared"}).status_code == 409
    post(client, "nack", {"offsets": [0, 2], "delay_ms": 0})
    assert client.put(f"{SUBS}/s", json={"type": "shared"}).status_code == 200
    assert offsets(receive(client)) == [0, 1, 2]


@pytest.mark.parametrize("kind", ["shared", "key_shared", "failover", "exclusive"])
def test_a_tag_filter_delivers_only_its_tags(client: Any, kind: str) -> None:
    register(client)
    create(client, type=kind, initial_position="earliest", tag_filter="created || paid")
    _commit(client, [{"tag": "created"}, {"tag": "shipped"}, {}, {"tag": "paid"},
                     {"tag": "created "}])
    got = client.post(f"{SUBS}/s/receive", json={"max_messages": 10, "consumer": "a"}).json
    assert [(m["offset"], m["tag"]) for m in got["messages"]] == [(0, "created"), (3, "paid")]
    post(client, "ack", {"offsets": [0, 3]})
    described = describe(client)
    assert (described["backlog"], described["ack_cursor"]) == (0, 5)


def test_a_changed_tag_filter_applies_to_messages_not_yet_delivered(client: Any,
                                                                   clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest")
    _commit(client, [{"tag": "a", "deliver_after_ms": 5000}, {"tag": "b"}, {"tag": "a"}])
    assert offsets(receive(client, 1)) == [1]
    r = client.put(f"{SUBS}/s", json={"tag_filter": "b"})
    assert r.status_code == 200 and r.json["tag_filter"] == "b"
    clock.now += timedelta(milliseconds=6000)
    assert receive(client) == []  # 0 (delayed, never delivered) and 2 are filtered out
    assert describe(client)["backlog"] == 1  # 1, leased


@pytest.mark.parametrize("bad", ["", "a||", "||", "a|b", "*||a"])
def test_a_malformed_tag_filter_is_refused_and_changes_nothing(client: Any, bad: str) -> None:
    register(client)
    r = client.put(f"{SUBS}/s", json={"tag_filter": bad})
    assert (r.status_code, r.json["code"]) == (400, "invalid_tag_filter")
    assert client.get(f"{SUBS}/s").status_code == 404


def test_messages_the_filter_leaves_out_are_not_in_the_backlog(client: Any) -> None:
    register(client)
    create(client, initial_position="earliest", tag_filter="paid")
    _commit(client, [{"tag": "created"}, {"tag": "paid"}, {}, {"tag": "paid"}])
    described = describe(client)
    assert (described["backlog"], described["ack_cursor"]) == (2, 1)
    assert offsets(receive(client, 1)) == [1]
    post(client, "ack", {"offsets": [1]})
    described = describe(client)
    assert (described["backlog"], described["ack_cursor"]) == (1, 3)


def test_a_consumer_gone_quiet_gives_its_keys_back(client: Any, clock: Clock) -> None:
    _start(client, consumer_timeout_ms=2000, ack_timeout_ms=60_000)
    _commit(client, _keys("A", "A", "B"))
    r = client.post(f"{SUBS}/s/receive", json={"consumer": "a", "max_messages": 1})
    assert offsets(r.json["messages"]) == [0]
    clock.now += timedelta(milliseconds=1000)
    r = client.post(f"{SUBS}/s/receive", json={"consumer": "b"})
    assert offsets(r.json["messages"]) == [2]  # A is a's while a is alive
    clock.now += timedelta(milliseconds=1500)  # a's last call 2.5 s ago, b's 1.5 s ago
    r = client.post(f"{SUBS}/s/receive", json={"consumer": "b"})
    assert offsets(r.json["messages"]) == [0]
    assert [c["name"] for c in describe(client)["consumers"]] == ["b"]
