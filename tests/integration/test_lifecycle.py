"""The half-message lifecycle through the API, on both stores."""

from __future__ import annotations


def register(client, group: str = "orders-svc") -> None:  # type: ignore[no-untyped-def]
    r = client.put(f"/v1/producer-groups/{group}",
                   json={"check_urls": ["http://127.0.0.1:9/check"]})
    assert r.status_code == 200, r.json


def test_send_commit_read(client) -> None:  # type: ignore[no-untyped-def]
    register(client)
    r = client.post("/v1/producer-groups/orders-svc/transactions",
                    json={"topic": "orders", "body": "hello", "keys": ["o-1"], "tag": "created"})
    assert r.status_code == 201
    sent = r.json
    assert sent["state"] == "PREPARED"
    assert client.get("/v1/topics/orders/messages").json["messages"] == []

    r = client.post(f"/v1/producer-groups/orders-svc/transactions/{sent['transaction_id']}/commit")
    assert r.status_code == 200
    assert r.json["messages"] == [{"message_id": sent["messages"][0]["message_id"],
                                   "topic": "orders", "offset": 0}]
    page = client.get("/v1/topics/orders/messages").json
    assert [m["body"] for m in page["messages"]] == ["hello"]
    assert page["messages"][0]["keys"] == ["o-1"] and page["next_offset"] == 1
