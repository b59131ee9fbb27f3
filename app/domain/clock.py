"""The time the subscription modules read, always through this module
(``clock.utcnow()``), so that a test can stop it for all of them at once; commits keep
their own (``app.domain.lifecycle.utcnow``)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
