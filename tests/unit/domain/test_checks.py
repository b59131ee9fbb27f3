"""The check policy's arithmetic (app.domain.checks)."""

from __future__ import annotations

import logging
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


def test_shares_admit_each_group_up_to_its_share_in_order() -> None:
    shares = checks.Shares(per_group=2)
    taken, passed = shares.admit(["a1", "a2", "a3", "b1", "c1", "c2", "c3"], lambda r: r[0])
    assert taken == ["a1", "a2", "b1", "c1", "c2"]
    assert passed
    assert shares.full() == {"a", "c"}
    shares.done("a")
    assert shares.full() == {"c"}
    taken, passed = shares.admit(["a4", "b2"], lambda r: r[0])
    assert (taken, passed) == (["a4", "b2"], False)
    assert shares.in_flight() == {"a": 2, "b": 2, "c": 2}
    for group in "aabbcc":
        shares.done(group)
    assert shares.in_flight() == {} and shares.full() == set()


def test_an_outage_is_logged_once_then_at_most_once_per_period(caplog) -> None:
    from checker.service import OutageLog

    now = [0.0]
    outage = OutageLog(every=60, clock=lambda: now[0])
    error = RuntimeError("connection refused\n[SQL: SELECT 1]")
    with caplog.at_level(logging.INFO, logger="checker.service"):
        for second in range(0, 131, 1):
            now[0] = float(second)
            outage.failed(error)
        outage.recovered()
        outage.recovered()
    assert [r.message for r in caplog.records] == [
        "database unavailable, checks paused: RuntimeError: connection refused",
        "database still unavailable after 60 s, checks paused: RuntimeError: connection refused",
        "database still unavailable after 120 s, checks paused: RuntimeError: connection refused",
        "database available again after 130.0 s, checks resumed",
    ]
