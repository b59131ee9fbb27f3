"""Consume → process → produce with ``Consumer.run(handler, producer=...)`` against a real
``txmsg serve``: outputs published with their inputs' acknowledgement in one transaction,
exactly once when the service fails to answer on the way."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import requests
from conftest import Service
from txmsg_client import Consumer, Producer, ReceivedMessage, TxmsgError, message


@pytest.fixture
def producer(service: Service) -> Producer:
    p = Producer(service.url, "sdk-relay")
    p.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
    return p


@pytest.fixture
def consumer(service: Service, producer: Producer, topic: str) -> Consumer:
    c = Consumer(service.url, topic, "relay")
    c.subscribe(initial_position="earliest", redelivery_backoff={"min_ms": 0, "max_ms": 0})
    sent = producer.send([message(topic, json.dumps({"n": n})) for n in range(5)])
    producer.commit(sent["transaction_id"])
    return c


def doubled(topic: str) -> Any:
    def handle(m: ReceivedMessage) -> Any:
        n = json.loads(m.body or "")["n"]
        if n == 3 and m.redelivery_count == 0:
            raise ValueError("fails once")
        if n == 4:
            return None  # nothing to publish for this one: acknowledged all the same
        return [message(f"{topic}-out", str(2 * n), properties={"input": str(m.offset)})]
    return handle


def published(producer: Producer, topic: str) -> Counter[str]:
    page = producer.read(f"{topic}-out", limit=1000)["messages"]
    return Counter(m["properties"]["input"] for m in page)


def run_until_idle(consumer: Consumer, handler: Any, producer: Producer) -> list[Any]:
    """Batches until a receive comes back empty."""
    results = []
    while batch := consumer.receive(max_messages=10):
        results.append(consumer.handle(batch, handler, producer=producer))
    return results


def test_outputs_and_input_acks_go_in_one_transaction(
        consumer: Consumer, producer: Producer, topic: str) -> None:
    first, second = run_until_idle(consumer, doubled(topic), producer)
    assert (first.acked, first.nacked) == ([0, 1, 2, 4], [3])
    assert len(first.transactions) == 1 and [m["topic"] for m in first.published] == \
        [f"{topic}-out"] * 3
    assert producer.get(first.transactions[0])["state"] == "COMMITTED"
    assert (second.acked, second.nacked, len(second.transactions)) == ([3], [], 1)
    assert published(producer, topic) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    assert consumer.describe()["backlog"] == 0


def test_run_with_a_producer(consumer: Consumer, producer: Producer, topic: str) -> None:
    handle = doubled(topic)

    def stop_when_done(m: ReceivedMessage) -> Any:
        if m.redelivery_count:
            consumer.stop()
        return handle(m)

    stats = consumer.run(stop_when_done, producer=producer, wait_ms=1000)
    assert (stats.acked, stats.nacked, stats.published, stats.transactions) == (5, 1, 4, 2)
    assert sorted(published(producer, topic)) == ["0", "1", "2", "3"]


class Unanswered(Producer):
    """A producer whose commits reach the service (or not) but whose answers are lost."""

    def __init__(self, *args: Any, applied: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied = applied
        self.commits = 0

    def commit(self, transaction_id: str) -> dict[str, Any]:
        self.commits += 1
        if self.applied:
            super().commit(transaction_id)
        raise requests.ConnectionError("the answer was lost")


@pytest.mark.parametrize("applied", [False, True], ids=["commit lost", "answer lost"])
def test_a_commit_without_an_answer_publishes_once(
        service: Service, consumer: Consumer, producer: Producer, topic: str,
        applied: bool) -> None:
    flaky = Unanswered(service.url, "sdk-relay", applied=applied)
    result = consumer.handle(consumer.receive(max_messages=3), doubled(topic), producer=flaky)
    assert flaky.commits >= 2 and result.errors
    if applied:  # the rollback found it committed: done, once
        assert result.acked == [0, 1, 2] and result.released == []
        assert published(producer, topic) == Counter({"0": 1, "1": 1, "2": 1})
    else:  # rolled back: nothing published, the inputs redelivered at once
        assert result.acked == [] and result.released == [0, 1, 2]
        assert published(producer, topic) == Counter()
    run_until_idle(consumer, doubled(topic), producer)
    assert published(producer, topic) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    assert consumer.describe()["backlog"] == 0


def test_a_refused_transaction_gives_its_inputs_back(
        consumer: Consumer, producer: Producer, topic: str) -> None:
    batch = consumer.receive(max_messages=2)
    consumer.ack([batch[0]])  # acknowledged elsewhere meanwhile: the send is refused
    result = consumer.handle(batch, doubled(topic), producer=producer)
    assert result.acked == [] and result.released == [0, 1]
    assert [e.code for e in result.errors] == ["ack_not_pending"]  # type: ignore[attr-defined]
    assert published(producer, topic) == Counter()
    assert [m.offset for m in consumer.receive(max_messages=1)] == [1]


class RefusedForItsAcks(Producer):
    """A commit the service refuses for its acks (a late commit whose inputs were
    acknowledged, or taken by another transaction, after a check discarded it)."""

    def __init__(self, *args: Any, code: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.code = code
        self.committing: list[str] = []

    def commit(self, transaction_id: str) -> dict[str, Any]:
        self.committing.append(transaction_id)
        raise TxmsgError(409, self.code, "its acks were taken meanwhile")


@pytest.mark.parametrize("code", ["ack_not_pending", "ack_conflict"])
def test_a_commit_refused_for_its_acks_is_rolled_back(
        service: Service, consumer: Consumer, producer: Producer, topic: str,
        code: str) -> None:
    """The transaction is left unresolved by such a refusal: the consumer rolls it back
    (not left to the checks, holding nothing it could commit) and gives its inputs back."""
    refused = RefusedForItsAcks(service.url, "sdk-relay", code=code)
    result = consumer.handle(consumer.receive(max_messages=3), doubled(topic), producer=refused)
    assert [e.code for e in result.errors] == [code]  # type: ignore[attr-defined]
    assert result.acked == [] and result.released == [0, 1, 2]
    (txid,) = set(refused.committing)
    assert producer.get(txid)["state"] == "ROLLED_BACK"
    run_until_idle(consumer, doubled(topic), producer)
    assert published(producer, topic) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
