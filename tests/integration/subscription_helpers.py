"""Shared helpers of the subscription tests: commit messages, create a subscription,
receive, acknowledge and describe through the API."""

from __future__ import annotations

from typing import Any

from tests.integration.helpers import finish, send

SUBS = "/v1/topics/t/subscriptions"


def commit(client: Any, n: int, topic: str = "t", **extra: Any) -> list[int]:
    sent = send(client, messages=[{"topic": topic, "body": f"m{i}", **extra} for i in range(n)])
    assert sent.status_code == 201, sent.json
    done = finish(client, sent.json["transaction_id"], "commit")
    assert done.status_code == 200, done.json
    return [m["offset"] for m in done.json["messages"]]


def create(client: Any, name: str = "s", topic: str = "t", **body: Any) -> Any:
    r = client.put(f"/v1/topics/{topic}/subscriptions/{name}", json=body)
    assert r.status_code in (200, 201), r.json
    return r.json


def receive(client: Any, n: int = 10, name: str = "s", topic: str = "t") -> list[dict[str, Any]]:
    r = client.post(f"/v1/topics/{topic}/subscriptions/{name}/receive", json={"max_messages": n})
    assert r.status_code == 200, r.json
    return list(r.json["messages"])


def offsets(messages: list[dict[str, Any]]) -> list[int]:
    return [m["offset"] for m in messages]


def post(client: Any, action: str, body: dict[str, Any], name: str = "s") -> Any:
    r = client.post(f"{SUBS}/{name}/{action}", json=body)
    assert r.status_code == 200, r.json
    return r.json


def describe(client: Any, name: str = "s") -> dict[str, Any]:
    r = client.get(f"{SUBS}/{name}")
    assert r.status_code == 200, r.json
    return dict(r.json)
