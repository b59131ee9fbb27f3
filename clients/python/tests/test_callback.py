"""The SDK's pieces that need no service: messages and the callback endpoint."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook
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


# -- signed checks ---------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OTHER = "whsec_" + base64.b64encode(b"o" * 32).decode()
CHECK = {"producer_group": "shop", "transaction_id": "paid", "check_times": 1,
         "created_at": "2026-01-01T00:00:00Z", "messages": []}


def signed(body: bytes, *secrets: str, msg_id: str = "msg_1",
           at: datetime | None = None) -> dict[str, str]:
    """Standard Webhooks headers made by the standardwebhooks package (not by us)."""
    at = at or datetime.now(UTC)
    signatures = [Webhook(s).sign(msg_id, at, body.decode()) for s in secrets]
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": " ".join(signatures)}


def post(app: Any, body: bytes, headers: dict[str, str]) -> Any:
    return Client(app).post("/check", data=body, headers=headers,
                            content_type="application/json")


def test_a_signed_check_is_answered() -> None:
    ledger = Ledger()
    body = json.dumps(CHECK).encode()
    r = post(checker_app(ledger, signing_secret=SECRET), body, signed(body, SECRET))
    assert r.status_code == 200 and r.get_json() == {"resolution": "COMMIT"}
    assert ledger.seen == [CHECK]


def test_during_a_rotation_either_signature_verifies() -> None:
    body = json.dumps(CHECK).encode()
    both = signed(body, OTHER, SECRET)  # the service sends the new and the previous one
    for secret in (SECRET, OTHER):
        assert post(checker_app(Ledger(), signing_secret=secret), body, both).status_code == 200
    # a producer may also accept either secret while it moves to the new one
    app = checker_app(Ledger(), signing_secret=[OTHER, SECRET])
    assert post(app, body, signed(body, SECRET)).status_code == 200


def bad_checks() -> list[tuple[str, Callable[[bytes], dict[str, str]], bytes | None]]:
    def at(offset: timedelta) -> datetime:  # from the moment the test runs
        return datetime.now(UTC) + offset

    return [
        ("unsigned", lambda b: {}, None),
        ("other secret", lambda b: signed(b, OTHER), None),
        ("stale", lambda b: signed(b, SECRET, at=at(-timedelta(minutes=5, seconds=30))), None),
        ("from the future", lambda b: signed(b, SECRET, at=at(timedelta(minutes=6))), None),
        ("tampered body", lambda b: signed(b, SECRET), b'{"transaction_id": "void"}'),
        ("other id", lambda b: {**signed(b, SECRET), "webhook-id": "msg_2"}, None),
        ("no id", lambda b: {k: v for k, v in signed(b, SECRET).items() if k != "webhook-id"},
         None),
        ("bad timestamp", lambda b: {**signed(b, SECRET), "webhook-timestamp": "soon"}, None),
        ("malformed signature", lambda b: {**signed(b, SECRET), "webhook-signature": "v1"},
         None),
        ("three commas", lambda b: {**signed(b, SECRET), "webhook-signature": "v1,a,b"}, None),
        ("not base64", lambda b: {**signed(b, SECRET), "webhook-signature": "v1,@@@"}, None),
        ("other version", lambda b: {**signed(b, SECRET), "webhook-signature":
                                     signed(b, SECRET)["webhook-signature"].replace("v1,", "v1a,")},
         None),
    ]


@pytest.mark.parametrize(("why", "headers", "sent"), bad_checks(),
                         ids=[case[0] for case in bad_checks()])
def test_a_check_that_does_not_verify_answers_401(
        why: str, headers: Callable[[bytes], dict[str, str]], sent: bytes | None) -> None:
    ledger = Ledger()
    body = json.dumps(CHECK).encode()
    r = post(checker_app(ledger, signing_secret=SECRET), sent or body, headers(body))
    assert r.status_code == 401 and r.mimetype == "application/problem+json"
    assert r.get_json()["code"] == "invalid_signature"
    assert ledger.seen == []  # the checker was not asked
    assert SECRET not in r.get_data(as_text=True)


def test_the_secret_may_be_set_once_known() -> None:
    ledger = Ledger()
    app = checker_app(ledger)
    body = json.dumps(CHECK).encode()
    assert post(app, body, {}).status_code == 200  # no secret: nothing verified
    app.signing_secret = SECRET
    assert app.signing_secret == (SECRET,)
    assert post(app, body, {}).status_code == 401
    assert post(app, body, signed(body, SECRET)).status_code == 200
    with pytest.raises(EmptyWebhookSecretError):
        app.signing_secret = "whsec_"
    assert app.signing_secret == (SECRET,)


def test_checker_app_refuses_a_body_past_its_limit() -> None:
    ledger = Ledger()
    client = Client(checker_app(ledger, max_body_bytes=1000))
    r = client.post("/check", data=b" " * 1001, content_type="application/json")
    assert r.status_code == 413 and r.json["code"] == "payload_too_large"
    assert ledger.seen == []
    body = json.dumps({"transaction_id": "paid"}).encode()
    r = client.post("/check", data=body + b" " * (1000 - len(body)),
                    content_type="application/json")
    assert r.status_code == 200 and r.json == {"resolution": "COMMIT"}
