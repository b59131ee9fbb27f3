"""Signed check callbacks, on both stores: each group's signing secret (made, kept,
rotated), and real callbacks received on 127.0.0.1 verified by the ``standardwebhooks``
package (a Standard Webhooks implementation that is not ours), before, during and after
a rotation; the SDK's callback endpoint verifying the same."""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from txmsg_client import Resolution
from txmsg_client.callback import CheckerServer

from app.domain.callback_policy import CallbackPolicy
from app.domain.checks import Checks
from checker.callback import Caller
from tests.callbacks import Delivery, answer, wait_until
from tests.integration.checker_harness import Harness


def settled(h: Harness, group: str, txid: str) -> str | None:
    state = h.state(group, txid)
    return None if state == "PREPARED" else state


def verifies(delivery: Delivery, secret: str) -> bool:
    """Whether ``secret`` verifies the delivery, by the standardwebhooks package."""
    try:
        Webhook(secret).verify(delivery.body, delivery.headers)
    except WebhookVerificationError:
        return False
    return True


def registration(h: Harness, group: str) -> dict[str, Any]:
    r = h.client.get(f"/v1/producer-groups/{group}")
    assert r.status_code == 200, r.json
    return r.json


def rotate(h: Harness, group: str) -> Any:
    return h.client.post(f"/v1/producer-groups/{group}/signing-secret/rotate")


def test_a_group_gets_a_secret_at_first_registration_and_keeps_it(harness) -> None:
    h = harness
    h.register("shop", ["http://127.0.0.1:9/a"])
    secret = registration(h, "shop")["signing_secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert registration(h, "shop")["previous_secret_expires_at"] is None

    r = h.client.put("/v1/producer-groups/shop", json={"check_urls": ["http://127.0.0.1:9/b"]})
    assert r.status_code == 200 and r.json["signing_secret"] == secret  # re-registration
    h.register("other", ["http://127.0.0.1:9/a"])
    assert registration(h, "other")["signing_secret"] != secret  # one per group

    # deleting the registration keeps the secret (the group's transactions stay signed)
    assert h.client.delete("/v1/producer-groups/shop").status_code == 204
    assert h.client.get("/v1/producer-groups/shop").status_code == 404
    assert rotate(h, "shop").status_code == 404
    h.register("shop", ["http://127.0.0.1:9/a"])
    assert registration(h, "shop")["signing_secret"] == secret


def test_rotation_answers_the_new_secret_and_when_the_previous_stops(harness) -> None:
    h = harness
    h.register("shop", ["http://127.0.0.1:9/a"])
    old = registration(h, "shop")["signing_secret"]
    before = datetime.now(UTC)
    r = rotate(h, "shop")
    assert r.status_code == 200, r.json
    new = r.json["signing_secret"]
    assert new.startswith("whsec_") and new != old
    until = datetime.fromisoformat(r.json["previous_secret_expires_at"])
    assert (until - before).total_seconds() == pytest.approx(86400, abs=60)
    assert registration(h, "shop") == r.json
    for bad in ("a.b", "x" * 128):
        r = rotate(h, bad)
        assert r.status_code == 400 and r.json["code"] == "invalid_producer_group"
    r = rotate(h, "nobody")
    assert r.status_code == 404 and r.json["code"] == "producer_group_not_found"


def test_callbacks_verify_with_a_standard_webhooks_library_through_a_rotation(
        harness_factory) -> None:
    h = harness_factory(signing_secret_overlap_seconds=3600)
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    old = registration(h, "shop")["signing_secret"]
    h.send("shop", "before")
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "before")) == "DISCARDED"

    deliveries = cb.delivered("before")
    assert len(deliveries) == 3
    for delivery in deliveries:
        assert verifies(delivery, old)
        assert len(delivery.headers["webhook-signature"].split(" ")) == 1
        stamp = int(delivery.headers["webhook-timestamp"])
        assert abs(stamp - datetime.now(UTC).timestamp()) < 120
    # one id per check
    assert len({d.headers["webhook-id"] for d in deliveries}) == 3

    new = rotate(h, "shop").json["signing_secret"]
    h.send("shop", "during")
    assert wait_until(lambda: settled(h, "shop", "during")) == "DISCARDED"
    for delivery in cb.delivered("during"):
        # both sign: a producer verifies with either, whichever it has
        assert len(delivery.headers["webhook-signature"].split(" ")) == 2
        assert verifies(delivery, new) and verifies(delivery, old)
        assert not verifies(delivery, "whsec_" + base64.b64encode(b"x" * 32).decode())
        tampered = Delivery(delivery.headers, delivery.body.replace(b"during", b"durinG"))
        assert not verifies(tampered, new) and not verifies(tampered, old)

    # the overlap is over: the previous secret signs no more
    with h.engine.begin() as conn:
        conn.execute(text("UPDATE signing_secret SET previous_expires_at = :t"),
                     {"t": datetime(2000, 1, 1, tzinfo=UTC)})
    assert registration(h, "shop")["previous_secret_expires_at"] is None
    h.send("shop", "after")
    assert wait_until(lambda: settled(h, "shop", "after")) == "DISCARDED"
    for delivery in cb.delivered("after"):
        assert verifies(delivery, new) and not verifies(delivery, old)


def test_without_overlap_only_the_new_secret_signs(harness_factory) -> None:
    h = harness_factory(signing_secret_overlap_seconds=0)
    cb = h.callback(answer("COMMIT"))
    h.register("shop", [cb.url])
    old = registration(h, "shop")["signing_secret"]
    r = rotate(h, "shop")
    new = r.json["signing_secret"]
    assert r.json["previous_secret_expires_at"] is None
    h.send("shop", "order-1")
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "COMMITTED"
    [delivery] = cb.delivered("order-1")
    assert verifies(delivery, new) and not verifies(delivery, old)


def test_webhook_id_is_kept_by_a_redelivery_and_new_for_each_check(harness) -> None:
    h = harness
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    secret = registration(h, "shop")["signing_secret"]
    h.send("shop", "order-1")

    # a checker delivers check #1 and dies before counting it
    dead = Checks(h.settings, "dead:1:x", h.engine)
    [claim], _ = dead.claim(1)
    delivery = dead.delivery(claim)
    assert delivery is not None
    Caller(CallbackPolicy.from_settings(h.settings)).ask(claim.urls, delivery.body,
                                                         claim.timeout, delivery.signer)
    dead.lifecycle.close()
    with h.engine.begin() as conn:  # its lease runs out
        conn.execute(text("UPDATE txn SET next_check_at = :t, lease_until = :t"),
                     {"t": datetime(2000, 1, 1, tzinfo=UTC)})
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"

    first = cb.delivered("order-1")
    assert [c["check_times"] for c in cb.received("order-1")] == [1, 1, 2, 3]
    ids = [d.headers["webhook-id"] for d in first]
    assert ids[0] == ids[1]  # the same check, delivered again
    assert len(set(ids)) == 3
    assert all(verifies(d, secret) for d in first)

    # resume-check starts the numbers again from 1: new checks, new ids
    assert h.op("shop", "order-1", "resume-check").status_code == 200
    wait_until(lambda: len(cb.delivered("order-1")) == 7, what="the second round")
    again = [d.headers["webhook-id"] for d in cb.delivered("order-1")[4:]]
    assert len(set(again)) == 3 and not set(again) & set(ids)


def test_a_deleted_groups_transactions_are_still_signed(harness) -> None:
    h = harness
    cb = h.callback(answer("COMMIT"))
    h.register("gone", ["http://127.0.0.1:9/never"])
    secret = registration(h, "gone")["signing_secret"]
    h.send("gone", "own-1", check_url=cb.url)
    assert h.client.delete("/v1/producer-groups/gone").status_code == 204
    h.start_checker()
    assert wait_until(lambda: settled(h, "gone", "own-1")) == "COMMITTED"
    [delivery] = cb.delivered("own-1")
    assert verifies(delivery, secret)


def test_a_group_without_a_secret_gets_one_when_first_checked(harness) -> None:
    """A group deleted before secrets existed still has transactions to check."""
    h = harness
    cb = h.callback(answer("COMMIT"))
    h.register("old", ["http://127.0.0.1:9/never"])
    h.send("old", "own-1", check_url=cb.url)
    assert h.client.delete("/v1/producer-groups/old").status_code == 204
    with h.engine.begin() as conn:  # as the migration leaves it: no secret for "old"
        conn.execute(text("DELETE FROM signing_secret"))
    h.start_checker()
    assert wait_until(lambda: settled(h, "old", "own-1")) == "COMMITTED"
    h.register("old", ["http://127.0.0.1:9/never"])
    [delivery] = cb.delivered("own-1")
    assert verifies(delivery, registration(h, "old")["signing_secret"])


class Paid:
    def check(self, transaction: dict[str, Any]) -> Resolution:
        return Resolution.COMMIT


def test_the_sdk_endpoint_answers_signed_checks_and_refuses_others(harness) -> None:
    h = harness
    with CheckerServer(Paid()) as good, CheckerServer(Paid()) as wrong:
        h.register("shop", [wrong.url, good.url])
        secret = registration(h, "shop")["signing_secret"]
        good.signing_secret = secret
        wrong.signing_secret = "whsec_" + base64.b64encode(b"w" * 32).decode()
        h.send("shop", "order-1")
        h.start_checker()
        assert wait_until(lambda: settled(h, "shop", "order-1")) == "COMMITTED"
    [check] = h.check_log("shop", "order-1")
    assert (check.result, check.url) == ("COMMIT", good.url)
    assert check.detail == f"{wrong.url}: HTTP 401"


def test_secrets_are_not_logged(harness_factory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    h = harness_factory()
    cb = h.callback(answer("COMMIT"))
    h.register("shop", [cb.url])
    old = registration(h, "shop")["signing_secret"]
    new = rotate(h, "shop").json["signing_secret"]
    h.send("shop", "order-1")
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "COMMITTED"
    logged = caplog.text
    assert "check #1 of shop/order-1" in logged
    for secret in (old, new):
        assert secret not in logged and secret[6:] not in logged


def test_a_large_transactions_check_fits_the_sdks_endpoint(harness) -> None:
    """The SDK's check endpoints take 1 MiB: a check of a transaction whose bodies are
    larger carries the first bodies only, the others marked omitted with their size, and
    the endpoint answers it (before, each check was a 413 until the transaction was
    discarded, its local work committed or not)."""
    seen: list[dict[str, Any]] = []

    class Recording:
        def check(self, transaction: dict[str, Any]) -> Resolution:
            seen.append(transaction)
            return Resolution.COMMIT

    h = harness
    bodies = [chr(ord("a") + i) * 600_000 for i in range(3)]
    with CheckerServer(Recording()) as server:
        h.register("shop", [server.url])
        server.signing_secret = registration(h, "shop")["signing_secret"]
        h.send("shop", "big", messages=[{"topic": "orders", "body": b} for b in bodies])
        h.start_checker()
        assert wait_until(lambda: settled(h, "shop", "big")) == "COMMITTED"
    messages = seen[0]["messages"]
    assert messages[0]["body"] == bodies[0]
    assert [(m.get("body_omitted"), m.get("body_bytes"), "body" in m) for m in messages[1:]] \
        == [(True, 600_000, False), (True, 600_000, False)]
