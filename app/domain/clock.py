"""The one clock of the domain: every decision that reads the time (a commit's and a
send's times, leases, retention, checks, tokens, the dashboard) reads it here, as
``clock.utcnow()`` looked up when called (never imported by name), so that a test can
move it for all of them at once."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
