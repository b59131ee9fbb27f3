"""Retention and subscriptions on both stores: expired messages move the ack cursors that
were below them (their count to a metric), receives never see them; and the subscription
metrics show from the first scrape that knows the subscription."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, update

from app import metrics
from app.domain.clock import utcnow
from app.domain.retention import Retention
from app.storage.schema import message_log
from tests.integration.helpers import finish, register, row_counts, send

HOUR = 3600


pytestmark = pytest.mark.settings(retention_seconds=HOUR, retention_batch_size=100)


def engine_of(app: Any) -> Engine:
    return app.extensions["txmsg"].engine


def backdate(engine: Engine, hours: float) -> None:
    """Make every committed log row ``hours`` old."""
    with engine.begin() as conn:
        conn.execute(update(message_log).values(committed_at=utcnow() - timedelta(hours=hours)))


def retention(app: Any) -> Retention:
    return Retention(engine_of(app), app.extensions["txmsg"].settings)


def commit(client: Any, n: int) -> None:
    sent = send(client, messages=[{"topic": "t", "body": f"m{i}"} for i in range(n)])
    assert finish(client, sent.json["transaction_id"], "commit").status_code == 200


def sample(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m and ",".join(sorted(m[1].split(","))) == wanted:
            return float(m[2])
    return None


def test_retention_moves_cursors_up_and_counts_what_they_skipped(client: Any, app: Any) -> None:
    register(client)
    for name in ("s", "done", "ahead"):
        assert client.put(f"/v1/topics/t/subscriptions/{name}",
                          json={"initial_position": "earliest"}).status_code == 201
    commit(client, 6)
    got = client.post("/v1/topics/t/subscriptions/s/receive", json={"max_messages": 3}).json
    assert [m["offset"] for m in got["messages"]] == [0, 1, 2]
    assert client.post("/v1/topics/t/subscriptions/s/ack",
                       json={"offsets": [1]}).json == {"acked": 1}
    client.post("/v1/topics/t/subscriptions/done/receive", json={"max_messages": 6})
    client.post("/v1/topics/t/subscriptions/done/ack", json={"offsets": list(range(6))})
    client.post("/v1/topics/t/subscriptions/ahead/seek", json={"offset": 5})
    backdate(engine_of(app), hours=2)
    commit(client, 2)  # offsets 6, 7 stay
    before = metrics.SUBSCRIPTION_EXPIRED.labels("t", "s")._value.get()

    retention(app).run()

    s = client.get("/v1/topics/t/subscriptions/s").json
    assert (s["ack_cursor"], s["backlog"], s["in_flight"]) == (6, 2, 0)
    assert metrics.SUBSCRIPTION_EXPIRED.labels("t", "s")._value.get() - before == 5
    assert client.get("/v1/topics/t/subscriptions/ahead").json["ack_cursor"] == 6
    got = client.post("/v1/topics/t/subscriptions/s/receive", json={"max_messages": 10}).json
    assert [m["offset"] for m in got["messages"]] == [6, 7]
    assert row_counts(engine_of(app))["subscription_offset"] == 2  # s's two leases


def test_subscription_metrics_show_from_the_first_scrape(client: Any) -> None:
    register(client)
    assert client.put("/v1/topics/t/subscriptions/fresh", json={
        "initial_position": "earliest"}).status_code == 201
    commit(client, 3)
    text = client.get("/metrics").get_data(as_text=True)
    assert sample(text, "txmsg_subscription_backlog", topic="t", subscription="fresh") == 3
    for counter in ("txmsg_redeliveries_total", "txmsg_dead_letter_messages_total",
                    "txmsg_subscription_expired_messages_total"):
        assert sample(text, counter, topic="t", subscription="fresh") is not None, counter
    client.post("/v1/topics/t/subscriptions/fresh/receive", json={"max_messages": 1})
    client.post("/v1/topics/t/subscriptions/fresh/ack", json={"offsets": [0]})
    text = client.get("/metrics").get_data(as_text=True)
    assert sample(text, "txmsg_subscription_backlog", topic="t", subscription="fresh") == 2
