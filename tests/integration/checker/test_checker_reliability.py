"""The check service under hostile callbacks and database faults, on both stores.

A group whose callbacks hang holds its share of the workers, not all of them; a check
whose database work fails is retried or given back, not left until its lease expires;
an unavailable database is logged once, then rarely. Waits are bounded polling with
generous bounds, far below what the behaviour without the fix would take.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy.exc import OperationalError

from app.storage import checks as checks_storage
from tests.callbacks import Reply, answer, wait_until
from tests.integration.checker_harness import Harness

COMMIT = b'{"resolution": "COMMIT"}'


def settled(h: Harness, group: str, txid: str) -> str | None:
    state = h.state(group, txid)
    return None if state == "PREPARED" else state


def dropped_connection(statement: str) -> OperationalError:
    return OperationalError(statement, {}, Exception(
        "server closed the connection unexpectedly\n\tThis probably means the server "
        "terminated abnormally"))


def fail_first_record(monkeypatch: Any) -> list[int]:
    """The first recording of a check fails as on a dropped connection; the check
    numbers whose recording failed."""
    real, failed = checks_storage.record_check, []

    def flaky(conn: Any, **kwargs: Any) -> bool:
        if not failed:
            failed.append(kwargs["check_times"])
            raise dropped_connection("UPDATE txn SET check_times=...")
        return bool(real(conn, **kwargs))

    monkeypatch.setattr(checks_storage, "record_check", flaky)
    return failed


def test_a_group_whose_callbacks_hang_does_not_hold_up_other_groups(harness_factory) -> None:
    h = harness_factory(checker_concurrency=6, checker_group_concurrency=2)
    hold = threading.Event()
    stuck = h.callback(Reply(hang=hold, body=COMMIT))
    healthy = h.callback(answer("COMMIT"))
    h.register("stuck", [stuck.url], timeout_ms=60_000)
    h.register("shop", [healthy.url])
    hung = [f"hung-{i}" for i in range(16)]
    for txid in hung:  # all due before the healthy group's
        h.send("stuck", txid)
    h.start_checker()
    wait_until(lambda: stuck.in_flight() >= 2, what="the stuck group's checks")

    h.send("shop", "order-1")
    h.send("shop", "order-2")
    assert wait_until(lambda: settled(h, "shop", "order-1"), timeout=20) == "COMMITTED"
    assert wait_until(lambda: settled(h, "shop", "order-2"), timeout=20) == "COMMITTED"
    # the stuck group's calls are still hanging, and it was given no more than its share
    assert stuck.in_flight() == 2
    assert len(stuck.checks) == 2

    hold.set()  # its callbacks answer again: the rest of its backlog goes through
    for txid in hung:
        assert wait_until(lambda t=txid: settled(h, "stuck", t), timeout=60) == "COMMITTED"
    assert stuck.overlaps == []
    assert all(stuck.numbers(txid) == [1] for txid in hung)


def test_a_failed_record_is_retried_at_once_not_after_the_lease(harness_factory,
                                                                 monkeypatch) -> None:
    h = harness_factory(checker_lease_seconds=600)
    cb = h.callback(answer("COMMIT"))
    h.register("shop", [cb.url])
    failed = fail_first_record(monkeypatch)
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1"), timeout=30) == "COMMITTED"
    assert failed == [1]
    assert cb.numbers("order-1") == [1]  # retried recording, not asking again
    assert [c.check_times for c in h.check_log("shop", "order-1")] == [1]
    assert h.ops("shop", "order-1") == [("COMMIT", "check", 1)]


def test_a_record_that_keeps_failing_gives_the_lease_back(harness_factory,
                                                          monkeypatch, caplog) -> None:
    h = harness_factory(checker_lease_seconds=600, checker_db_retry_seconds=0)
    cb = h.callback(answer("COMMIT"))
    h.register("shop", [cb.url])
    failed = fail_first_record(monkeypatch)
    caplog.set_level(logging.WARNING, logger="app.domain.checks")
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1"), timeout=30) == "COMMITTED"
    # the same check number delivered again (as after a lost lease), counted once
    assert failed == [1]
    assert cb.numbers("order-1") == [1, 1]
    assert [c.check_times for c in h.check_log("shop", "order-1")] == [1]
    given_back = [r.getMessage() for r in caplog.records if "due again now" in r.getMessage()]
    assert len(given_back) == 1 and "cannot record check #1" in given_back[0]
    assert "UPDATE" not in given_back[0]


def test_an_unavailable_database_is_logged_once_without_sql(harness_factory,
                                                            monkeypatch, caplog) -> None:
    h = harness_factory(checker_outage_log_seconds=3600)
    real, down, polls = checks_storage.any_due, threading.Event(), []

    def unreachable(conn: Any, now: Any) -> bool:
        if down.is_set():
            polls.append(now)
            raise OperationalError("SELECT txn.id FROM txn WHERE txn.state = 'PREPARED'", {},
                                   Exception("connection refused\n\tIs the server running?"))
        return bool(real(conn, now))

    monkeypatch.setattr(checks_storage, "any_due", unreachable)
    caplog.set_level(logging.INFO, logger="checker.service")
    down.set()
    h.start_checker()
    wait_until(lambda: len(polls) >= 10, what="ten failed polls")
    down.clear()
    wait_until(lambda: "available again" in caplog.text, what="the recovery line")

    lines = [r for r in caplog.records if r.name == "checker.service" and "database" in r.message]
    assert [r.levelname for r in lines] == ["WARNING", "INFO"], [r.message for r in lines]
    assert lines[0].message == ("database unavailable, checks paused: "
                                "Exception: connection refused")
    assert "SELECT" not in caplog.text and "[SQL" not in caplog.text
