"""Two `txmsg serve` processes on one PostgreSQL: a receive waiting on one is woken by a
commit made through the other, or by `txmsg transactions commit`, through a PostgreSQL
notification, as its /metrics tells (``txmsg_wakeups_total{source="notify"}``); and so it
is again once its listener's connection has been terminated and it has reconnected."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from app.storage import notices
from tests.acceptance.conftest import Served, run_txmsg
from tests.callbacks import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

GROUP = "shop"
SUB = "/v1/topics/t/subscriptions/s"
# A round is not woken by the notification when its commit lands before the receive waits,
# or when the probe (every second) looks between the commit and its notification (a few
# milliseconds): rare, and never several rounds in a row.
ROUNDS = 5


def wakeups(url: str, source: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    found = re.search(rf'^txmsg_wakeups_total{{source="{source}"}} (\S+)$', text,
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def receive(url: str, wait_ms: int) -> list[dict[str, Any]]:
    r = requests.post(f"{url}{SUB}/receive", json={"max_messages": 10, "wait_ms": wait_ms},
                      timeout=60)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def send(url: str, body: str) -> str:
    r = requests.post(f"{url}/v1/producer-groups/{GROUP}/transactions",
                      json={"topic": "t", "body": body}, timeout=30)
    assert r.status_code == 201, r.text
    return str(r.json()["transaction_id"])


def woken_by_a_notification(waiting: Served, commit: Callable[[str], None]) -> None:
    """A receive waits on ``waiting`` while ``commit`` commits a message elsewhere: the
    receive gets it, and in one of ROUNDS rounds at most it was woken by the notification."""
    for n in range(ROUNDS):
        before = wakeups(waiting.url, "notify")
        body = uuid.uuid4().hex
        with ThreadPoolExecutor(1) as pool:
            poll = pool.submit(receive, waiting.url, 10_000)
            # for the receive to look, find nothing and wait: longer each round, so that a
            # loaded machine gets there too (0.3 s to 4.8 s, within the receive's 10 s)
            time.sleep(0.3 * 2**n)
            commit(body)
            got = poll.result(timeout=60)
        assert [m["body"] for m in got] == [body]
        r = requests.post(f"{waiting.url}{SUB}/ack",
                          json={"offsets": [m["offset"] for m in got]}, timeout=30)
        assert r.status_code == 200, r.text
        if wakeups(waiting.url, "notify") > before:
            return
    raise AssertionError(f"no receive of {ROUNDS} woken by a notification")


def two_served(serve_factory: Any, postgres_url: str) -> tuple[Served, Served]:
    env = {"TXMSG_DATABASE_URL": postgres_url}
    a, b = (serve_factory(env, "--no-checker") for _ in range(2))
    r = requests.put(f"{b.url}/v1/producer-groups/{GROUP}",
                     json={"check_urls": ["http://127.0.0.1:9/check"]}, timeout=30)
    assert r.status_code == 200, r.text
    assert requests.put(f"{b.url}{SUB}", json={}, timeout=30).status_code == 201
    return a, b


def commit_through(served: Served) -> Callable[[str], None]:
    def commit(body: str) -> None:
        txid = send(served.url, body)
        r = requests.post(f"{served.url}/v1/producer-groups/{GROUP}/transactions/{txid}/commit",
                          timeout=30)
        assert r.status_code == 200, r.text

    return commit


def test_a_commit_through_another_serve_wakes_a_waiting_receive(
        serve_factory: Any, postgres_url: str, tmp_path: Path) -> None:
    a, b = two_served(serve_factory, postgres_url)
    woken_by_a_notification(a, commit_through(b))

    def commit_with_the_cli(body: str) -> None:
        txid = send(b.url, body)
        done = run_txmsg(["transactions", "commit", GROUP, txid],
                         {"TXMSG_DATABASE_URL": postgres_url}, tmp_path)
        assert done.returncode == 0, done.stderr

    woken_by_a_notification(a, commit_with_the_cli)


def test_the_wakeups_come_back_after_the_listener_connection_is_terminated(
        serve_factory: Any, postgres_url: str) -> None:
    a, b = two_served(serve_factory, postgres_url)
    woken_by_a_notification(a, commit_through(b))
    libpq = postgres_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(libpq, autocommit=True) as admin:
        ended = {pid for pid, ok in admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (notices.LISTENER_NAME,)).fetchall() if ok}
        assert len(ended) >= 2  # a listener in each serve

        def listening_again() -> bool:
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = %s AND state = 'idle' AND query LIKE 'LISTEN%%'",
                (notices.LISTENER_NAME,)).fetchall()
            return len({pid for pid, in rows} - ended) == len(ended)

        wait_until(listening_again, what="the listeners back")
    assert requests.get(f"{a.url}/readyz", timeout=10).status_code == 200
    woken_by_a_notification(a, commit_through(b))
