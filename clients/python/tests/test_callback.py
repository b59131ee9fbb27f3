"""The SDK's pieces that need no service: messages and the callback endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from txmsg_client import Resolution, message
from txmsg_client.callback import checker_app
from werkzeug.test import Client


class Ledger:
    """A producer's local truth: which orders were paid."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def check(self, transaction: dict[str, Any]) -> Resolution:
        self.seen.append(transaction)
        return {"paid": Resolution.COMMIT, "void": Resolution.ROLLBACK}.get(
            transaction["transaction_id"], Resolution.UNKNOWN)


def test_message_text_and_binary_bodies() -> None:
    assert message("orders", "hi") == {"topic": "orders", "body": "hi"}
    assert message("orders", b"\x00\x01", keys=["k"], tag="t", properties={"a": "b"}) == {
        "topic": "orders", "body_base64": "AAE=", "keys": ["k"], "tag": "t",
        "properties": {"a": "b"}}


@pytest.mark.parametrize(("txid", "expected"),
                         [("paid", "COMMIT"), ("void", "ROLLBACK"), ("other", "UNKNOWN")])
def test_checker_app_answers_the_resolution(txid: str, expected: str) -> None:
    ledger = Ledger()
    body = {"producer_group": "shop", "transaction_id": txid, "check_times": 2,
            "created_at": "2026-01-01T00:00:00Z", "messages": []}
    r = Client(checker_app(ledger)).post("/check", json=body)
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.get_json() == {"resolution": expected}
    assert ledger.seen == [body]


def test_checker_app_refuses_what_is_not_a_check() -> None:
    client = Client(checker_app(Ledger()))
    for data in (b"not json", b"[1, 2]"):
        r = client.post("/check", data=data, content_type="application/json")
        assert r.status_code == 400 and r.mimetype == "application/problem+json"
        assert r.get_json()["code"] == "invalid_json"
    r = client.get("/check")
    assert r.status_code == 405 and r.get_json()["code"] == "method_not_allowed"


def test_checker_app_answers_500_when_the_checker_fails() -> None:
    class Broken:
        def check(self, transaction: dict[str, Any]) -> Resolution:
            raise RuntimeError("database down")

    class Vague:
        def check(self, transaction: dict[str, Any]) -> Any:
            return "MAYBE"

    for checker in (Broken(), Vague()):
        r = Client(checker_app(checker)).post("/check", json={"transaction_id": "x"})
        assert r.status_code == 500 and r.get_json()["code"] == "checker_error"
    assert "database down" in Client(checker_app(Broken())).post(
        "/", json={}).get_json()["detail"]
