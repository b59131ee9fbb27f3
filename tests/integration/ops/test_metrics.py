"""/metrics as on-call reads it: every series from the first scrape, the oldest PREPARED
transaction's age, check durations and results, writer queue depth; who may scrape it,
a deleted subscription's series gone, and concurrent scrapes reading the database once
(both stores)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, event, update

from app.api.health import database_state
from app.metrics import DatabaseState, Exposition
from app.storage.schema import subscription_consumer, txn
from app.storage.writer import GroupCommitWriter
from app.vocabulary import CheckResult
from app.web import create_app
from tests.callbacks import answer, wait_until
from tests.conftest import LiveServer, make_settings
from tests.front_client import front
from tests.integration.helpers import FakeClock, finish, register, send, statements_run
from tests.logs import captured_logs

ROOT = Path(__file__).resolve().parents[3]
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
from tests.front_client import close_all, front
app = create_app(Settings(database_url=sys.argv[1]))
sys.stdout.write(front(app).get("/metrics").data.decode())
close_all()
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
        harness_factory: Any) -> None:
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


ADMIN_TOKEN = "metrics-test-admin-token-0123456789"


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _token(client: Any, *scopes: str) -> str:
    r = client.post("/v1/tokens", json={"name": "t", "scopes": list(scopes)},
                    headers=_as(ADMIN_TOKEN))
    assert r.status_code == 201, r.json
    token: str = r.json["token"]
    return token


def test_with_access_control_on_metrics_needs_the_metrics_scope_or_admin(
        database_url: str) -> None:
    """Prometheus' ``authorization`` setting."""
    app = create_app(make_settings(database_url, admin_token=ADMIN_TOKEN))
    try:
        client = front(app)
        consumer, scraper = _token(client, "consume:*"), _token(client, "metrics")
        for auth, status in ((None, 401), (consumer, 403), (scraper, 200),
                             (ADMIN_TOKEN, 200)):
            headers = _as(auth) if auth else {}
            r = client.get("/metrics", headers=headers)
            assert r.status_code == status, (auth, r.data)
            if status == 200:
                assert ("txmsg_half_messages", ()) in samples(r.data.decode())
            else:
                assert r.json["code"] == ("unauthenticated" if status == 401 else "forbidden")
        # the scope opens /metrics and nothing else
        assert client.get("/v1/topics/t/messages", headers=_as(scraper)).status_code == 403
    finally:
        app.extensions["txmsg"].close()


def _series_of(text: str, subscription: str) -> set[str]:
    return {name for name, labels in samples(text)
            if ("subscription", subscription) in labels}


def test_a_deleted_subscriptions_series_are_gone_from_the_next_scrape(client: Any) -> None:
    register(client)
    for name in ("gone", "kept"):
        assert client.put(f"/v1/topics/t/subscriptions/{name}", json={
            "initial_position": "earliest"}).status_code == 201
    send(client, transaction_id="m", topic="t", body="x")
    assert finish(client, "m", "commit").status_code == 200
    base = "/v1/topics/t/subscriptions/gone"
    assert [m["offset"] for m in client.post(f"{base}/receive").json["messages"]] == [0]
    assert client.post(f"{base}/nack", json={"offsets": [0], "delay_ms": 0}).status_code == 200
    again = client.post(f"{base}/receive").json["messages"]
    assert [m["offset"] for m in again] == [0]  # a redelivery: counted for "gone"
    per_subscription = {"txmsg_subscription_backlog", "txmsg_subscription_consumers",
                        "txmsg_redeliveries_total",
                        "txmsg_dead_letter_messages_total",
                        "txmsg_subscription_expired_messages_total"}
    text = client.get("/metrics").data.decode()
    assert _series_of(text, "gone") == _series_of(text, "kept") == per_subscription
    assert samples(text)[("txmsg_redeliveries_total",
                          (("subscription", "gone"), ("topic", "t")))] >= 1

    assert client.delete(base).status_code == 204

    text = client.get("/metrics").data.decode()
    assert _series_of(text, "gone") == set()
    assert _series_of(text, "kept") == per_subscription


def test_consumers_alive_are_counted_by_each_subscriptions_own_timeout(
        client: Any, database_url: str) -> None:
    register(client)
    for name, timeout in (("quick", 5000), ("patient", 600000), ("idle", 30000)):
        assert client.put(f"/v1/topics/t/subscriptions/{name}", json={
            "consumer_timeout_ms": timeout}).status_code == 201
    for name, consumer in (("quick", "c1"), ("quick", "c2"), ("quick", "c3"),
                           ("patient", "c1"), ("patient", "c2")):
        assert client.post(f"/v1/topics/t/subscriptions/{name}/receive",
                           json={"consumer": consumer}).status_code == 200

    def alive() -> dict[str, float]:
        return {dict(labels)["subscription"]: value
                for (metric, labels), value in scrape(client).items()
                if metric == "txmsg_subscription_consumers"}

    assert alive() == {"quick": 3, "patient": 2, "idle": 0}
    engine = create_engine(database_url)
    with engine.begin() as conn:  # c2 quiet for 10 s: past quick's timeout, not patient's
        conn.execute(update(subscription_consumer)
                     .where(subscription_consumer.c.name == "c2")
                     .values(last_seen=datetime.now(UTC) - timedelta(seconds=10)))
    engine.dispose()
    assert alive() == {"quick": 2, "patient": 2, "idle": 0}
    assert client.delete("/v1/topics/t/subscriptions/quick/consumers/c1").status_code == 204
    assert client.delete("/v1/topics/t/subscriptions/patient").status_code == 204
    assert alive() == {"quick": 1, "idle": 0}


def test_concurrent_scrapes_compute_the_database_series_once(database_url: str) -> None:
    """Eight scrapes at once, the first held inside its computation until all eight are
    being served: the database is read once, and every scrape answers with that read."""
    app = create_app(make_settings(database_url, metrics_cache_seconds=3600))
    server = LiveServer(app)
    engine = app.extensions["txmsg"].engine
    with statements_run(engine) as one:
        database_state(engine)
    computation = len(one)
    release, statements = threading.Event(), []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.startswith("BEGIN"):  # as statements_run counts them
            statements.append(statement)
            release.wait(30)

    scrapes = 8
    answers: list[int] = []

    def scrape_once() -> None:
        answers.append(requests.get(f"{server.url}/metrics", timeout=60).status_code)

    def serving() -> int:  # the threads of the front's pool: one per scrape at once
        return len(server.api._threads._threads)  # type: ignore[attr-defined]

    event.listen(engine, "before_cursor_execute", on_execute)
    threads = [threading.Thread(target=scrape_once) for _ in range(scrapes)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: statements and serving() >= scrapes,
                   what="every scrape served, one computing")
        release.set()
        for thread in threads:
            thread.join(timeout=60)
        assert answers == [200] * scrapes
        assert len(statements) == computation
    finally:
        release.set()
        event.remove(engine, "before_cursor_execute", on_execute)
        server.stop()
        app.extensions["txmsg"].close()


def test_the_database_is_read_at_most_once_per_window() -> None:
    clock, reads = FakeClock(), []

    def read() -> DatabaseState:
        reads.append(clock.now)
        return DatabaseState(len(reads), 0.0, [], [], {})

    exposition = Exposition(read, 5.0, clock=clock)
    first = samples(exposition.render().decode())
    clock.now += 4.9
    assert samples(exposition.render().decode())[("txmsg_half_messages", ())] == 1
    clock.now += 0.2
    assert samples(exposition.render().decode())[("txmsg_half_messages", ())] == 2
    assert len(reads) == 2 and first[("txmsg_half_messages", ())] == 1
