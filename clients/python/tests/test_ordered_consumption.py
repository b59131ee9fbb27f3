"""Ordered consumption against a real ``txmsg serve``: consumer names, the subscription
types, tag filters, cumulative acks, a key's order in the run loop, and consumers of
several topics (a list, or a pattern)."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from conftest import Service, wait_until
from txmsg_client import Consumer, Producer, ReceivedMessage, TxmsgError, message

NO_BACKOFF = {"min_ms": 0, "max_ms": 0}


@pytest.fixture
def producer(service: Service) -> Producer:
    p = Producer(service.url, "sdk-ordered-tests")
    p.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
    return p


def publish(producer: Producer, topic: str, *bodies: str, **fields: Any) -> list[int]:
    sent = producer.send([message(topic, b, **fields) for b in bodies])
    return [m["offset"] for m in producer.commit(sent["transaction_id"])["messages"]]


def names(consumer: Consumer, topic: str | None = None) -> set[str]:
    return {c["name"] for c in consumer.describe(topic)["consumers"]}


def test_subscribe_sends_only_the_settings_given(service: Service, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    created = consumer.subscribe(type="failover", consumer_timeout_ms=5000,
                                 tag_filter="created || paid")
    assert (created["type"], created["consumer_timeout_ms"], created["tag_filter"]) == (
        "failover", 5000, "created||paid")
    changed = consumer.subscribe(ack_timeout_ms=60_000)  # the rest kept
    assert (changed["type"], changed["consumer_timeout_ms"], changed["tag_filter"],
            changed["ack_timeout_ms"]) == ("failover", 5000, "created||paid", 60_000)


def test_a_consumer_is_known_by_its_name_until_it_leaves(
        service: Service, producer: Producer, topic: str) -> None:
    watcher = Consumer(service.url, topic, "billing")
    watcher.subscribe(initial_position="earliest")
    publish(producer, topic, "a")
    with Consumer(service.url, topic, "billing", consumer="worker-1") as consumer:
        [got] = consumer.receive()
        assert got.body == "a" and got.ordering_key is None
        assert consumer.consumer in names(watcher)
    # closed: it left, and its lease was released at once
    assert consumer.consumer not in names(watcher)
    assert watcher.describe()["in_flight"] == 0
    assert [m.body for m in watcher.receive()] == ["a"]


def test_the_default_name_is_the_host_and_process(service: Service, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe()
    consumer.receive()
    assert consumer.consumer.endswith(f"-{os.getpid()}")
    assert names(consumer) == {consumer.consumer}
    consumer.close()


def test_failover_serves_the_active_consumer_and_acks_cumulatively(
        service: Service, producer: Producer, topic: str) -> None:
    first = Consumer(service.url, topic, "billing", consumer="a-first")
    second = Consumer(service.url, topic, "billing", consumer="b-second")
    first.subscribe(type="failover", initial_position="earliest",
                    redelivery_backoff=NO_BACKOFF)
    assert first.receive() == [] and second.receive() == []  # both known: a-first active
    publish(producer, topic, "1", "2", "3")
    assert second.receive() == []  # the standby
    got = first.receive()
    assert [m.body for m in got] == ["1", "2", "3"]
    with pytest.raises(TxmsgError) as err:
        second.ack_cumulative(got[1])
    assert (err.value.status, err.value.code) == (409, "not_active_consumer")
    assert first.ack_cumulative(got[1]) == 2
    assert first.describe()["backlog"] == 1
    first.close()  # leaves: the standby takes over, the lease on "3" released
    assert [m.body for m in second.receive()] == ["3"]
    second.close()


def test_exclusive_refuses_a_second_consumer(service: Service, producer: Producer,
                                             topic: str) -> None:
    holder = Consumer(service.url, topic, "billing", consumer="holder")
    other = Consumer(service.url, topic, "billing", consumer="other")
    holder.subscribe(type="exclusive", initial_position="earliest")
    publish(producer, topic, "x")
    assert [m.body for m in holder.receive()] == ["x"]
    with pytest.raises(TxmsgError) as err:
        other.receive()
    assert (err.value.status, err.value.code) == (409, "subscription_busy")
    holder.close()
    assert [m.body for m in other.receive()] == ["x"]
    other.close()


def test_cumulative_acks_are_refused_on_a_shared_subscription(
        service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe(initial_position="earliest")
    publish(producer, topic, "x")
    [got] = consumer.receive()
    with pytest.raises(TxmsgError) as err:
        consumer.ack_cumulative(got)
    assert (err.value.status, err.value.code) == (400, "cumulative_ack_unsupported")
    consumer.close()


def test_a_tag_filter_delivers_only_its_tags(service: Service, producer: Producer,
                                             topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe(initial_position="earliest", tag_filter="created || paid")
    publish(producer, topic, "c", tag="created")
    publish(producer, topic, "s", tag="shipped")
    publish(producer, topic, "p", tag="paid")
    publish(producer, topic, "none")
    got = consumer.receive()
    assert [(m.body, m.tag) for m in got] == [("c", "created"), ("p", "paid")]
    consumer.close()


def test_run_keeps_a_keys_order_when_its_handler_fails(
        service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing", consumer="orderly")
    consumer.subscribe(type="exclusive", initial_position="earliest",
                       redelivery_backoff=NO_BACKOFF)
    sent = producer.send([message(topic, body, ordering_key=body[0])
                          for body in ("a1", "b1", "a2", "b2")])
    producer.commit(sent["transaction_id"])
    handled: list[str] = []

    def handle(m: ReceivedMessage) -> None:
        assert m.ordering_key == (m.body or "")[0]
        handled.append(m.body or "")
        if m.body == "a1" and m.redelivery_count == 0:
            raise ValueError("a failure the next try gets past")
        if len(handled) == 5:
            consumer.stop()

    stats = consumer.run(handle, max_messages=10, wait_ms=1000)
    assert handled == ["a1", "b1", "b2", "a1", "a2"]  # a2 never before a1
    assert (stats.nacked, stats.held, stats.acked) == (1, 1, 4)
    assert consumer.describe()["backlog"] == 0
    assert "orderly" not in names(consumer)  # run's end left the subscription


def test_key_shared_gives_one_message_of_a_key_at_a_time(
        service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe(type="key_shared", initial_position="earliest")
    sent = producer.send([message(topic, body, ordering_key=body[0])
                          for body in ("a1", "a2", "b1")])
    producer.commit(sent["transaction_id"])
    first = consumer.receive()
    assert sorted((m.body, m.ordering_key) for m in first) == [("a1", "a"), ("b1", "b")]
    assert consumer.receive() == []  # a2 waits for a1
    consumer.ack(first)
    assert [m.body for m in consumer.receive()] == ["a2"]
    consumer.close()


def test_a_consumer_of_several_topics(service: Service, producer: Producer) -> None:
    topics = [f"multi-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    consumer = Consumer(service.url, topics=topics, subscription="billing")
    described = consumer.subscribe(initial_position="earliest",
                                   redelivery_backoff=NO_BACKOFF)
    assert set(described) == set(topics) and consumer.topic is None
    for t in topics:
        publish(producer, t, *(f"{t}/{i}" for i in range(3)))
    seen: list[tuple[str, str]] = []

    def handle(m: ReceivedMessage) -> None:
        assert (m.body or "").startswith(m.topic)
        seen.append((m.topic, m.body or ""))
        if m.body == f"{topics[0]}/1" and m.redelivery_count == 0:
            raise ValueError("given back to its own topic's subscription")
        if len(seen) == 10:
            consumer.stop()

    stats = consumer.run(handle, max_messages=2, wait_ms=1000)
    assert sorted(set(seen)) == sorted((t, f"{t}/{i}") for t in topics for i in range(3))
    # each topic had its turn before any had all its messages handled
    assert {t for t, _ in seen[:6]} == set(topics)
    assert stats.acked == 9 and stats.nacked == 1
    for t in topics:
        assert consumer.describe(t)["backlog"] == 0
    with pytest.raises(ValueError):
        consumer.describe()  # which topic?
    with pytest.raises(ValueError):
        consumer.ack([0])  # a bare offset: of which topic?


def test_a_pattern_consumer_finds_new_topics(service: Service, producer: Producer) -> None:
    prefix = f"pat{uuid.uuid4().hex[:8]}"
    publish(producer, f"{prefix}-a", "a")
    publish(producer, f"other{prefix}-a", "not mine")
    consumer = Consumer(service.url, topics_pattern=f"{prefix}-.*", subscription="billing",
                        topics_refresh_seconds=0)
    consumer.subscribe(initial_position="earliest", type="failover")
    assert consumer.topics == [f"{prefix}-a"]
    got: list[str] = []
    publish(producer, f"{prefix}-b", "b")  # found at the next look, subscribed likewise
    wait_until(lambda: got.extend(m.body or "" for m in consumer.receive()) or len(got) == 2,
               what="both topics' messages")
    assert sorted(got) == ["a", "b"]
    assert consumer.topics == [f"{prefix}-a", f"{prefix}-b"]
    assert consumer.describe(f"{prefix}-b")["type"] == "failover"
    consumer.close()


def test_async_consumer_names_leaves_and_acks_cumulatively(
        service: Service, producer: Producer) -> None:
    pytest.importorskip("httpx")
    from txmsg_client.aio import AsyncConsumer

    topics = [f"amulti-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for t in topics:
        publish(producer, t, f"{t}/0", f"{t}/1")

    async def scenario() -> None:
        async with AsyncConsumer(service.url, topics=topics, subscription="billing",
                                 consumer="async-one") as consumer:
            await consumer.subscribe(type="exclusive", initial_position="earliest")
            got: list[ReceivedMessage] = []
            while len(got) < 4:
                got.extend(await consumer.receive(max_messages=10, wait_ms=1000))
            assert sorted(m.body or "" for m in got) == sorted(
                f"{t}/{i}" for t in topics for i in range(2))
            for t in topics:
                last = max((m for m in got if m.topic == t), key=lambda m: m.offset)
                assert await consumer.ack_cumulative(last) == 2
                state = await consumer.describe(t)
                assert state["backlog"] == 0
                assert [c["name"] for c in state["consumers"]] == ["async-one"]
        for t in topics:
            described = Consumer(service.url, t, "billing").describe()
            assert described["consumers"] == []  # left at aclose

    asyncio.run(scenario())
