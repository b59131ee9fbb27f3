"""The check service against real HTTP callbacks, on both stores.

Timings are small (see ``FAST``) and every wait is bounded polling; nothing asserts speed.
Absence ("no further check") is shown after a later event the checker must have
processed (a marker transaction resolved by a later poll), not after a sleep.
"""

from __future__ import annotations

import base64
import logging
import threading
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY
from sqlalchemy import text

from tests.callbacks import GARBAGE, CallbackServer, Reply, answer, refused_url, status, wait_until
from tests.integration.checker_harness import Harness

DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def by_txid(**replies: Reply) -> Any:
    """A reply per transaction id (prefix match), UNKNOWN otherwise."""
    def reply(check: dict[str, Any]) -> Reply:
        for prefix, r in replies.items():
            if check["transaction_id"].startswith(prefix):
                return r
        return answer("UNKNOWN")
    return reply


def settled(h: Harness, group: str, txid: str) -> str | None:
    state = h.state(group, txid)
    return None if state == "PREPARED" else state


def resolve_marker(h: Harness, group: str, server: CallbackServer, name: str) -> None:
    """Send a transaction the callback commits and wait for it: the checker has polled
    (and would have sent any pending check) since this call began."""
    h.send(group, name, check_url=server.url, messages=[{"topic": "markers", "body": name}])
    assert wait_until(lambda: settled(h, group, name), what=name) == "COMMITTED"


def test_check_commit_goes_through_the_api_code_path(harness_factory) -> None:
    # an hour between checks: the first check does not wait for the interval
    h = harness_factory(check_interval_seconds=3600)
    cb = h.callback(answer("COMMIT"))
    h.register("shop", [cb.url])
    before = metric("txmsg_checks_total", result="COMMIT")
    sent = h.send("shop", "order-1", messages=[
        {"topic": "orders", "body": "text body", "keys": ["k1"], "tag": "t",
         "ordering_key": "o-1", "properties": {"p": "v"}},
        {"topic": "payments", "body_base64": base64.b64encode(b"\x00\xff").decode()}])
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "COMMITTED"
    [check] = cb.received("order-1")
    assert check["producer_group"] == "shop" and check["check_times"] == 1
    assert datetime.fromisoformat(check["created_at"]) == \
        datetime.fromisoformat(sent["created_at"])
    assert check["messages"] == [
        {"message_id": sent["messages"][0]["message_id"], "topic": "orders", "keys": ["k1"],
         "tag": "t", "ordering_key": "o-1", "properties": {"p": "v"}, "body": "text body"},
        {"message_id": sent["messages"][1]["message_id"], "topic": "payments", "keys": [],
         "tag": None, "ordering_key": None, "properties": {}, "body_base64": "AP8="}]
    assert [m["body"] for m in h.topic("orders")] == ["text body"]
    assert [m["body_base64"] for m in h.topic("payments")] == ["AP8="]
    assert [(c.check_times, c.result, c.url) for c in h.check_log("shop", "order-1")] == \
        [(1, "COMMIT", cb.url)]
    assert h.ops("shop", "order-1") == [("COMMIT", "check", 1)]
    assert h.txn("shop", "order-1")["check_times"] == 1
    assert metric("txmsg_checks_total", result="COMMIT") == before + 1


def test_check_rollback(harness) -> None:
    cb = harness.callback(answer("ROLLBACK"))
    harness.register("shop", [cb.url])
    harness.send("shop", "order-1")
    harness.start_checker()
    assert wait_until(lambda: settled(harness, "shop", "order-1")) == "ROLLED_BACK"
    assert cb.numbers("order-1") == [1]
    assert harness.topic("orders") == []
    assert harness.ops("shop", "order-1") == [("ROLLBACK", "check", 1)]
    assert harness.op("shop", "order-1", "commit").status_code == 409


def test_unknown_until_discard_then_resume_then_late_commit(harness) -> None:
    h = harness
    cb = h.callback(by_txid(marker=answer("COMMIT")))
    h.register("shop", [cb.url])
    discarded_before = metric("txmsg_discard_messages_total")
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    resolve_marker(h, "shop", cb, "marker-1")
    assert cb.numbers("order-1") == [1, 2, 3]
    assert [(c.check_times, c.result) for c in h.check_log("shop", "order-1")] == \
        [(1, "UNKNOWN"), (2, "UNKNOWN"), (3, "UNKNOWN")]
    assert h.txn("shop", "order-1")["check_times"] == 3
    [parked] = h.topic(DISCARD_TOPIC)
    assert parked["transaction_id"] == "order-1" and parked["body"] == "body of order-1"
    assert {k: parked["properties"][k] for k in
            ("REAL_TOPIC", "TRANSACTION_ID", "PRODUCER_GROUP", "CHECK_TIMES")} == \
        {"REAL_TOPIC": "orders", "TRANSACTION_ID": "order-1", "PRODUCER_GROUP": "shop",
         "CHECK_TIMES": "3"}
    assert metric("txmsg_discard_messages_total") == discarded_before + 1

    # an operator puts it back: checked again from 1, discarded again (appended again)
    r = h.op("shop", "order-1", "resume-check")
    assert r.status_code == 200 and r.json["state"] == "PREPARED"
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    resolve_marker(h, "shop", cb, "marker-2")
    assert cb.numbers("order-1") == [1, 2, 3, 1, 2, 3]
    assert [c.check_times for c in h.check_log("shop", "order-1")] == [1, 2, 3, 1, 2, 3]
    assert [m["properties"]["CHECK_TIMES"] for m in h.topic(DISCARD_TOPIC)] == ["3", "3"]
    assert [op for op, _, _ in h.ops("shop", "order-1")] == ["DISCARD", "RESUME", "DISCARD"]

    # a late commit resolves it; the discard topic keeps its entries
    assert h.op("shop", "order-1", "commit").json["state"] == "COMMITTED"
    assert [m["body"] for m in h.topic("orders")] == ["body of order-1"]
    assert len(h.topic(DISCARD_TOPIC)) == 2


def test_unanswered_urls_are_passed_over_and_each_check_counts_once(harness_factory) -> None:
    h = harness_factory()
    failing = h.callback(status(500))
    hanging = h.callback(Reply(hang=threading.Event()))
    refused = refused_url()
    h.register("shop", [refused, failing.url, hanging.url], timeout_ms=300)
    before = metric("txmsg_checks_total", result="TIMEOUT")
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    # every URL was asked for every check, in order, and each check counted once
    assert failing.numbers("order-1") == [1, 2, 3]
    assert wait_until(lambda: hanging.numbers("order-1") == [1, 2, 3])
    log = h.check_log("shop", "order-1")
    assert [(c.check_times, c.result, c.url) for c in log] == \
        [(n, "TIMEOUT", hanging.url) for n in (1, 2, 3)]
    for c in log:
        assert f"{refused}: REFUSED" not in c.detail  # the detail names the failure, not the enum
        assert refused in c.detail and "cannot connect" in c.detail
        assert f"{failing.url}: HTTP 500" in c.detail and "timed out" in c.detail
    assert metric("txmsg_checks_total", result="TIMEOUT") == before + 3
    assert h.txn("shop", "order-1")["check_times"] == 3


def test_a_2xx_decides_even_without_a_usable_resolution(harness) -> None:
    h = harness
    failing = h.callback(status(503))
    garbage = h.callback(GARBAGE)
    empty = h.callback(answer(None))
    odd = h.callback(Reply(body=b'{"resolution": "MAYBE"}'))
    after = h.callback(answer("COMMIT"))  # never reached: a 2xx before it decides
    h.register("garbled", [failing.url, garbage.url, after.url])
    h.register("silent", [empty.url, after.url])
    h.register("odd", [odd.url, after.url])
    for group in ("garbled", "silent", "odd"):
        h.send(group, f"{group}-1")
    h.start_checker()

    for group in ("garbled", "silent", "odd"):
        assert wait_until(lambda g=group: settled(h, g, f"{g}-1")) == "DISCARDED"
    assert after.checks == []
    assert failing.numbers("garbled-1") == [1, 2, 3]
    assert [(c.result, c.url) for c in h.check_log("garbled", "garbled-1")] == \
        [("BAD_RESPONSE", garbage.url)] * 3
    assert "not JSON" in h.check_log("garbled", "garbled-1")[0].detail
    assert [(c.result, c.detail) for c in h.check_log("silent", "silent-1")] == \
        [("UNKNOWN", "2xx without a resolution")] * 3
    assert [c.result for c in h.check_log("odd", "odd-1")] == ["BAD_RESPONSE"] * 3


def test_transaction_check_url_first_then_group_urls_in_order(harness) -> None:
    h = harness
    own = h.callback(answer("COMMIT"))
    failing = h.callback(status(500))
    group_cb = h.callback(answer("ROLLBACK"))
    h.register("shop", [failing.url, group_cb.url])
    h.send("shop", "own-1", check_url=own.url)
    h.send("shop", "plain-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "own-1")) == "COMMITTED"
    assert wait_until(lambda: settled(h, "shop", "plain-1")) == "ROLLED_BACK"
    assert own.numbers("own-1") == [1]
    assert failing.numbers("own-1") == [] and group_cb.numbers("own-1") == []
    assert failing.numbers("plain-1") == [1] and group_cb.numbers("plain-1") == [1]
    [entry] = h.check_log("shop", "plain-1")
    assert (entry.result, entry.url) == ("ROLLBACK", group_cb.url)
    assert f"{failing.url}: HTTP 500" in entry.detail


def test_check_immunity_delays_the_first_check(harness) -> None:
    h = harness
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    immune = h.send("shop", "immune-1", check_immunity_seconds=3600)
    h.send("shop", "plain-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "plain-1")) == "DISCARDED"
    txn = h.txn("shop", "immune-1")
    assert txn["state"] == "PREPARED" and txn["check_times"] == 0
    delay = (datetime.fromisoformat(txn["next_check_at"])
             - datetime.fromisoformat(immune["created_at"])).total_seconds()
    assert delay == 3600
    assert cb.numbers("immune-1") == []


def test_no_check_after_commit_or_rollback(harness) -> None:
    h = harness
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    for txid in ("committed-1", "rolled-1", "open-1"):
        h.send("shop", txid)
    assert h.op("shop", "committed-1", "commit").status_code == 200
    assert h.op("shop", "rolled-1", "rollback").status_code == 200
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "open-1")) == "DISCARDED"
    assert {c["transaction_id"] for c in cb.checks} == {"open-1"}
    assert h.check_log("shop", "committed-1") == [] and h.check_log("shop", "rolled-1") == []


def test_a_check_in_flight_when_the_api_commits_still_counts_once(harness) -> None:
    h = harness
    hold = threading.Event()
    cb = h.callback(by_txid(**{"order-": Reply(hang=hold, body=b'{"resolution": "ROLLBACK"}'),
                               "marker": answer("COMMIT")}))
    h.register("shop", [cb.url], timeout_ms=10_000)
    h.send("shop", "order-1")
    h.start_checker()

    wait_until(lambda: cb.numbers("order-1") == [1], what="the check to arrive")
    assert h.op("shop", "order-1", "commit").json["state"] == "COMMITTED"
    hold.set()  # the producer's (stale) answer: ROLLBACK
    wait_until(lambda: h.check_log("shop", "order-1"), what="the check to be recorded")
    resolve_marker(h, "shop", cb, "marker-1")
    assert [(c.check_times, c.result) for c in h.check_log("shop", "order-1")] == \
        [(1, "ROLLBACK")]
    txn = h.txn("shop", "order-1")
    assert (txn["state"], txn["check_times"]) == ("COMMITTED", 1)
    assert h.ops("shop", "order-1") == [("COMMIT", "api", 0)]
    assert cb.numbers("order-1") == [1]


def test_deleted_group_checks_are_unknown_but_own_check_url_is_asked(harness) -> None:
    h = harness
    cb = h.callback(answer("COMMIT"))
    h.register("gone", ["http://127.0.0.1:9/never"])
    h.send("gone", "orphan-1")
    h.send("gone", "own-1", check_url=cb.url)
    assert h.client.delete("/v1/producer-groups/gone").status_code == 204
    h.start_checker()

    assert wait_until(lambda: settled(h, "gone", "orphan-1")) == "DISCARDED"
    assert [(c.check_times, c.result, c.url) for c in h.check_log("gone", "orphan-1")] == \
        [(1, "NO_CALLBACK", None), (2, "NO_CALLBACK", None), (3, "NO_CALLBACK", None)]
    assert wait_until(lambda: settled(h, "gone", "own-1")) == "COMMITTED"
    assert cb.numbers("own-1") == [1]


def test_a_discard_is_logged_as_a_warning_with_its_fields(harness, caplog) -> None:  # type: ignore[no-untyped-def]
    """The line an operator searches for: which transaction, of which group, after how
    many checks (fields of a JSON log, as the check's own lines have)."""
    caplog.set_level(logging.INFO, logger="app.domain.checks")
    h = harness
    h.register("shop", [h.callback(by_txid()).url])
    h.send("shop", "order-7")
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-7")) == "DISCARDED"

    def discard_line() -> logging.LogRecord | None:
        return next((r for r in caplog.records if r.name == "app.domain.checks"
                     and r.getMessage().startswith("discarded shop/order-7")), None)

    record = wait_until(discard_line, what="the discard's log line")
    assert record.getMessage() == "discarded shop/order-7 after check #3"
    assert record.levelno == logging.WARNING
    assert (record.transaction, record.group, record.check, record.op) == (  # type: ignore[attr-defined]
        "order-7", "shop", 3, "DISCARD")


def test_crash_after_the_last_check_discards_without_asking_again(harness) -> None:
    h = harness
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    h.send("shop", "order-1")
    # what a checker leaves when it dies right after recording check #3 (the last)
    with h.engine.begin() as conn:
        conn.execute(text("UPDATE txn SET check_times = 3, lease_owner = 'dead:1:x' "
                          "WHERE transaction_id = 'order-1'"))
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    assert cb.checks == []
    assert h.ops("shop", "order-1") == [("DISCARD", "check", 3)]
    assert h.topic(DISCARD_TOPIC)[0]["properties"]["CHECK_TIMES"] == "3"


def test_a_slow_callback_does_not_hold_up_the_others(harness) -> None:
    h = harness
    hold = threading.Event()
    slow = h.callback(Reply(hang=hold, body=b'{"resolution": "COMMIT"}'))
    fast = h.callback(answer("COMMIT"))
    h.register("shop", [fast.url], timeout_ms=20_000)
    h.send("shop", "slow-1", check_url=slow.url)  # due first
    h.send("shop", "fast-1")
    h.start_checker()

    wait_until(lambda: slow.numbers("slow-1") == [1], what="the slow check")
    assert wait_until(lambda: settled(h, "shop", "fast-1")) == "COMMITTED"
    assert h.state("shop", "slow-1") == "PREPARED"  # still waiting for its producer
    hold.set()
    assert wait_until(lambda: settled(h, "shop", "slow-1")) == "COMMITTED"
    assert slow.numbers("slow-1") == [1]


def test_two_checkers_on_one_store_never_check_a_transaction_twice(harness) -> None:
    h = harness
    cb = h.callback(Reply(body=b'{"resolution": "UNKNOWN"}', delay=0.01))
    h.register("shop", [cb.url])
    txids = [f"order-{i}" for i in range(12)]
    for txid in txids:
        h.send("shop", txid)
    h.start_checker(checker_concurrency=2)
    h.start_checker(checker_concurrency=2)

    for txid in txids:
        assert wait_until(lambda t=txid: settled(h, "shop", t), timeout=60) == "DISCARDED"
    assert cb.overlaps == []
    for txid in txids:
        assert cb.numbers(txid) == [1, 2, 3], txid
        assert [c.check_times for c in h.check_log("shop", txid)] == [1, 2, 3]
    assert sorted(m["transaction_id"] for m in h.topic(DISCARD_TOPIC)) == sorted(txids)
