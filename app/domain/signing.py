"""Signed check callbacks, the Standard Webhooks way (v1: HMAC-SHA256).

Each check callback carries ``webhook-id`` (one per check: the same when one check
number is delivered again after a lost lease, a new one after a resume-check),
``webhook-timestamp`` (Unix seconds, at the attempt) and ``webhook-signature``: ``v1,``
and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}`` under each secret in force, the
current one first, space-separated (two during a rotation's overlap). Secrets are
``whsec_`` and the base64 of 32 random bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_`` secret stands for."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)


def keys_in_force(secret: str, previous: str | None, previous_expires_at: datetime | None,
                  now: datetime) -> tuple[bytes, ...]:
    """The keys that sign at ``now``: the current one, and the previous one during the
    overlap that follows a rotation."""
    if previous is not None and previous_expires_at is not None and now < previous_expires_at:
        return secret_key(secret), secret_key(previous)
    return (secret_key(secret),)


def webhook_id(txn_id: int, created_at: datetime, round_id: int, check_times: int) -> str:
    """The id of check number ``check_times`` of one transaction.

    ``round_id`` tells the rounds of checks apart (0, then the op id of the latest
    resume-check, which starts the numbers again from 1); ``created_at`` tells apart two
    transactions that got the same row id (SQLite may hand out a deleted row's id again).
    """
    key = f"{txn_id}.{created_at.isoformat()}.{round_id}.{check_times}".encode()
    digest = hashlib.sha256(key).digest()[:20]
    return "msg_" + base64.b32encode(digest).decode().rstrip("=").lower()


@dataclass(frozen=True)
class Signer:
    """Signs the deliveries of one check."""

    webhook_id: str
    keys: tuple[bytes, ...] = field(repr=False)

    def headers(self, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        """The Standard Webhooks headers of one delivery of ``body`` (timestamp: now)."""
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signed = b"%s.%s.%s" % (self.webhook_id.encode(), stamp.encode(), body)
        signatures = " ".join(
            "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
            for key in self.keys)
        return {"webhook-id": self.webhook_id, "webhook-timestamp": stamp,
                "webhook-signature": signatures}
