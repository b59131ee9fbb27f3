"""Shared subscriptions through the API on both stores: settings, leases, acks, nacks,
ack timeouts, backoff, dead letters, seek, delayed delivery, and the bad input the
contract refuses. Time is the test's: ``clock`` moves the domain's notion of now."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from app import metrics
from app.domain import clock as domain_clock
from app.domain import subscription_acks as acks_domain
from app.domain import subscriptions as domain
from app.errors import DatabaseUnavailable
from app.storage.schema import subscription, subscription_offset
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import finish, register, row_counts, send
from tests.integration.subscription_helpers import (
    SUBS,
    commit,
    create,
    describe,
    offsets,
    post,
    receive,
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += timedelta(milliseconds=ms)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(domain_clock, "utcnow", c)
    return c








def test_create_update_get_list_delete(client: Any) -> None:
    register(client)
    commit(client, 3)
    r = client.put(f"{SUBS}/s", json={})
    assert r.status_code == 201, r.json
    body = r.json
    assert body == {"topic": "t", "subscription": "s", "ack_timeout_ms": 30000,
                    "max_redeliveries": 16,
                    "redelivery_backoff": {"min_ms": 1000, "max_ms": 60000},
                    "dead_letter_topic": "t-s-DLQ", "backlog": 0, "in_flight": 0,
                    "ack_cursor": 3, "created_at": body["created_at"], "type": "shared",
                    "consumer_timeout_ms": 30000, "tag_filter": "*", "consumers": [],
                    "waiting": 0}
    again = client.put(f"{SUBS}/s", json={"ack_timeout_ms": 5000, "initial_position": "earliest",
                                          "dead_letter_topic": "dead"})
    assert again.status_code == 200
    assert again.json["ack_timeout_ms"] == 5000 and again.json["dead_letter_topic"] == "dead"
    assert again.json["ack_cursor"] == 3  # initial_position counts only at creation
    assert again.json["created_at"] == body["created_at"]
    # a change names what it changes; what it leaves out keeps its value (#37)
    for change, changed in (
            ({"max_redeliveries": 3}, {"max_redeliveries": 3}),
            ({"redelivery_backoff": {"max_ms": 90000}},
             {"redelivery_backoff": {"min_ms": 1000, "max_ms": 90000}}),
            ({"redelivery_backoff": {"min_ms": 70000}},
             {"redelivery_backoff": {"min_ms": 70000, "max_ms": 90000}}),
            ({}, {})):
        expected = {**{k: again.json[k] for k in ("ack_timeout_ms", "max_redeliveries",
                                                   "redelivery_backoff", "dead_letter_topic")},
                    **changed}
        again = client.put(f"{SUBS}/s", json=change)
        assert again.status_code == 200, again.json
        assert {k: again.json[k] for k in expected} == expected
    assert again.json["dead_letter_topic"] == "dead" and again.json["ack_timeout_ms"] == 5000
    r = client.put(f"{SUBS}/s", json={"redelivery_backoff": {"max_ms": 60000}})
    assert (r.status_code, r.json["code"]) == (400, "invalid_backoff")  # below its min_ms
    assert client.put(f"{SUBS}/s", json={"dead_letter_topic": None}).json[
        "dead_letter_topic"] == "t-s-DLQ"
    early = create(client, "e", initial_position="earliest")
    assert (early["ack_cursor"], early["backlog"]) == (0, 3)
    listed = client.get(SUBS).json
    assert [s["subscription"] for s in listed["subscriptions"]] == ["e", "s"]
    assert listed["next_after"] is None
    assert client.get(f"{SUBS}?limit=1").json["next_after"] == "e"
    assert client.get(f"{SUBS}?limit=1&after=e").json["subscriptions"][0]["subscription"] == "s"
    assert client.delete(f"{SUBS}/s").status_code == 204
    for r in (client.get(f"{SUBS}/s"), client.delete(f"{SUBS}/s"),
              client.post(f"{SUBS}/s/receive", json={}),
              client.post(f"{SUBS}/s/ack", json={"offsets": [0]})):
        assert r.status_code == 404 and r.json["code"] == "subscription_not_found"


def test_receives_lease_lowest_offsets_first_and_acks_move_the_cursor(
        app: Any, client: Any, clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest")
    commit(client, 5)
    first = receive(client, 2)
    assert offsets(first) == [0, 1]
    assert first[0]["body"] == "m0" and first[0]["redelivery_count"] == 0
    assert set(first[0]) == {"offset", "message_id", "transaction_id", "producer_group",
                             "keys", "tag", "ordering_key", "properties", "body",
                             "created_at", "committed_at", "redelivery_count"}
    assert offsets(receive(client, 2)) == [2, 3]  # leased ones go to nobody else
    assert describe(client)["in_flight"] == 4
    assert post(client, "ack", {"offsets": [1, 3]}) == {"acked": 2}
    assert post(client, "ack", {"offsets": [1, 3, 99]}) == {"acked": 0}  # harmless
    state = describe(client)
    assert (state["ack_cursor"], state["backlog"], state["in_flight"]) == (0, 3, 2)
    assert post(client, "ack", {"offsets": [0]}) == {"acked": 1}
    assert describe(client)["ack_cursor"] == 2
    assert offsets(receive(client)) == [4]
    assert post(client, "ack", {"offsets": [2, 4]}) == {"acked": 2}
    state = describe(client)
    assert (state["ack_cursor"], state["backlog"], state["in_flight"]) == (5, 0, 0)
    assert row_counts(app.extensions["txmsg"].engine)["subscription_offset"] == 0
    clock.advance(10 * 60 * 1000)  # an acknowledged message is never delivered again
    assert receive(client) == []


def test_nack_redelivers_after_the_delay_or_the_backoff(client: Any, clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest",
           redelivery_backoff={"min_ms": 1000, "max_ms": 3000})
    commit(client, 2)
    assert offsets(receive(client)) == [0, 1]
    assert post(client, "nack", {"offsets": [0], "delay_ms": 0}) == {"nacked": 1}
    assert post(client, "nack", {"offsets": [1]}) == {"nacked": 1}
    again = receive(client)
    assert offsets(again) == [0] and again[0]["redelivery_count"] == 1
    clock.advance(999)
    assert receive(client) == []
    clock.advance(1)
    assert offsets(receive(client)) == [1]  # after min_ms × 2^0
    for expected_wait in (2000, 3000, 3000):  # × 2^1, then capped at max_ms
        post(client, "nack", {"offsets": [1]})
        clock.advance(expected_wait - 1)
        assert receive(client) == []
        clock.advance(1)
        assert offsets(receive(client)) == [1]
    assert post(client, "nack", {"offsets": [5]}) == {"nacked": 0}  # never delivered


class _Recorder:
    def __init__(self) -> None:
        self.later: list[tuple[tuple[str, ...], float]] = []

    def notify_later(self, topics: Any, delay_seconds: float) -> None:
        self.later.append((tuple(topics), delay_seconds))


def test_a_nack_wakes_waiting_receives_when_its_delay_runs_out(app: Any, client: Any,
                                                              clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest", redelivery_backoff={"min_ms": 700})
    commit(client, 2)
    assert offsets(receive(client)) == [0, 1]
    signal: Any = _Recorder()
    subs = domain.Subscriptions(app.extensions["txmsg"].engine, 1 << 20, signal)
    assert subs.nack("t", "s", [0], 250) == 1
    assert subs.nack("t", "s", [1], None) == 1  # the backoff of redelivery count 0
    assert subs.nack("t", "s", [0, 1], 5) == 0  # no longer leased: nothing comes due
    assert signal.later == [(("t",), 0.25), (("t",), 0.7)]


def test_a_lease_that_times_out_is_redelivered_and_renew_extends_it(
        client: Any, clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest", ack_timeout_ms=5000,
           redelivery_backoff={"min_ms": 0, "max_ms": 0})
    commit(client, 2)
    assert offsets(receive(client)) == [0, 1]
    clock.advance(4000)
    assert post(client, "renew", {"offsets": [1, 7]}) == {"renewed": 1}
    clock.advance(1000)
    assert offsets(receive(client)) == [0]  # its lease ran out; 1's was renewed
    clock.advance(4000)
    assert offsets(receive(client)) == [1]
    assert describe(client)["in_flight"] == 2
    clock.advance(5000)
    assert post(client, "renew", {"offsets": [0]}) == {"renewed": 0}  # no longer held


@pytest.mark.parametrize(("min_ms", "max_ms", "backoff"), [(1000, 3000, 1000), (2000, 2000, 2000)])
def test_a_first_lease_that_runs_out_waits_for_the_backoff(
        client: Any, clock: Clock, min_ms: int, max_ms: int, backoff: int) -> None:
    """A message received once and never acknowledged comes back after the ack timeout
    plus the backoff of redelivery count 0 (min_ms, at most max_ms)."""
    register(client)
    create(client, initial_position="earliest", ack_timeout_ms=5000,
           redelivery_backoff={"min_ms": min_ms, "max_ms": max_ms})
    commit(client, 1)
    assert offsets(receive(client)) == [0]
    clock.advance(5000 + backoff - 1)
    assert receive(client) == []
    clock.advance(1)
    again = receive(client)
    assert offsets(again) == [0] and again[0]["redelivery_count"] == 1


def test_dead_letters_after_one_plus_max_redeliveries(client: Any, clock: Clock) -> None:
    redelivered = metrics.REDELIVERIES.labels("t", "s")._value.get()
    dead_lettered = metrics.DEAD_LETTERS.labels("t", "s")._value.get()
    register(client)
    create(client, initial_position="earliest", max_redeliveries=2)
    commit(client, 2)
    for count in range(3):
        got = receive(client)
        assert offsets(got) == ([0, 1] if count == 0 else [0])
        assert got[0]["redelivery_count"] == count
        if count == 0:
            post(client, "ack", {"offsets": [1]})
        post(client, "nack", {"offsets": [0], "delay_ms": 0})
    assert receive(client) == []  # the third nack spent it: dead-lettered, not delivered
    state = describe(client)
    assert (state["backlog"], state["ack_cursor"]) == (0, 2)
    dead = client.get("/v1/topics/t-s-DLQ/messages").json["messages"]
    assert len(dead) == 1
    original = client.get("/v1/topics/t/messages").json["messages"][0]
    assert dead[0]["body"] == "m0"
    assert dead[0]["properties"] == {"REAL_TOPIC": "t", "ORIGIN_SUBSCRIPTION": "s",
                                     "ORIGIN_OFFSET": "0",
                                     "ORIGIN_MESSAGE_ID": original["message_id"],
                                     "REDELIVERY_COUNT": "2"}
    # a new message: its own id, by which it is found; the original keeps its own
    copy = dead[0]["message_id"]
    assert copy != original["message_id"] and len(copy) == len(original["message_id"])
    found = client.get(f"/v1/messages/{copy}").json
    assert (found["message_id"], found["topic"], found["offset"], found["body"]) == (
        copy, "t-s-DLQ", 0, "m0")
    assert found["properties"]["ORIGIN_MESSAGE_ID"] == original["message_id"]
    assert client.get(f"/v1/messages/{original['message_id']}").json["topic"] == "t"
    assert receive(client) == []
    assert len(client.get("/v1/topics/t-s-DLQ/messages").json["messages"]) == 1
    assert metrics.REDELIVERIES.labels("t", "s")._value.get() - redelivered == 2
    assert metrics.DEAD_LETTERS.labels("t", "s")._value.get() - dead_lettered == 1
    # a dead-letter topic is an ordinary topic: subscribable, its messages as read
    create(client, "d", topic="t-s-DLQ", initial_position="earliest")
    got = receive(client, name="d", topic="t-s-DLQ")
    assert offsets(got) == [0] and got[0]["message_id"] == copy


def test_max_redeliveries_zero_dead_letters_after_one_delivery(client: Any, clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest", max_redeliveries=0, ack_timeout_ms=1000,
           dead_letter_topic="dead")
    commit(client, 1)
    assert offsets(receive(client)) == [0]
    clock.advance(60_000 + 1000)
    assert receive(client) == []
    assert [m["properties"]["REDELIVERY_COUNT"]
            for m in client.get("/v1/topics/dead/messages").json["messages"]] == ["0"]


def test_initial_position_latest_and_seek(client: Any, clock: Clock) -> None:
    register(client)
    commit(client, 3)
    create(client)
    assert receive(client) == []
    commit(client, 2)
    assert offsets(receive(client)) == [3, 4]
    body = post(client, "seek", {"offset": 1})
    assert (body["ack_cursor"], body["backlog"], body["in_flight"]) == (1, 4, 0)
    assert offsets(receive(client)) == [1, 2, 3, 4]  # leases dropped, from 1 on again
    body = post(client, "seek", {"offset": 5})
    assert (body["ack_cursor"], body["backlog"]) == (5, 0)
    assert receive(client) == []


@pytest.mark.parametrize("past", [4, 2**63 - 1])
def test_a_seek_takes_offsets_up_to_the_topics_next_offset(client: Any, past: int) -> None:
    """Past the topic's next offset is refused (every later receive would count from
    there); at it, receives of any size go on, and what comes later is delivered."""
    register(client)
    commit(client, 3)
    create(client, initial_position="earliest")
    for offset, code in ((past, "offset_out_of_range"), (-1, "out_of_range")):
        r = client.post(f"{SUBS}/s/seek", json={"offset": offset})
        assert (r.status_code, r.json["code"]) == (400, code), r.json
    assert offsets(receive(client, 1000)) == [0, 1, 2]
    body = post(client, "seek", {"offset": 3})
    assert (body["ack_cursor"], body["backlog"], body["in_flight"]) == (3, 0, 0)
    assert receive(client, 1000) == []
    commit(client, 2)
    assert offsets(receive(client, 1000)) == [3, 4]
    assert offsets(receive(client, 1000)) == []
    body = post(client, "seek", {"offset": 0})
    assert offsets(receive(client, 1000)) == [0, 1, 2, 3, 4]


def test_a_cursor_left_at_the_last_int64_answers_receives(app: Any, client: Any) -> None:
    """A subscription a seek left at 2**63-1 before seeks were bounded: receives of any
    size answer (nothing), none of their sums reaches the database past its integers."""
    register(client)
    commit(client, 2)
    create(client, initial_position="earliest")
    with app.extensions["txmsg"].engine.begin() as conn:
        conn.execute(subscription.update().values(ack_cursor=2**63 - 1, read_offset=2**63 - 1))
    for n in (1, 1000):
        assert receive(client, n) == []
    assert describe(client)["backlog"] == 0
    post(client, "seek", {"offset": 0})
    assert offsets(receive(client, 1000)) == [0, 1]


def test_a_seek_on_an_empty_topic_takes_only_zero(client: Any) -> None:
    create(client)
    r = client.post(f"{SUBS}/s/seek", json={"offset": 1})
    assert (r.status_code, r.json["code"], r.json["next_offset"]) == (
        400, "offset_out_of_range", 0)
    assert post(client, "seek", {"offset": 0})["ack_cursor"] == 0
    assert receive(client, 1000) == []


def test_delayed_messages_wait_for_their_time(client: Any, clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest")
    commit(client, 1, deliver_after_ms=10_000)
    commit(client, 1)
    when = (clock.now + timedelta(seconds=5)).isoformat()
    commit(client, 1, deliver_at=when)
    assert offsets(receive(client)) == [1]
    assert describe(client)["backlog"] == 3  # delayed ones are in the backlog
    clock.advance(5000)
    assert offsets(receive(client)) == [2]
    clock.advance(5000)  # deliver_after_ms counts from the commit, a little after clock.now
    clock.advance(1000)
    assert offsets(receive(client)) == [0]


def test_a_receive_holds_at_most_the_byte_budget(database_url: str) -> None:
    app = create_app(make_settings(database_url, max_read_bytes=1000))
    try:
        client = front(app)
        register(client)
        create(client, initial_position="earliest")
        sent = send(client, messages=[{"topic": "t", "body": "a" * 600},
                                      {"topic": "t", "body": "b" * 300},
                                      {"topic": "t", "body": "c" * 200},
                                      {"topic": "t", "body_base64": base64.b64encode(
                                          b"\x00" * 2000).decode()}])
        finish(client, sent.json["transaction_id"], "commit")
        assert offsets(receive(client, 10)) == [0, 1]
        assert offsets(receive(client, 10)) == [2]
        assert offsets(receive(client, 10)) == [3]  # alone over the budget: still one
    finally:
        app.extensions["txmsg"].close()


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("put", f"{SUBS}/s", {"ack_timeout_ms": 999}, 400, "out_of_range"),
    ("put", f"{SUBS}/s", {"ack_timeout_ms": 43_200_001}, 400, "out_of_range"),
    ("put", f"{SUBS}/s", {"max_redeliveries": 1001}, 400, "out_of_range"),
    ("put", f"{SUBS}/s", {"max_redeliveries": -1}, 400, "out_of_range"),
    ("put", f"{SUBS}/s", {"redelivery_backoff": {"min_ms": 3_600_001}}, 400, "out_of_range"),
    ("put", f"{SUBS}/s", {"redelivery_backoff": {"max_ms": -1}}, 400, "out_of_range"),
    ("put", f"{SUBS}/s", {"redelivery_backoff": {"min_ms": 2001, "max_ms": 2000}}, 400,
     "invalid_backoff"),
    ("put", f"{SUBS}/s", {"redelivery_backoff": {"min_ms": 60001}}, 400, "invalid_backoff"),
    ("put", f"{SUBS}/s", {"dead_letter_topic": "t"}, 400, "invalid_dead_letter_topic"),
    ("put", f"{SUBS}/s", {"initial_position": "middle"}, 400, "invalid_value"),
    ("put", f"{SUBS}/s", {"dead_letter_topic": "RMQ_SYS_X"}, 400, "reserved_topic"),
    ("put", f"{SUBS}/s", {"dead_letter_topic": "a b"}, 400, "invalid_topic"),
    ("put", f"{SUBS}/s", {"colour": "red"}, 400, "unknown_field"),
    ("put", f"{SUBS}/s", [], 400, "invalid_body_type"),
    ("put", "/v1/topics/RMQ_SYS_TRACE/subscriptions/s", {}, 400, "reserved_topic"),
    ("put", f"{SUBS}/a b", {}, 400, "invalid_subscription"),
    ("put", f"/v1/topics/{'t' * 120}/subscriptions/{'s' * 10}", {}, 400,
     "invalid_dead_letter_topic"),
    ("post", f"{SUBS}/s/receive", {"max_messages": 0}, 400, "out_of_range"),
    ("post", f"{SUBS}/s/receive", {"max_messages": 1001}, 400, "out_of_range"),
    ("post", f"{SUBS}/s/receive", {"wait_ms": 30_001}, 400, "out_of_range"),
    ("post", f"{SUBS}/s/ack", {"offsets": [-1]}, 400, "invalid_offset"),
    ("post", f"{SUBS}/s/ack", {"offsets": ["1"]}, 400, "invalid_type"),
    ("post", f"{SUBS}/s/ack", {}, 400, "missing_field"),
    ("post", f"{SUBS}/s/nack", {"offsets": [1], "delay_ms": -1}, 400, "out_of_range"),
    ("post", f"{SUBS}/s/seek", {"offset": -1}, 400, "out_of_range"),
    ("post", f"{SUBS}/s/seek", {"offset": 2**63}, 400, "out_of_range"),
    ("post", f"{SUBS}/s/seek", {"offset": 2**63 - 1}, 400, "offset_out_of_range"),
    ("post", f"{SUBS}/s/seek", {"offset": 1}, 400, "offset_out_of_range"),
    ("post", f"{SUBS}/nope/seek", {"offset": 1}, 404, "subscription_not_found"),
    ("get", f"{SUBS}?limit=0", None, 400, "invalid_query_parameter"),
])
def test_bad_input_changes_nothing(app: Any, client: Any, method: str, path: str, body: Any,
                                   status: int, code: str) -> None:
    create(client, "s")
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    with engine.connect() as conn:
        settings = list(conn.execute(select(subscription)))
    r = getattr(client, method)(path, json=body)
    assert (r.status_code, r.json["code"]) == (status, code), r.json
    assert r.headers["Content-Type"] == "application/problem+json"
    assert row_counts(engine) == before
    with engine.connect() as conn:
        assert list(conn.execute(select(subscription))) == settings


def test_a_long_dead_letter_topic_name_may_be_given(client: Any) -> None:
    topic, name = "t" * 120, "s" * 10
    r = client.put(f"/v1/topics/{topic}/subscriptions/{name}", json={"dead_letter_topic": "dlq"})
    assert r.status_code == 201, r.json
    assert client.put("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/subscriptions/s",
                      json={}).status_code == 201


def test_offset_rows_stay_bounded_by_what_is_in_flight(app: Any, client: Any,
                                                       clock: Clock) -> None:
    register(client)
    create(client, initial_position="earliest")
    engine = app.extensions["txmsg"].engine
    for _ in range(5):
        commit(client, 20)
        got = receive(client, 20)
        post(client, "ack", {"offsets": offsets(got)})
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(
                subscription_offset)).scalar_one() == 0
    assert describe(client)["ack_cursor"] == 100


def test_an_ack_answers_when_its_cursor_move_finds_sqlite_busy(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On SQLite an ack at the cursor moves it right after its commit; that move is derived
    state, so a write lock it cannot get in time (another process's long write) leaves it
    to the next receive or ack: the ack, committed, answers 200, not 503."""
    app = create_app(make_settings(sqlite_url))
    try:
        client = front(app)
        register(client)
        create(client)
        commit(client, 2)
        assert offsets(receive(client)) == [0, 1]

        def busy(*_: Any) -> Any:
            raise DatabaseUnavailable("database is locked")

        monkeypatch.setattr(acks_domain.store, "lock_unless_busy", busy)
        assert post(client, "ack", {"offsets": [0]}) == {"acked": 1}
        monkeypatch.undo()
        assert post(client, "ack", {"offsets": [1]}) == {"acked": 1}
        assert receive(client) == []
        assert (describe(client)["ack_cursor"], describe(client)["backlog"]) == (2, 0)
    finally:
        app.extensions["txmsg"].close()
