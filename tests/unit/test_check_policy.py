"""The check policy's arithmetic (app.domain.checks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.config import Settings
from app.domain import checks


def test_transaction_url_first_then_group_urls_each_once() -> None:
    assert checks.callback_urls("http://a/c", ["http://b/c", "http://a/c", "http://d/c"]) == \
        ["http://a/c", "http://b/c", "http://d/c"]
    assert checks.callback_urls(None, ["http://b/c"]) == ["http://b/c"]
    assert checks.callback_urls(None, []) == []


def test_a_lease_outlasts_every_url_timeout_plus_the_margin() -> None:
    settings = Settings(checker_lease_seconds=5)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert checks.lease_until(settings, now, urls=4, timeout=2.0) == \
        now + timedelta(seconds=5 + 4 * checks.ATTEMPT_TIMEOUTS * 2.0)
    assert checks.timeout_seconds(None) == 3.0  # the registration's default
    assert checks.timeout_seconds(250) == 0.25


def test_exhausted_at_and_beyond_max() -> None:
    settings = Settings(check_max_times=3)
    assert [checks.exhausted(settings, n) for n in (0, 2, 3, 7)] == [False, False, True, True]
