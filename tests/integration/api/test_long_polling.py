"""Long-polling receives (``wait_ms``): on the ASGI front a waiting receive is a coroutine
that holds no thread and no connection, woken by this process's commits; commits of
another process are found by the subscription's probe; the Flask route waits the same
way on a thread. Both stores."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from app.api import asgi, longpoll
from app.web import create_app
from tests.asgi_client import AsgiClient
from tests.callbacks import wait_until
from tests.conftest import make_settings
from tests.front_client import FrontClient
from tests.integration.helpers import finish, register, send

RECEIVE = "/v1/topics/t/subscriptions/s/receive"


@pytest.fixture
def front(database_url: str) -> Iterator[tuple[Any, AsgiClient]]:
    app = create_app(make_settings(database_url, web_threads=2))
    http = AsgiClient(asgi.Api(app))
    yield app, http
    http.app._receivers.shutdown(wait=False)
    http.close()
    app.extensions["txmsg"].close()


def commit(client: Any, n: int) -> None:
    sent = send(client, messages=[{"topic": "t", "body": f"m{i}"} for i in range(n)])
    assert finish(client, sent.json["transaction_id"], "commit").status_code == 200


def long_poll(http: AsgiClient, wait_ms: int, max_messages: int = 10) -> list[int]:
    body = orjson.dumps({"max_messages": max_messages, "wait_ms": wait_ms})
    r = http.request("POST", RECEIVE, body=body,
                     headers=[("content-length", str(len(body)))])
    assert r.status == 200, r.body
    return [m["offset"] for m in orjson.loads(r.body)["messages"]]


def test_waiting_receives_hold_no_thread_and_wake_on_a_commit(
        front: tuple[Any, AsgiClient], monkeypatch: pytest.MonkeyPatch) -> None:
    """40 receives wait at once on a front whose receive pool has 2 threads; without the
    re-check (pushed past the wait) only the commit's signal can wake them in time."""
    app, http = front
    monkeypatch.setattr(longpoll, "RECHECK_SECONDS", 60.0)
    client = FrontClient(app)
    register(client)
    assert client.put("/v1/topics/t/subscriptions/s", json={}).status_code == 201
    signal = app.extensions["txmsg"].signal
    waiters = 40
    with ThreadPoolExecutor(waiters) as pool:
        polls = [pool.submit(long_poll, http, 30_000, 1) for _ in range(waiters)]
        wait_until(lambda: signal.waiting("t") == waiters, what="every receive waiting")
        assert len(http.app._receivers._threads) <= 2  # its pool's threads, at most
        assert http.app.waits.waiting("t", "s") == waiters
        assert http.app.waits.probes == 1  # one probe for the subscription, not one each
        # the other routes still answer while they wait
        assert client.get("/v1/topics/t/subscriptions/s").json["in_flight"] == 0
        commit(client, waiters)
        got = sorted(o for p in polls for o in p.result(timeout=60))
    assert got == list(range(waiters))  # each message to one receive, none twice


def test_a_commit_of_another_process_is_found_by_the_probe(
        front: tuple[Any, AsgiClient], database_url: str) -> None:
    app, http = front
    other = create_app(make_settings(database_url))  # its own signal: another process
    try:
        producer = FrontClient(other)
        register(producer)
        assert producer.put("/v1/topics/t/subscriptions/s", json={}).status_code == 201
        signal = app.extensions["txmsg"].signal
        with ThreadPoolExecutor(1) as pool:
            poll = pool.submit(long_poll, http, 30_000)
            wait_until(lambda: signal.waiting("t") == 1, what="the receive waiting")
            commit(producer, 2)
            assert poll.result(timeout=60) == [0, 1]
        wait_until(lambda: http.app.waits.probes == 0, what="the probe to end")
    finally:
        other.extensions["txmsg"].close()


def test_a_wait_with_nothing_to_deliver_answers_an_empty_list(
        front: tuple[Any, AsgiClient]) -> None:
    app, http = front
    client = FrontClient(app)
    assert client.put("/v1/topics/t/subscriptions/s", json={}).status_code == 201
    assert long_poll(http, 300) == []
    body = b'{"wait_ms": 30001}'
    r = http.request("POST", RECEIVE, body=body, headers=[("content-length", str(len(body)))])
    assert r.status == 400 and orjson.loads(r.body)["code"] == "out_of_range"
    r = http.request("POST", "/v1/topics/t/subscriptions/nope/receive")
    assert r.status == 404 and orjson.loads(r.body)["code"] == "subscription_not_found"
    r = http.request("POST", "/v1/topics/RMQ_SYS_X/subscriptions/s/receive")
    assert r.status == 400 and orjson.loads(r.body)["code"] == "reserved_topic"


def test_a_rollback_that_releases_acks_wakes_the_waiting_receives(
        front: tuple[Any, AsgiClient], monkeypatch: pytest.MonkeyPatch) -> None:
    app, http = front
    monkeypatch.setattr(longpoll, "RECHECK_SECONDS", 60.0)
    client = FrontClient(app)
    register(client)
    assert client.put("/v1/topics/t/subscriptions/s", json={
        "initial_position": "earliest"}).status_code == 201
    commit(client, 1)
    assert long_poll(http, 0) == [0]
    held = send(client, transaction_id="out-1", topic="out", body="o",
                acks=[{"topic": "t", "subscription": "s", "offsets": [0]}])
    assert held.status_code == 201, held.json
    signal = app.extensions["txmsg"].signal
    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(long_poll, http, 30_000)
        wait_until(lambda: signal.waiting("t") == 1, what="the receive waiting")
        assert finish(client, "out-1", "rollback").status_code == 200
        assert poll.result(timeout=60) == [0]  # released at once, and the wait woken
