"""The half-message lifecycle through the API, on both stores."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from psycopg import pq
from psycopg.adapt import PyFormat, Transformer
from sqlalchemy import event, select

from app.storage.schema import half_message
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import finish, register, row_counts, send


def test_send_commit_read(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    r = send(client, topic="orders", body="hello", keys=["o-1"], tag="created",
             properties={"region": "eu"})
    assert r.status_code == 201
    sent = r.json
    assert sent["state"] == "PREPARED" and sent["producer_group"] == "orders-svc"
    assert client.get("/v1/topics/orders/messages").json["messages"] == []

    r = finish(client, sent["transaction_id"], "commit")
    assert r.status_code == 200
    assert r.json == {"transaction_id": sent["transaction_id"], "state": "COMMITTED",
                      "messages": [{"message_id": sent["messages"][0]["message_id"],
                                    "topic": "orders", "offset": 0}]}
    page = client.get("/v1/topics/orders/messages").json
    assert page["next_offset"] == 1
    (msg,) = page["messages"]
    assert msg["body"] == "hello" and msg["keys"] == ["o-1"] and msg["tag"] == "created"
    assert msg["properties"] == {"region": "eu"} and msg["offset"] == 0
    assert msg["transaction_id"] == sent["transaction_id"]
    assert msg["created_at"].endswith("Z") and msg["committed_at"].endswith("Z")


def test_binary_body_round_trips(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    raw = bytes(range(256))
    sent = send(client, topic="blobs", body_base64=base64.b64encode(raw).decode()).json
    finish(client, sent["transaction_id"], "commit")
    (msg,) = client.get("/v1/topics/blobs/messages").json["messages"]
    assert "body" not in msg and base64.b64decode(msg["body_base64"]) == raw
    one = client.get(f"/v1/messages/{sent['messages'][0]['message_id']}").json
    assert one["state"] == "COMMITTED" and one["offset"] == 0 and one["topic"] == "blobs"


def test_rollback_never_visible(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    sent = send(client).json
    r = finish(client, sent["transaction_id"], "rollback")
    assert r.status_code == 200
    assert r.json == {"transaction_id": sent["transaction_id"], "state": "ROLLED_BACK"}
    assert finish(client, sent["transaction_id"], "rollback").status_code == 200
    assert client.get("/v1/topics/orders/messages").json["messages"] == []
    got = client.get(f"/v1/producer-groups/orders-svc/transactions/{sent['transaction_id']}")
    assert got.json["state"] == "ROLLED_BACK" and got.json["resolved_at"] is not None


def test_repeated_commit_never_duplicates(client, app) -> None:  # type: ignore[no-untyped-def]
    """RocketMQ #5574: a retried commit must not publish the message twice."""
    register(client)
    sent = send(client).json
    answers = [finish(client, sent["transaction_id"], "commit") for _ in range(5)]
    assert {a.status_code for a in answers} == {200}
    assert all(a.json == answers[0].json for a in answers)
    assert len(client.get("/v1/topics/orders/messages").json["messages"]) == 1
    counts = row_counts(app.extensions["txmsg"].engine)
    assert counts["message_log"] == 1 and counts["op_log"] == 1


def test_commit_after_rollback_and_rollback_after_commit_conflict(client) -> None:  # type: ignore[no-untyped-def]
    """RocketMQ #2694, #8158: the first resolution wins; the other answers 409."""
    register(client)
    a = send(client).json["transaction_id"]
    b = send(client).json["transaction_id"]
    finish(client, a, "rollback")
    finish(client, b, "commit")
    r = finish(client, a, "commit")
    assert r.status_code == 409 and r.json["code"] == "invalid_state_transition"
    assert r.headers["Content-Type"] == "application/problem+json"
    r = finish(client, b, "rollback")
    assert r.status_code == 409 and r.json["state"] == "COMMITTED"
    assert len(client.get("/v1/topics/orders/messages").json["messages"]) == 1


def test_unknown_transaction_is_404(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    for op in ("commit", "rollback", "resume-check"):
        r = finish(client, "nope", op)
        assert r.status_code == 404 and r.json["code"] == "transaction_not_found"
    assert client.get("/v1/producer-groups/orders-svc/transactions/nope").status_code == 404


def test_retried_send_never_duplicates(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    body = {"transaction_id": "order-42",
            "messages": [{"topic": "orders", "body": "a"}, {"topic": "audit", "body": "b"}]}
    first = send(client, **body)
    assert first.status_code == 201
    again = send(client, **body)
    assert again.status_code == 200 and again.json == first.json
    finish(client, "order-42", "commit")
    after_commit = send(client, **body)
    assert after_commit.status_code == 200
    assert after_commit.json["messages"] == first.json["messages"]
    assert after_commit.json["state"] == "COMMITTED"
    assert after_commit.json["transaction_id"] == "order-42"
    counts = row_counts(app.extensions["txmsg"].engine)
    assert counts["txn"] == 1 and counts["half_message"] == 2
    other = send(client, transaction_id="order-42",
                 messages=[{"topic": "orders", "body": "DIFFERENT"}])
    assert other.status_code == 409 and other.json["code"] == "transaction_id_conflict"


def test_a_retry_with_other_check_settings_is_a_conflict(client, app) -> None:  # type: ignore[no-untyped-def]
    register(client)
    first = {"transaction_id": "order-43", "check_url": "http://127.0.0.1:9/a",
             "check_immunity_seconds": 60, "topic": "orders", "body": "a"}
    assert send(client, **first).status_code == 201
    for other in ({"check_url": "http://127.0.0.1:9/b"}, {"check_url": None},
                  {"check_immunity_seconds": 61}, {"check_immunity_seconds": 0}):
        r = send(client, **{**first, **other})
        assert (r.status_code, r.json["code"]) == (409, "transaction_id_conflict"), other
    assert send(client, **first).status_code == 200
    stored = client.get("/v1/producer-groups/orders-svc/transactions/order-43").json
    assert (stored["check_url"], stored["check_immunity_seconds"]) == (
        "http://127.0.0.1:9/a", 60)
    assert row_counts(app.extensions["txmsg"].engine)["txn"] == 1


def test_multi_topic_transaction_gets_offsets_per_topic(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    sent = send(client, messages=[{"topic": "a", "body": "1"}, {"topic": "b", "body": "2"},
                                  {"topic": "a", "body": "3"}]).json
    committed = finish(client, sent["transaction_id"], "commit").json
    assert [(m["topic"], m["offset"]) for m in committed["messages"]] == [
        ("a", 0), ("b", 0), ("a", 1)]
    assert [m["body"] for m in client.get("/v1/topics/a/messages").json["messages"]] == ["1", "3"]
    topics = client.get("/v1/topics").json
    assert topics == {"topics": [{"topic": "a", "next_offset": 2},
                                 {"topic": "b", "next_offset": 1}], "next_after": None}
    page = client.get("/v1/topics?limit=1").json
    assert page == {"topics": [{"topic": "a", "next_offset": 2}], "next_after": "a"}
    assert client.get("/v1/topics?limit=1&after=a").json["topics"] == [
        {"topic": "b", "next_offset": 1}]
    for bad in ("limit=0", "limit=1001", "limit=x", "after=no%20spaces"):
        r = client.get(f"/v1/topics?{bad}")
        assert r.status_code == 400 and r.json["code"] == "invalid_query_parameter"


def test_paging_by_offset(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    for i in range(5):
        tx = send(client, topic="p", body=str(i)).json["transaction_id"]
        finish(client, tx, "commit")
    page = client.get("/v1/topics/p/messages?from_offset=1&limit=2").json
    assert [m["body"] for m in page["messages"]] == ["1", "2"] and page["next_offset"] == 3
    page = client.get("/v1/topics/p/messages?from_offset=3&limit=100").json
    assert [m["offset"] for m in page["messages"]] == [3, 4] and page["next_offset"] == 5
    assert client.get("/v1/topics/p/messages?from_offset=9").json == {
        "topic": "p", "messages": [], "next_offset": 9, "first_offset": 0}
    assert client.get("/v1/topics/unknown/messages").json["messages"] == []


def test_list_and_get_transactions(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    ids = [send(client, body=str(i)).json["transaction_id"] for i in range(3)]
    finish(client, ids[0], "commit")
    listed = client.get("/v1/producer-groups/orders-svc/transactions?state=PREPARED").json
    assert [t["transaction_id"] for t in listed["transactions"]] == ids[1:]
    page1 = client.get("/v1/producer-groups/orders-svc/transactions?limit=2").json
    assert len(page1["transactions"]) == 2 and page1["next_after"]
    page2 = client.get(
        f"/v1/producer-groups/orders-svc/transactions?limit=2&after={page1['next_after']}").json
    assert [t["transaction_id"] for t in page2["transactions"]] == ids[2:]
    one = client.get(f"/v1/producer-groups/orders-svc/transactions/{ids[0]}").json
    assert one["state"] == "COMMITTED" and one["check_times"] == 0
    assert one["messages"][0]["offset"] == 0


def test_resume_check_only_from_discarded(client, app) -> None:  # type: ignore[no-untyped-def]
    from app.vocabulary import Op

    register(client)
    tx = send(client, check_immunity_seconds=60).json["transaction_id"]
    r = finish(client, tx, "resume-check")
    assert r.status_code == 409
    app.extensions["txmsg"].lifecycle.finish("orders-svc", tx, Op.DISCARD, source="check",
                                             check_times=15)
    got = client.get(f"/v1/producer-groups/orders-svc/transactions/{tx}").json
    assert got["state"] == "DISCARDED" and got["check_times"] == 15
    (dead,) = client.get("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/messages").json["messages"]
    assert dead["properties"] == {"REAL_TOPIC": "orders", "TRANSACTION_ID": tx,
                                  "PRODUCER_GROUP": "orders-svc", "CHECK_TIMES": "15"}
    r = finish(client, tx, "resume-check")
    assert r.status_code == 200 and r.json["state"] == "PREPARED"
    got = client.get(f"/v1/producer-groups/orders-svc/transactions/{tx}").json
    assert got["state"] == "PREPARED" and got["check_times"] == 0
    # a late commit of a discarded transaction resolves it; the discard entry stays
    app.extensions["txmsg"].lifecycle.finish("orders-svc", tx, Op.DISCARD, check_times=15)
    assert finish(client, tx, "commit").status_code == 200
    assert len(client.get("/v1/topics/orders/messages").json["messages"]) == 1
    assert len(client.get("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/messages").json["messages"]) == 2


def test_groups_crud(client) -> None:  # type: ignore[no-untyped-def]
    r = client.put("/v1/producer-groups/g", json={"check_urls": ["https://x.example/cb"],
                                                   "check_timeout_ms": 500})
    assert r.status_code == 200 and r.json["check_timeout_ms"] == 500
    # a change keeps what it leaves out (#37)
    r = client.put("/v1/producer-groups/g", json={"check_urls": ["http://127.0.0.1:1/a"]})
    assert r.json["check_urls"] == ["http://127.0.0.1:1/a"] and r.json["check_timeout_ms"] == 500
    r = client.put("/v1/producer-groups/g", json={"check_timeout_ms": 700})
    assert r.json["check_urls"] == ["http://127.0.0.1:1/a"] and r.json["check_timeout_ms"] == 700
    r = client.put("/v1/producer-groups/new", json={"check_timeout_ms": 700})
    assert (r.status_code, r.json["code"]) == (400, "missing_field")
    assert client.get("/v1/producer-groups/new").status_code == 404
    r = client.put("/v1/producer-groups/new", json={"check_urls": ["http://127.0.0.1:1/b"]})
    assert r.json["check_timeout_ms"] == 3000  # created: the default
    assert client.get("/v1/producer-groups/g").json["check_urls"] == ["http://127.0.0.1:1/a"]
    assert client.delete("/v1/producer-groups/g").status_code == 204
    assert client.get("/v1/producer-groups/g").status_code == 404
    assert client.delete("/v1/producer-groups/g").status_code == 404
    r = send(client, group="g")
    assert r.status_code == 422 and r.json["code"] == "unregistered_producer_group"


def test_health_and_metrics(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/healthz").json == {"status": "ok"}
    assert client.get("/readyz").json["status"] == "ready"
    register(client)
    send(client)
    text = client.get("/metrics").data.decode()
    assert "txmsg_half_messages 1.0" in text
    for name in ("txmsg_commit_messages_total", "txmsg_rollback_messages_total",
                 "txmsg_discard_messages_total", "txmsg_finish_latency_seconds"):
        assert name in text


def test_a_large_send_stores_its_messages_as_small_ones_do(client, app) -> None:  # type: ignore[no-untyped-def]
    """A send of many messages has its rows built ahead by its handler, a send of one by
    the writer: both store the same messages, in order, and answer alike."""
    register(client)
    messages = [{"topic": "big" if i % 3 else "other", "keys": [f"k{i}"], "tag": f"t{i}",
                 "properties": {"i": str(i), "é": "ü"},
                 **({"body": f"text {i} ✓"} if i % 2 else
                    {"body_base64": base64.b64encode(bytes([i, 0, 255])).decode()}),
                 **({"deliver_after_ms": 1000 * i} if i == 4 else {})}
                for i in range(12)]
    large = send(client, transaction_id="large", messages=messages)
    small = [send(client, transaction_id=f"small-{i}", messages=[m])
             for i, m in enumerate(messages)]
    assert large.status_code == 201 and all(r.status_code == 201 for r in small)
    assert [m["topic"] for m in large.json["messages"]] == [m["topic"] for m in messages]
    assert [m["topic"] for r in small for m in r.json["messages"]] == [
        m["topic"] for m in messages]
    assert len({m["message_id"] for m in large.json["messages"]}) == 12
    assert send(client, transaction_id="large", messages=messages).json == {
        **large.json}  # a retry answers with the first ids
    finish(client, "large", "commit")
    for i in range(12):
        finish(client, f"small-{i}", "commit")

    def stored(topic: str) -> list[tuple[str, dict[str, object]]]:
        page = client.get(f"/v1/topics/{topic}/messages").json["messages"]
        return [(m["transaction_id"], {k: m.get(k) for k in (
            "body", "body_base64", "keys", "tag", "properties")}) for m in page]

    for topic in ("big", "other"):
        rows = stored(topic)
        from_large = [fields for txid, fields in rows if txid == "large"]
        from_small = [fields for txid, fields in rows if txid != "large"]
        assert from_large == from_small and len(from_large) == sum(
            m["topic"] == topic for m in messages)
    with app.extensions["txmsg"].engine.connect() as conn:
        delays = conn.execute(select(half_message.c.seq, half_message.c.deliver_after_ms,
                                     half_message.c.created_at)
                              .where(half_message.c.message_id.in_(
                                  [m["message_id"] for m in large.json["messages"]]))
                              .order_by(half_message.c.seq)).all()
    assert [(seq, after) for seq, after, _ in delays] == [
        (i, 4000 if i == 4 else None) for i in range(12)]
    assert {at for _, _, at in delays} == {datetime.fromisoformat(large.json["created_at"])}


TEXT_BODIES = ["plain ascii {\"a\": [1, 2]}", "", "back\\slash \\x41 \\\\ 'quoted'",
               "non-ascii é ✓ 𝄞", "nul \x00 inside", "\x7f\x01 controls\n\t"]


def test_every_text_body_is_stored_as_its_utf8_bytes(client, app) -> None:  # type: ignore[no-untyped-def]
    """Each text body is stored as its UTF-8 bytes and read back as sent, in a large send
    (rows encoded ahead) and in small ones: NUL, backslashes, quotes, controls and
    characters beyond ASCII included."""
    register(client)
    messages = [{"topic": "texts", "body": b} for b in TEXT_BODIES]
    large = send(client, transaction_id="large", messages=messages * 2)
    small = [send(client, transaction_id=f"small-{i}", messages=[m])
             for i, m in enumerate(messages)]
    assert large.status_code == 201 and all(r.status_code == 201 for r in small)
    for txid in ["large", *(f"small-{i}" for i in range(len(messages)))]:
        assert finish(client, txid, "commit").status_code == 200
    page = client.get("/v1/topics/texts/messages?limit=100").json["messages"]
    assert [m["body"] for m in page] == TEXT_BODIES * 3
    assert all("body_base64" not in m or m["body_base64"] is None for m in page)
    with app.extensions["txmsg"].engine.connect() as conn:
        stored = conn.execute(select(half_message.c.body, half_message.c.body_is_text)
                              .order_by(half_message.c.txn_id, half_message.c.seq)).all()
    assert [(bytes(b), t) for b, t in stored] == [(b.encode(), True) for b in TEXT_BODIES * 3]


def test_bodies_reach_postgresql_as_their_bytes_in_binary(postgres_url: str) -> None:
    """A send's bodies travel to PostgreSQL as one array of their bytes that psycopg
    sends in binary (not text inside a JSON document, which the server parses twice),
    for a large send (rows built ahead) and a small one alike."""
    app = create_app(make_settings(postgres_url))
    client, engine = front(app), app.extensions["txmsg"].engine
    sent: list[tuple[Any, Any]] = []

    def on_execute(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if "INSERT INTO half_message" in statement:
            sent.append((cursor, params))

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        register(client)
        messages = [{"topic": "texts", "body": b} for b in TEXT_BODIES]
        assert send(client, transaction_id="large", messages=messages * 2).status_code == 201
        assert send(client, transaction_id="small", messages=messages[:1]).status_code == 201
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        app.extensions["txmsg"].close()
    assert [params["m_body"] for _, params in sent] == [
        [b.encode() for b in TEXT_BODIES * 2], [TEXT_BODIES[0].encode()]]
    for cursor, params in sent:
        dumper = Transformer(cursor).get_dumper(params["m_body"], PyFormat.AUTO)
        assert dumper.format is pq.Format.BINARY
