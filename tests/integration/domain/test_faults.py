"""Faults: the database drops every connection mid-load (as a restart does)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from sqlalchemy import create_engine, text

from app.web import create_app
from tests.acceptance.conftest import start_serve
from tests.conftest import LiveServer, make_settings


def test_connection_loss_loses_no_acknowledged_commit(postgres_url: str) -> None:
    app = create_app(make_settings(postgres_url))
    server = LiveServer(app)
    try:
        _run(server.url, postgres_url)
    finally:
        server.stop()
        app.extensions["txmsg"].close()


def test_connection_loss_loses_no_acknowledged_commit_under_txmsg_serve(
        postgres_url: str, tmp_path: Path) -> None:
    """The same through the server as deployed: Granian, the ASGI front's hot routes."""
    served = start_serve({"TXMSG_DATABASE_URL": postgres_url}, tmp_path, "--no-checker",
                         "--no-migrate")
    try:
        _run(served.url, postgres_url)
    finally:
        served.stop()
    assert "Traceback" not in served.log.read_text()


def _run(url: str, postgres_url: str) -> None:
    requests.put(f"{url}/v1/producer-groups/g", json={"check_urls": ["http://127.0.0.1:9/c"]},
                 timeout=10).raise_for_status()
    admin = create_engine(postgres_url)
    stop = threading.Event()
    kills = 0

    def killer() -> None:
        nonlocal kills
        while not stop.wait(0.05):
            with admin.connect() as conn:
                conn.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
                conn.commit()
            kills += 1

    acknowledged: dict[str, list[dict]] = {}
    failures: list[requests.Response] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        txid = f"t-{i}"
        with requests.Session() as s:
            r = s.post(f"{url}/v1/producer-groups/g/transactions",
                       json={"transaction_id": txid, "topic": "t", "body": str(i)}, timeout=30)
            if r.status_code not in (200, 201):
                with lock:
                    failures.append(r)
                return
            r = s.post(f"{url}/v1/producer-groups/g/transactions/{txid}/commit", timeout=30)
            with lock:
                if r.status_code == 200:
                    acknowledged[txid] = r.json()["messages"]
                else:
                    failures.append(r)

    k = threading.Thread(target=killer)
    k.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(work, range(400)))
    finally:
        stop.set()
        k.join(timeout=10)
        admin.dispose()
    assert kills > 3
    print(f"{kills} connection kills, {len(acknowledged)} acknowledged, "
          f"{len(failures)} refused with 503")
    assert acknowledged, "no request got through at all"
    for r in failures:
        assert r.status_code == 503, r.text
        assert r.headers["Content-Type"] == "application/problem+json"
        assert r.json()["code"] == "database_unavailable"
    # every acknowledged commit is durable and readable at the offset it was given
    page = requests.get(f"{url}/v1/topics/t/messages?limit=1000", timeout=10).json()
    by_id = {m["message_id"]: m["offset"] for m in page["messages"]}
    for messages in acknowledged.values():
        for m in messages:
            assert by_id[m["message_id"]] == m["offset"]
    assert sorted(by_id.values()) == list(range(len(by_id)))
    # and the service recovered: retrying whatever failed now succeeds
    for i in range(400):
        txid = f"t-{i}"
        if txid in acknowledged:
            continue
        r = requests.post(f"{url}/v1/producer-groups/g/transactions",
                          json={"transaction_id": txid, "topic": "t", "body": str(i)}, timeout=30)
        assert r.status_code in (200, 201)
        assert requests.post(f"{url}/v1/producer-groups/g/transactions/{txid}/commit",
                             timeout=30).status_code == 200
    page = requests.get(f"{url}/v1/topics/t/messages?limit=1000", timeout=10).json()
    assert [m["offset"] for m in page["messages"]] == list(range(400))
