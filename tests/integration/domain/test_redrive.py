"""`txmsg dead-letters redrive` and the dashboard's redrive, on both stores: dead letters
republished to their REAL_TOPIC (or --to) as new messages through the API's send and
commit, their properties kept, each once however often a range is redriven; audited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.storage.schema import op_log, txn
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.dashboard_helpers import ADMIN_TOKEN, csrf_of
from tests.integration.helpers import Txmsg, finish, register, send

DLQ = "orders-s-DLQ"
N = 5


@pytest.fixture
def app(database_url: str) -> Iterator[Any]:
    app = create_app(make_settings(database_url))
    yield app
    app.extensions["txmsg"].close()


@pytest.fixture
def dead(app: Any) -> list[dict[str, Any]]:
    return _dead_letters(front(app))


def _dead_letters(client: Any) -> list[dict[str, Any]]:
    """N messages of "orders" dead-lettered by subscription s (no redelivery allowed)."""
    register(client)
    for i in range(N):
        assert send(client, transaction_id=f"tx-{i}", topic="orders", body=f"m{i}",
                    tag="created", ordering_key=f"o{i}",
                    properties={"k": str(i)}).status_code == 201
        assert finish(client, f"tx-{i}", "commit").status_code == 200
    sub = "/v1/topics/orders/subscriptions/s"
    assert client.put(sub, json={"initial_position": "earliest",
                                 "max_redeliveries": 0}).status_code == 201
    got = client.post(f"{sub}/receive", json={"max_messages": N}).json["messages"]
    assert len(got) == N
    r = client.post(f"{sub}/nack", json={"offsets": [m["offset"] for m in got], "delay_ms": 0})
    assert r.status_code == 200, r.json
    assert client.post(f"{sub}/receive", json={"max_messages": N}).json["messages"] == []
    letters = client.get(f"/v1/topics/{DLQ}/messages").json["messages"]
    assert [m["offset"] for m in letters] == list(range(N))
    return letters  # type: ignore[no-any-return]


def bodies(app: Any, topic: str) -> list[tuple[str, dict[str, str]]]:
    page = front(app).get(f"/v1/topics/{topic}/messages").json["messages"]
    return [(m["body"], m["properties"]) for m in page]


def test_a_range_is_redriven_once_with_its_properties(
        app: Any, dead: list[dict[str, Any]], database_url: str) -> None:
    txmsg = Txmsg(database_url)
    ran = txmsg.run("dead-letters", "redrive", DLQ, "--offsets", "1..3", "--json")
    first = json.loads(ran.stdout)
    assert [r["dlq_offset"] for r in first["redriven"]] == [1, 2, 3]
    assert [(r["topic"], r["offset"]) for r in first["redriven"]] == [
        ("orders", N), ("orders", N + 1), ("orders", N + 2)]
    republished = bodies(app, "orders")[N:]
    assert [b for b, _ in republished] == ["m1", "m2", "m3"]
    # the dead letters and their redriven copies keep the ordering keys
    assert [m["ordering_key"] for m in dead[1:4]] == ["o1", "o2", "o3"]
    page = front(app).get("/v1/topics/orders/messages").json["messages"]
    assert [m["ordering_key"] for m in page[N:]] == ["o1", "o2", "o3"]
    for (_, props), letter in zip(republished, dead[1:4], strict=True):
        assert props == letter["properties"]  # REAL_TOPIC, ORIGIN_* and the message's own
        assert props["ORIGIN_OFFSET"] == str(letter["offset"]) and props["k"] == props[
            "ORIGIN_OFFSET"]
    audit = [line for line in ran.stderr.splitlines() if "dead letters redriven" in line]
    assert len(audit) == 1 and f"(cli): {DLQ} offsets 1..3 as txmsg-redrive/" in audit[0]
    assert audit[0].endswith(" to orders")

    # again, and an overlapping range: only what was not redriven yet
    again = txmsg.run("dead-letters", "redrive", DLQ, "--offsets", "1..3")
    assert "0 dead letter(s) redriven" in again.output
    more = json.loads(txmsg.run("dead-letters", "redrive", DLQ, "--offsets", "2..", "--json")
                      .stdout)
    assert [r["dlq_offset"] for r in more["redriven"]] == [4]
    assert [b for b, _ in bodies(app, "orders")[N:]] == ["m1", "m2", "m3", "m4"]
    # one committed transaction per batch, through the API's commit
    with app.extensions["txmsg"].engine.connect() as conn:
        states = conn.execute(select(txn.c.state).where(
            txn.c.producer_group == "txmsg-redrive")).scalars().all()
        sources = conn.execute(select(op_log.c.source).where(
            op_log.c.op == "COMMIT", op_log.c.source == "redrive")).scalars().all()
    assert states == ["COMMITTED", "COMMITTED"] and len(sources) == 2


def test_to_another_topic(app: Any, dead: list[dict[str, Any]], database_url: str) -> None:
    out = Txmsg(database_url).run("dead-letters", "redrive", DLQ, "--to", "replay").output
    assert f"{N} dead letter(s) redriven" in out
    assert [b for b, _ in bodies(app, "replay")] == [f"m{i}" for i in range(N)]
    assert all(p["REAL_TOPIC"] == "orders" for _, p in bodies(app, "replay"))
    assert len(bodies(app, "orders")) == N


def test_refusals(app: Any, dead: list[dict[str, Any]], database_url: str) -> None:
    txmsg = Txmsg(database_url)
    assert "invalid_offsets" in txmsg.run("dead-letters", "redrive", DLQ, "--offsets", "3..1",
                                          code=1).output
    # not dead letters: no REAL_TOPIC to go back to
    assert "no_real_topic" in txmsg.run("dead-letters", "redrive", "orders", code=1).output
    assert "reserved_topic" in txmsg.run("dead-letters", "redrive", DLQ, "--to",
                                         "TRANS_CHECK_MAX_TIME_TOPIC", code=1).output
    assert len(bodies(app, "orders")) == N


@pytest.fixture
def guarded(database_url: str) -> Iterator[Any]:
    app = create_app(make_settings(database_url, admin_token=ADMIN_TOKEN))
    yield app
    app.extensions["txmsg"].close()


def test_the_dashboard_action(guarded: Any, database_url: str) -> None:
    app = guarded
    api = front(app)
    api.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {ADMIN_TOKEN}"
    _dead_letters(api)
    client = front(app)
    form = client.get("/ui/sign-in")
    client.post("/ui/sign-in", data={"token": ADMIN_TOKEN, "csrf_token": csrf_of(form)})
    page = client.get(f"/ui/topics/{DLQ}")
    assert 'id="redrive"' in page.get_data(as_text=True)
    r = client.post(f"/ui/topics/{DLQ}/redrive", data={"csrf_token": csrf_of(page),
                                                       "offsets": "0..1"})
    assert (r.status_code, r.headers["Location"]) == (303, f"/ui/topics/{DLQ}")
    assert "2 dead letter(s) redriven" in client.get(r.headers["Location"]).get_data(
        as_text=True)
    page = api.get("/v1/topics/orders/messages").json["messages"]
    assert [m["body"] for m in page[N:]] == ["m0", "m1"]
    # without the CSRF token: nothing
    assert client.post(f"/ui/topics/{DLQ}/redrive", data={"offsets": "2"}).status_code == 400
    assert len(api.get("/v1/topics/orders/messages").json["messages"]) == N + 2
