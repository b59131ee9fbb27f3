"""Signing check callbacks (app.domain.signing), checked by the standardwebhooks package."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from app.domain import signing

BODY = b'{"producer_group":"shop","transaction_id":"t-1","check_times":1}'


def test_secrets_are_whsec_and_32_random_bytes() -> None:
    made = {signing.new_secret() for _ in range(50)}
    assert len(made) == 50
    for secret in made:
        assert secret.startswith("whsec_") and len(signing.secret_key(secret)) == 32


def test_headers_verify_with_every_key_in_force() -> None:
    old, new = signing.new_secret(), signing.new_secret()
    keys = (signing.secret_key(new), signing.secret_key(old))
    headers = signing.Signer("msg_abc", keys).headers(BODY)
    assert headers["webhook-id"] == "msg_abc"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert [s[:3] for s in headers["webhook-signature"].split(" ")] == ["v1,", "v1,"]
    for secret in (old, new):
        Webhook(secret).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.new_secret()).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(BODY + b" ", headers)


def test_a_given_timestamp_is_signed_and_a_stale_one_is_refused() -> None:
    secret = signing.new_secret()
    signer = signing.Signer("msg_1", (signing.secret_key(secret),))
    stale = int(time.time()) - 301
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(BODY, signer.headers(BODY, stale))


def test_the_previous_key_signs_only_during_the_overlap() -> None:
    new, old = signing.new_secret(), signing.new_secret()
    now = datetime.now(UTC)
    both = signing.keys_in_force(new, old, now + timedelta(seconds=1), now)
    assert both == (signing.secret_key(new), signing.secret_key(old))
    for until in (now, now - timedelta(days=1), None):
        assert signing.keys_in_force(new, old, until, now) == (signing.secret_key(new),)
    assert signing.keys_in_force(new, None, None, now) == (signing.secret_key(new),)


def test_webhook_ids_are_per_check_and_stable() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    ids = {signing.webhook_id(txn, created, rnd, number)
           for txn in (1, 2) for created in (at, at + timedelta(microseconds=1))
           for rnd in (0, 7) for number in (1, 2)}
    assert len(ids) == 16
    assert signing.webhook_id(1, at, 0, 1) == signing.webhook_id(1, at, 0, 1)
    for webhook_id in ids:  # the spec: no "." in an id (it delimits the signed content)
        assert webhook_id.startswith("msg_") and "." not in webhook_id


def test_a_signer_does_not_show_its_keys() -> None:
    key = b"k" * 32
    signer = signing.Signer("msg_1", (key,))
    assert repr(key) not in repr(signer)
    assert base64.b64encode(key).decode() not in repr(signer)
