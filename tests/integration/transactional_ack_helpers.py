"""Consume → process → produce on one subscription ("in" → "out"), for the transactional
ack tests: the subscription, its inputs, outputs carrying acks, and a clock to move."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from app.domain import clock as domain
from tests.integration.helpers import finish, register, send

GROUP = "orders-svc"
SUB = "/v1/topics/in/subscriptions/s"


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(domain, "utcnow", c)
    return c


def setup(client: Any, n: int) -> None:
    register(client, GROUP)
    assert client.put(SUB, json={"initial_position": "earliest", "ack_timeout_ms": 1000,
                                 "redelivery_backoff": {"min_ms": 0, "max_ms": 0}}
                      ).status_code == 201
    sent = send(client, GROUP, messages=[{"topic": "in", "body": f"in{i}"} for i in range(n)])
    assert finish(client, sent.json["transaction_id"], "commit").status_code == 200


def receive(client: Any, n: int = 10) -> list[dict[str, Any]]:
    r = client.post(f"{SUB}/receive", json={"max_messages": n})
    assert r.status_code == 200, r.json
    return list(r.json["messages"])


def produce(client: Any, txid: str, offsets: list[int], **extra: Any) -> Any:
    """Send an output per input offset with the inputs' acks (not committed)."""
    return send(client, GROUP, transaction_id=txid, messages=[
        {"topic": "out", "body": f"out{o}", "properties": {"input": str(o)}} for o in offsets],
        acks=[{"topic": "in", "subscription": "s", "offsets": offsets}], **extra)


def state(client: Any) -> dict[str, Any]:
    return dict(client.get(SUB).json)


def outputs(client: Any) -> Counter[int]:
    page = client.get("/v1/topics/out/messages?limit=1000").json["messages"]
    return Counter(int(m["properties"]["input"]) for m in page)
