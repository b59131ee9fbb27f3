"""Delayed delivery as stored: a send's deliver_after_ms / deliver_at is kept with the half
message and becomes the committed message's deliverable time at commit, on both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select

from app.storage.schema import half_message, message_log
from tests.integration.helpers import finish, register, send


def _log(app: Any) -> list[Any]:
    with app.extensions["txmsg"].engine.connect() as conn:
        return list(conn.execute(select(message_log.c.queue_offset, message_log.c.committed_at,
                                        message_log.c.deliver_at)
                                 .order_by(message_log.c.queue_offset)))


def test_the_deliverable_time_is_set_at_commit(app: Any, client: Any) -> None:
    register(client)
    at = (datetime.now(UTC) + timedelta(days=9)).replace(microsecond=0)
    local = at.astimezone(timezone(timedelta(hours=2))).isoformat()
    sent = send(client, messages=[
        {"topic": "t", "body": "now"},
        {"topic": "t", "body": "later", "deliver_after_ms": 60_000},
        {"topic": "t", "body": "then", "deliver_at": local}])
    assert sent.status_code == 201, sent.json
    with app.extensions["txmsg"].engine.connect() as conn:
        stored = list(conn.execute(select(half_message.c.deliver_after_ms,
                                          half_message.c.deliver_at)
                                   .order_by(half_message.c.seq)))
    assert stored == [(None, None), (60_000, None), (None, at)]
    assert finish(client, sent.json["transaction_id"], "commit").status_code == 200
    rows = _log(app)
    assert [r.queue_offset for r in rows] == [0, 1, 2]
    assert rows[0].deliver_at is None
    assert rows[1].deliver_at == rows[1].committed_at + timedelta(milliseconds=60_000)
    assert rows[2].deliver_at == at
    # offset reads show delayed messages at once
    page = client.get("/v1/topics/t/messages").json
    assert [m["body"] for m in page["messages"]] == ["now", "later", "then"]


def test_a_retry_with_another_delay_is_another_send(client: Any) -> None:
    register(client)
    first = send(client, transaction_id="x1", topic="t", body="b", deliver_after_ms=10)
    assert first.status_code == 201
    assert send(client, transaction_id="x1", topic="t", body="b",
                deliver_after_ms=10).status_code == 200
    assert send(client, transaction_id="x1", topic="t", body="b",
                deliver_after_ms=11).status_code == 409
    plain = send(client, transaction_id="x2", topic="t", body="b")
    assert send(client, transaction_id="x2", topic="t", body="b").status_code == 200
    assert plain.status_code == 201


def _ahead(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def test_deliver_at_may_be_up_to_ten_days_ahead_or_in_the_past(app: Any, client: Any) -> None:
    register(client)
    for when in (_ahead(days=9, hours=23), _ahead(days=-1), "2001-02-03T04:05:06+14:00"):
        r = send(client, topic="t", body="b", deliver_at=when)
        assert r.status_code == 201, (when, r.json)


def test_bad_delays_are_refused(app: Any, client: Any) -> None:
    register(client)
    cases = [({"deliver_after_ms": -1}, "out_of_range"),
             ({"deliver_after_ms": 864_000_001}, "out_of_range"),
             ({"deliver_after_ms": "5"}, "invalid_type"),
             ({"deliver_at": "tomorrow"}, "invalid_deliver_at"),
             ({"deliver_at": "2031-05-06T07:08:09"}, "invalid_deliver_at"),
             ({"deliver_at": 5}, "invalid_type"),
             ({"deliver_at": _ahead(days=1), "deliver_after_ms": 5}, "invalid_deliver_at"),
             # as far ahead as deliver_after_ms may say, and within the calendar
             ({"deliver_at": _ahead(days=10, minutes=1)}, "out_of_range"),
             ({"deliver_at": _ahead(days=11)}, "out_of_range"),
             ({"deliver_at": "9999-12-31T23:59:59Z"}, "out_of_range"),
             ({"deliver_at": "9999-12-31T23:59:59-14:00"}, "invalid_deliver_at"),
             ({"deliver_at": "0001-01-01T00:00:00+14:00"}, "invalid_deliver_at")]
    for extra, code in cases:
        r = send(client, topic="t", body="b", **extra)
        assert r.status_code == 400, (extra, r.json)
        assert r.json["code"] == code, (extra, r.json)
    assert _log(app) == []
    with app.extensions["txmsg"].engine.connect() as conn:
        assert conn.execute(select(half_message.c.id)).first() is None
