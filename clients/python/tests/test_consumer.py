"""The Consumer against a real ``txmsg serve``: receive, ack, nack, renew, seek, the run
loop and how it stops."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
from conftest import Service, wait_until
from txmsg_client import Consumer, Producer, ReceivedMessage, TxmsgError, message


@pytest.fixture
def producer(service: Service) -> Producer:
    p = Producer(service.url, "sdk-tests")
    p.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
    return p


def publish(producer: Producer, topic: str, *bodies: str | bytes, **fields: Any) -> list[int]:
    sent = producer.send([message(topic, b, **fields) for b in bodies])
    return [m["offset"] for m in producer.commit(sent["transaction_id"])["messages"]]


def test_receive_ack_nack_renew_seek(service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    created = consumer.subscribe(initial_position="earliest", ack_timeout_ms=60_000,
                                 redelivery_backoff={"min_ms": 0, "max_ms": 0})
    assert (created["ack_timeout_ms"], created["backlog"]) == (60_000, 0)
    publish(producer, topic, "first", keys=["k1"], tag="t", properties={"p": "v"})
    publish(producer, topic, b"\x00\xff")

    first, second = consumer.receive(max_messages=10)
    assert isinstance(first, ReceivedMessage)
    assert (first.topic, first.offset, first.body, first.body_bytes) == (topic, 0, "first",
                                                                         b"first")
    assert (first.keys, first.tag, first.properties) == (("k1",), "t", {"p": "v"})
    assert first.redelivery_count == 0 and first.message_id and first.committed_at
    assert (second.offset, second.body, second.body_bytes) == (1, None, b"\x00\xff")
    assert consumer.receive() == []  # both leased
    assert consumer.describe()["in_flight"] == 2

    assert consumer.renew([first, second]) == 2
    assert consumer.ack([first]) == 1
    assert consumer.ack([0]) == 0  # again: harmless
    assert consumer.nack([second]) == 1
    [again] = consumer.receive()  # a zero backoff: redelivered at once
    assert (again.offset, again.redelivery_count) == (1, 1)
    assert consumer.ack([again]) == 1
    assert consumer.describe()["backlog"] == 0

    consumer.seek(0)  # replay from the start
    assert [m.offset for m in consumer.receive()] == [0, 1]
    consumer.seek(2)
    assert consumer.describe()["backlog"] == 0

    assert consumer.ack([]) == consumer.nack([]) == consumer.renew([]) == 0
    consumer.unsubscribe()
    with pytest.raises(TxmsgError) as err:
        consumer.describe()
    assert (err.value.status, err.value.code) == (404, "subscription_not_found")


def test_refusals_raise_txmsg_error(service: Service, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    with pytest.raises(TxmsgError) as err:
        consumer.receive()
    assert err.value.code == "subscription_not_found"
    consumer.subscribe()
    with pytest.raises(TxmsgError) as err:
        consumer.receive(max_messages=0)
    assert err.value.status == 400 and err.value.problem["status"] == 400
    with pytest.raises(TxmsgError) as err:
        Consumer(service.url, "RMQ_SYS_TRANS_HALF_TOPIC", "s").subscribe()
    assert err.value.status == 400


def test_a_long_poll_gets_a_message_committed_while_it_waits(
        service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe()
    got: list[ReceivedMessage] = []
    waiting = threading.Thread(target=lambda: got.extend(consumer.receive(wait_ms=30_000)))
    waiting.start()
    publish(producer, topic, "late")
    waiting.join(timeout=60)
    assert [m.body for m in got] == ["late"]


def test_run_acks_what_was_handled_and_nacks_what_raised(
        service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe(redelivery_backoff={"min_ms": 0, "max_ms": 0})
    publish(producer, topic, "a", "boom", "c")
    calls: list[tuple[str | None, int]] = []

    def handle(m: ReceivedMessage) -> None:
        calls.append((m.body, m.redelivery_count))
        if m.body == "boom" and m.redelivery_count == 0:
            raise ValueError("a failure the next try gets past")
        if len(calls) == 4:
            consumer.stop()

    stats = consumer.run(handle, max_messages=10, wait_ms=1000)
    assert calls == [("a", 0), ("boom", 0), ("c", 0), ("boom", 1)]
    assert (stats.received, stats.acked, stats.nacked, stats.batches) == (4, 3, 1, 2)
    assert consumer.describe()["backlog"] == 0


def test_run_stops_when_its_event_is_set(service: Service, producer: Producer,
                                         topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe()
    stop = threading.Event()
    handled: list[int] = []
    stats: list[Any] = []
    runner = threading.Thread(target=lambda: stats.append(consumer.run(
        lambda m: handled.append(m.offset), wait_ms=500, stop=stop)))
    runner.start()
    publish(producer, topic, "x", "y")
    wait_until(lambda: len(handled) == 2, what="both messages handled")
    stop.set()
    runner.join(timeout=30)
    assert not runner.is_alive() and stats[0].acked == 2
    assert consumer.describe()["backlog"] == 0


SIGNALLED = """
import os, signal, sys
from txmsg_client import Consumer

url, topic, how = sys.argv[1:]
signal.signal(signal.SIGINT, signal.default_int_handler)  # as if run from a terminal
consumer = Consumer(url, topic, "billing")
handled = []

def handle(m):
    handled.append(m.body)
    if len(handled) == 1:  # a signal while the batch is at hand
        for _ in range(2 if how == "twice" else 1):
            os.kill(os.getpid(), signal.SIGINT if how == "twice" else signal.SIGTERM)

try:
    stats = consumer.run(handle, max_messages=10, wait_ms=1000)
except KeyboardInterrupt:
    print("interrupted", handled)
else:
    print("stopped", handled, stats.acked)
"""


def test_a_signal_stops_run_after_the_batch(service: Service, producer: Producer,
                                            topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe()
    publish(producer, topic, "a", "b", "c")
    done = subprocess.run([sys.executable, "-c", SIGNALLED, service.url, topic, "once"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped ['a', 'b', 'c'] 3"
    assert consumer.describe()["backlog"] == 0


def test_a_second_signal_interrupts_and_gives_the_batch_back(
        service: Service, producer: Producer, topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe()
    publish(producer, topic, "a", "b")
    done = subprocess.run([sys.executable, "-c", SIGNALLED, service.url, topic, "twice"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted ['a']"
    state = consumer.describe()
    assert (state["backlog"], state["in_flight"]) == (2, 0)  # released at once
    assert [m.body for m in consumer.receive()] == ["a", "b"]


IGNORING = """
import os, signal, sys
from txmsg_client import Consumer

signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup
consumer = Consumer(sys.argv[1], sys.argv[2], "billing")
handled = []

def handle(m):
    handled.append(m.body)
    if len(handled) == 1:
        os.kill(os.getpid(), signal.SIGINT)  # ignored: the loop goes on
    if len(handled) == 2:
        os.kill(os.getpid(), signal.SIGTERM)

stats = consumer.run(handle, max_messages=1, wait_ms=1000)
print(handled, stats.acked, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


def test_an_ignored_signal_stays_ignored(service: Service, producer: Producer,
                                         topic: str) -> None:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe()
    publish(producer, topic, "a", "b", "c")
    done = subprocess.run([sys.executable, "-c", IGNORING, service.url, topic],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['a', 'b'] 2 True"
    assert consumer.describe()["backlog"] == 1
