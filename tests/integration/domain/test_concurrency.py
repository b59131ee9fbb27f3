"""Group commit and offset ordering under real concurrency, over real HTTP sockets."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sqlalchemy import event, text

from app.web import create_app
from tests.conftest import LiveServer, make_settings


def _register(url: str, group: str = "g") -> None:
    r = requests.put(f"{url}/v1/producer-groups/{group}",
                     json={"check_urls": ["http://127.0.0.1:9/cb"]}, timeout=10)
    assert r.status_code == 200


def test_concurrent_commits_share_database_transactions(live_server) -> None:  # type: ignore[no-untyped-def]
    """N concurrent commits are answered after fewer than N database commits."""
    url = live_server.url
    _register(url)
    n = 64
    with requests.Session() as s:
        ids = [s.post(f"{url}/v1/producer-groups/g/transactions",
                      json={"topic": "t", "body": str(i)}, timeout=10).json()["transaction_id"]
               for i in range(n)]
    engine = live_server.app.extensions["txmsg"].engine
    commits = []
    event.listen(engine, "commit", lambda conn: commits.append(1))
    barrier = threading.Barrier(n)

    def commit(txid: str) -> int:
        barrier.wait(timeout=10)
        return requests.post(f"{url}/v1/producer-groups/g/transactions/{txid}/commit",
                             timeout=30).status_code

    with ThreadPoolExecutor(n) as pool:
        statuses = list(pool.map(commit, ids))
    assert statuses == [200] * n
    assert 1 <= len(commits) < n
    offsets = requests.get(f"{url}/v1/topics/t/messages?limit=1000", timeout=10).json()
    assert sorted(m["offset"] for m in offsets["messages"]) == list(range(n))


@pytest.mark.slow
def test_reader_paging_by_offset_never_skips(postgres_url: str) -> None:
    """Many committers in two "processes" (two engines and writers) and a paging reader.

    Transactions commit in an order unrelated to their send order, some with several
    messages. The reader pages with from_offset = next_offset and must see a dense
    sequence: if a higher offset ever became visible before a lower one, it would jump
    past the lower one for good.
    """
    apps = [create_app(make_settings(postgres_url, db_pool_size=8)) for _ in range(2)]
    servers = [LiveServer(a) for a in apps]
    try:
        _register(servers[0].url)
        rng = random.Random(7)
        plan = [rng.choice([1, 1, 1, 3]) for _ in range(300)]
        done = threading.Event()
        seen: list[int] = []
        pages = 0

        def reader() -> None:
            nonlocal pages
            nxt = 0
            with requests.Session() as s:
                while True:
                    finished = done.is_set()
                    page = s.get(f"{servers[1].url}/v1/topics/t/messages",
                                 params={"from_offset": nxt, "limit": 50}, timeout=30).json()
                    offsets = [m["offset"] for m in page["messages"]]
                    assert offsets == list(range(nxt, nxt + len(offsets))), (nxt, offsets)
                    seen.extend(offsets)
                    nxt = page["next_offset"]
                    pages += 1
                    if finished and not offsets:
                        return

        def producer(i: int) -> None:
            base = servers[i % 2].url
            with requests.Session() as s:
                body = {"messages": [{"topic": "t", "body": f"{i}-{k}"} for k in range(plan[i])]}
                txid = s.post(f"{base}/v1/producer-groups/g/transactions", json=body,
                              timeout=30).json()["transaction_id"]
                threading.Event().wait(rng.random() * 0.02)
                r = s.post(f"{servers[(i + 1) % 2].url}/v1/producer-groups/g/transactions/"
                           f"{txid}/commit", timeout=30)
                assert r.status_code == 200

        read_thread = threading.Thread(target=reader)
        read_thread.start()
        with ThreadPoolExecutor(24) as pool:
            list(pool.map(producer, range(len(plan))))
        done.set()
        read_thread.join(timeout=60)
        assert not read_thread.is_alive()
        total = sum(plan)
        assert seen == list(range(total))
        assert pages > 5
        engine = apps[0].extensions["txmsg"].engine
        with engine.connect() as conn:
            # every transaction's messages sit in one contiguous, complete run
            rows = conn.execute(text(
                "SELECT transaction_id, count(*), max(queue_offset) - min(queue_offset) "
                "FROM committed_messages WHERE topic = 't' GROUP BY transaction_id")).all()
        assert len(rows) == len(plan)
        assert all(span == count - 1 for _, count, span in rows)
    finally:
        for server in servers:
            server.stop()
        for a in apps:
            a.extensions["txmsg"].close()


def test_all_or_nothing_visibility_across_topics(postgres_url: str) -> None:
    """A reader never sees part of a multi-topic transaction."""
    app = create_app(make_settings(postgres_url))
    server = LiveServer(app)
    try:
        _register(server.url)
        engine = app.extensions["txmsg"].engine
        stop = threading.Event()
        partial: list[tuple] = []

        def watch() -> None:
            while not stop.is_set():
                with engine.connect() as conn:
                    rows = conn.execute(text(
                        "SELECT transaction_id, count(*) FROM committed_messages "
                        "GROUP BY transaction_id HAVING count(*) <> 3")).all()
                partial.extend(rows)

        watcher = threading.Thread(target=watch)
        watcher.start()

        def one(i: int) -> None:
            with requests.Session() as s:
                body = {"messages": [{"topic": f"t{k}", "body": str(i)} for k in range(3)]}
                txid = s.post(f"{server.url}/v1/producer-groups/g/transactions", json=body,
                              timeout=30).json()["transaction_id"]
                s.post(f"{server.url}/v1/producer-groups/g/transactions/{txid}/commit",
                       timeout=30).raise_for_status()

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(150)))
        stop.set()
        watcher.join(timeout=30)
        assert partial == []
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM committed_messages")).scalar() == 450
    finally:
        server.stop()
        app.extensions["txmsg"].close()
