"""What a consumer consumes, without I/O (``txmsg_client._topics``): a scripted service
answers each request, as the sync and asyncio drivers would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from txmsg_client import _relay
from txmsg_client._calls import Request
from txmsg_client._topics import NAME_MAX, Program, Topics, consumer_name, default_consumer_name
from txmsg_client._wire import ReceivedMessage
from txmsg_client.errors import TxmsgError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(program: Program, answer: Callable[[Request], Any]) -> tuple[Any, list[Request]]:
    seen: list[Request] = []

    def do(step: Request | _relay.Sleep) -> Any:
        assert isinstance(step, Request)
        seen.append(step)
        return answer(step)

    return _relay.drive(program, do), seen


def one_message(offset: int) -> dict[str, Any]:
    return {"messages": [{"offset": offset, "message_id": f"m{offset}", "body": "x"}]}


def test_default_consumer_names_fit_the_name_rule() -> None:
    assert consumer_name("host.example.com-42") == "host-example-com-42"
    assert len(consumer_name("x" * 300)) == NAME_MAX
    assert default_consumer_name().endswith(f"-{__import__('os').getpid()}")


def test_one_of_topic_topics_and_pattern() -> None:
    for wrong in ({}, {"topic": "a", "topics": ["b"]}, {"topics": []}, {"topics": "ab"}):
        with pytest.raises(ValueError):
            Topics("s", **wrong)


def test_a_pattern_reads_every_page_and_subscribes_new_topics_with_the_settings() -> None:
    clock = Clock()
    topics = Topics("billing", pattern="orders-.*", refresh_seconds=60, clock=clock)
    pages = {None: {"topics": [{"topic": "orders-a"}, {"topic": "other"}], "next_after": "other"},
             "other": {"topics": [{"topic": "orders-a-billing-DLQ"}, {"topic": "orders-b"}],
                       "next_after": None}}

    def service(request: Request) -> Any:
        if request.method == "GET":
            after = request.path.partition("after=")[2] or None
            return pages[after]
        return {"name": request.path}

    answers, seen = run(topics.subscribe({"type": "failover"}), service)
    assert topics.names == ["orders-a", "orders-b"]  # its own dead letters never
    assert set(answers) == {"orders-a", "orders-b"}
    assert [(r.method, r.body) for r in seen if r.method == "PUT"] == [
        ("PUT", {"type": "failover"})] * 2

    pages["other"]["topics"].append({"topic": "orders-c"})
    _, seen = run(topics.refresh(), service)
    assert seen == []  # not due yet
    clock.now = 61
    _, seen = run(topics.refresh(), service)
    puts = [r for r in seen if r.method == "PUT"]
    assert [(r.path, r.body) for r in puts] == [
        ("/v1/topics/orders-c/subscriptions/billing", {"type": "failover"})]
    assert topics.names == ["orders-a", "orders-b", "orders-c"]


def test_a_topic_that_cannot_be_subscribed_is_tried_at_the_next_look() -> None:
    topics = Topics("s", pattern=".*", refresh_seconds=0)

    def service(request: Request) -> Any:
        if request.method == "GET":
            return {"topics": [{"topic": "a"}, {"topic": "RMQ_SYS_TRANS_HALF_TOPIC"}]}
        raise TxmsgError(403, "forbidden", "no")

    _, seen = run(topics.refresh(), service)
    assert topics.names == [] and [r.path for r in seen if r.method == "PUT"] == [
        "/v1/topics/a/subscriptions/s"]


def test_receives_take_the_topics_in_turn() -> None:
    topics = Topics("s", topics=["b", "a", "c"])
    busy = {"a", "b", "c"}

    def service(request: Request) -> Any:
        topic = request.path.split("/")[3]
        assert request.body["consumer"] == "me" and request.body["wait_ms"] == 0
        return one_message(ord(topic)) if topic in busy else {"messages": []}

    firsts = [run(topics.receive(5, 0, "me"), service)[0][0].topic for _ in range(4)]
    assert firsts == ["a", "b", "c", "a"]  # every topic busy: each has its turn
    busy = {"c"}
    got, seen = run(topics.receive(5, 0, "me"), service)
    assert [m.topic for m in got] == ["c"]
    assert [r.path.split("/")[3] for r in seen] == ["b", "c"]  # this turn starts at b


def test_an_empty_receive_across_topics_waits_on_one_topic_at_a_time() -> None:
    clock = Clock()
    topics = Topics("s", topics=["a", "b"], clock=clock)
    waits: list[tuple[str, int]] = []

    def service(request: Request) -> Any:
        waits.append((request.path.split("/")[3], request.body["wait_ms"]))
        clock.now += request.body["wait_ms"] / 1000
        return {"messages": []}

    got, _ = run(topics.receive(5, 1500, "me"), service)
    assert got == []
    assert waits == [("a", 0), ("b", 0), ("b", 1000), ("b", 0), ("a", 0), ("a", 500),
                     ("a", 0), ("b", 0)]


def test_a_single_topic_is_one_long_poll() -> None:
    topics = Topics("s", topic="t")
    got, seen = run(topics.receive(5, 3000, "me"),
                    lambda request: one_message(7))
    assert [(m.topic, m.offset) for m in got] == [("t", 7)]
    assert [(r.path, r.body) for r in seen] == [
        ("/v1/topics/t/subscriptions/s/receive",
         {"max_messages": 5, "wait_ms": 3000, "consumer": "me"})]


def test_settling_goes_to_each_messages_topic_and_leaving_to_each_topic_called() -> None:
    topics = Topics("s", topics=["a", "b"])
    a = ReceivedMessage(topic="a", offset=1, message_id="x", body="", body_bytes=b"")
    b = ReceivedMessage(topic="b", offset=1, message_id="y", body="", body_bytes=b"")
    acked, seen = run(topics.settle("ack", [a, b], "me"), lambda request: {"acked": 1})
    assert acked == 2
    assert [(r.path, r.body) for r in seen] == [
        ("/v1/topics/a/subscriptions/s/ack", {"offsets": [1], "consumer": "me"}),
        ("/v1/topics/b/subscriptions/s/ack", {"offsets": [1], "consumer": "me"})]
    with pytest.raises(ValueError):
        run(topics.settle("ack", [1], "me"), lambda request: {})

    def refuse(request: Request) -> Any:
        raise TxmsgError(404, "not_found", "gone")

    _, seen = run(topics.leave("me"), refuse)  # errors ignored
    assert [(r.method, r.path) for r in seen] == [
        ("DELETE", "/v1/topics/a/subscriptions/s/consumers/me"),
        ("DELETE", "/v1/topics/b/subscriptions/s/consumers/me")]
    _, seen = run(topics.leave("me"), refuse)
    assert seen == []  # left already
