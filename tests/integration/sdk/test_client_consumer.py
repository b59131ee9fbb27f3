"""The SDK's Consumer against the real API over HTTP, on both stores."""

from __future__ import annotations

import json
from typing import Any

import pytest
from txmsg_client import Consumer, Producer, ReceivedMessage, TxmsgError, message

from tests.conftest import LiveServer


@pytest.fixture
def producer(live_server: LiveServer) -> Producer:
    p = Producer(live_server.url, "shop")
    p.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
    return p


@pytest.fixture
def consumer(live_server: LiveServer) -> Consumer:
    c = Consumer(live_server.url, "orders", "billing")
    c.subscribe(initial_position="earliest", redelivery_backoff={"min_ms": 0, "max_ms": 0})
    return c


def publish(producer: Producer, *bodies: str) -> None:
    producer.commit(producer.send([message("orders", b) for b in bodies])["transaction_id"])


def test_receive_ack_nack_seek(consumer: Consumer, producer: Producer) -> None:
    publish(producer, "a", "b")
    a, b = consumer.receive(max_messages=10, wait_ms=1000)
    assert (a.offset, a.body, b.offset, b.body) == (0, "a", 1, "b")
    assert consumer.ack([a]) == 1 and consumer.nack([b]) == 1
    [again] = consumer.receive()
    assert (again.offset, again.redelivery_count) == (1, 1)
    assert consumer.renew([again]) == 1 and consumer.ack([again]) == 1
    assert consumer.describe()["backlog"] == 0
    consumer.seek(1)
    assert [m.body for m in consumer.receive()] == ["b"]
    with pytest.raises(TxmsgError) as err:
        Consumer(consumer.base_url, "orders", "nobody").ack([0])
    assert (err.value.status, err.value.code) == (404, "subscription_not_found")


def test_run_acks_and_nacks(consumer: Consumer, producer: Producer) -> None:
    publish(producer, "ok", "fails once", "ok too")
    seen: list[tuple[str | None, int]] = []

    def handle(m: ReceivedMessage) -> None:
        seen.append((m.body, m.redelivery_count))
        if m.body == "fails once" and not m.redelivery_count:
            raise RuntimeError("try again")
        if m.redelivery_count:
            consumer.stop()

    stats = consumer.run(handle, wait_ms=1000)
    assert seen == [("ok", 0), ("fails once", 0), ("ok too", 0), ("fails once", 1)]
    assert (stats.acked, stats.nacked) == (3, 1)
    assert consumer.describe()["backlog"] == 0


def test_run_with_a_producer_publishes_and_acks_in_one_transaction(
        consumer: Consumer, producer: Producer) -> None:
    publish(producer, *(json.dumps({"n": n}) for n in range(3)))

    def double(m: ReceivedMessage) -> Any:
        n = json.loads(m.body or "")["n"]
        if n == 2:
            consumer.stop()
        return message("doubled", str(2 * n), properties={"input": str(m.offset)})

    stats = consumer.run(double, producer=producer, max_messages=10, wait_ms=1000)
    assert (stats.transactions, stats.published, stats.acked) == (1, 3, 3)
    page = producer.read("doubled")["messages"]
    assert [(m["body"], m["properties"]["input"]) for m in page] == \
        [("0", "0"), ("2", "1"), ("4", "2")]
    assert {m["transaction_id"] for m in page} == {page[0]["transaction_id"]}
    assert producer.get(page[0]["transaction_id"])["state"] == "COMMITTED"
    assert consumer.describe()["backlog"] == 0
