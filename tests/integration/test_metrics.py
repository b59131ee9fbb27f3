"""/metrics as on-call reads it: every series from the first scrape, the oldest PREPARED
transaction's age, check durations and results, writer queue depth (both stores)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, update

from app.storage.schema import txn
from app.storage.writer import GroupCommitWriter
from app.vocabulary import CheckResult
from tests.callbacks import answer, wait_until
from tests.integration.checker_harness import harness_factory  # noqa: F401
from tests.integration.helpers import finish, register, send
from tests.logs import captured_logs

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ["txmsg_half_messages", "txmsg_commit_messages_total",
            "txmsg_rollback_messages_total", "txmsg_discard_messages_total",
            "txmsg_checks_total", "txmsg_finish_latency_seconds"]
ADDED = ["txmsg_sent_messages_total", "txmsg_oldest_prepared_transaction_age_seconds",
         "txmsg_check_duration_seconds", "txmsg_group_commit_batch_size",
         "txmsg_writer_queue_depth"]
FIRST_SCRAPE = """
import sys
from app.config import Settings
from app.web import create_app
app = create_app(Settings(database_url=sys.argv[1]))
sys.stdout.write(app.test_client().get("/metrics").data.decode())
app.extensions["txmsg"].close()
"""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    return samples(r.data.decode())


def test_a_fresh_process_shows_every_series_at_its_first_scrape(database_url: str,
                                                                tmp_path: Path) -> None:
    """As under ``txmsg serve``: a new process, metrics in a multiprocess directory."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    out = subprocess.run([sys.executable, "-c", FIRST_SCRAPE, database_url], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    first = samples(out.stdout)
    names = {name for name, _labels in first}
    for name in CONTRACT + ADDED:
        assert any(n == name or n.startswith(f"{name}_") for n in names), name
    for result in CheckResult:
        assert first[("txmsg_checks_total", (("result", result.value),))] == 0
        assert first[("txmsg_check_duration_seconds_count", (("result", result.value),))] == 0
    for writer in ("send", "finish"):
        assert first[("txmsg_writer_queue_depth", (("writer", writer),))] == 0
        assert first[("txmsg_group_commit_batch_size_count", (("writer", writer),))] == 0
    assert first[("txmsg_half_messages", ())] == 0
    assert first[("txmsg_oldest_prepared_transaction_age_seconds", ())] == 0
    assert first[("txmsg_commit_messages_total", ())] == 0


def test_the_oldest_prepared_transactions_age_comes_from_the_database(
        client: Any, database_url: str) -> None:
    register(client)
    old = send(client, transaction_id="old", messages=[
        {"topic": "a", "body": "1"}, {"topic": "b", "body": "2"}]).json
    send(client, transaction_id="new")
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(update(txn).where(txn.c.transaction_id == old["transaction_id"])
                     .values(created_at=datetime.now(UTC) - timedelta(hours=1)))
    engine.dispose()
    first = scrape(client)
    assert 3600 <= first[("txmsg_oldest_prepared_transaction_age_seconds", ())] < 3600 + 120
    assert first[("txmsg_half_messages", ())] == 3
    assert finish(client, "old", "commit").status_code == 200
    second = scrape(client)
    assert second[("txmsg_oldest_prepared_transaction_age_seconds", ())] < 120
    assert second[("txmsg_half_messages", ())] == 1
    assert finish(client, "new", "rollback").status_code == 200
    third = scrape(client)
    assert third[("txmsg_oldest_prepared_transaction_age_seconds", ())] == 0
    assert third[("txmsg_half_messages", ())] == 0


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_check_counts_observes_its_duration_and_logs_one_line(
        harness_factory: Any) -> None:  # noqa: F811
    h = harness_factory()
    callback = h.callback(answer("COMMIT"))
    # a query secret in the URL may not reach the log (credentials cannot be registered)
    url = callback.url + "?token=cb-s3cret"
    h.register("shop", [url])
    before = (_value("txmsg_checks_total", result="COMMIT"),
              _value("txmsg_check_duration_seconds_count", result="COMMIT"))
    with captured_logs(h.settings.model_copy(update={"log_format": "json"})) as captured:
        h.send("shop", "paid-1")
        h.start_checker()
        wait_until(lambda: h.state("shop", "paid-1") == "COMMITTED", what="the check")
        wait_until(lambda: any(r.get("result") for r in captured.records()),
                   what="the check's log line")
    after = (_value("txmsg_checks_total", result="COMMIT"),
             _value("txmsg_check_duration_seconds_count", result="COMMIT"))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    [line] = [r for r in captured.records() if r.get("result")]
    assert (line["transaction"], line["group"], line["check"], line["result"]) == (
        "paid-1", "shop", 1, "COMMIT")
    assert line["url"] == callback.url + "?…"
    assert line["duration_ms"] > 0 and line["level"] == "INFO"
    assert "cb-s3cret" not in captured.text


def test_writer_queue_depth_counts_what_waits_behind_a_stuck_batch(database_url: str) -> None:
    release = threading.Event()

    def apply(conn: Any, items: Any) -> list[Any]:
        release.wait(30)
        return list(items)

    depths: list[int] = []
    engine = create_engine(database_url)
    writer: GroupCommitWriter[int] = GroupCommitWriter(engine, apply, max_batch=2,
                                                       on_depth=depths.append)
    threads = [threading.Thread(target=writer.submit, args=(i,)) for i in range(5)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: writer.depth == 5, what="five requests waiting")
        wait_until(lambda: depths and depths[-1] == 5, what="the depth reported")
        release.set()
        for thread in threads:
            thread.join(timeout=30)
        wait_until(lambda: depths[-1] == 0, what="the depth back at 0")
        assert writer.depth == 0
    finally:
        release.set()
        writer.close()
        engine.dispose()
