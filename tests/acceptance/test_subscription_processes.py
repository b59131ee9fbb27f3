"""Shared subscriptions under concurrency, as deployed: receivers in threads against two
`txmsg serve` processes and an in-process app on one PostgreSQL, with acks, nacks and
lease timeouts mixed. Every offset is acknowledged or dead-lettered exactly once; no
offset is delivered twice with the same redelivery count (two receivers never hold it
at once); an acknowledged offset is never delivered again."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
import requests

from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import finish, register, send

N = 300
SUB = "/v1/topics/work/subscriptions/shared"


def action(offset: int, redelivery_count: int) -> str:
    """What a receiver does with a delivery: offset % 5 == 0 always fails (nack: dead
    letter after 1 + 2 deliveries), 1 is dropped once (its lease times out), 2 is nacked
    once, the rest are acknowledged at once."""
    kind = offset % 5
    if kind == 0:
        return "nack"
    if kind == 1 and redelivery_count == 0:
        return "drop"
    if kind == 2 and redelivery_count == 0:
        return "nack"
    return "ack"


class HttpSide:
    def __init__(self, url: str) -> None:
        self.url, self.session = url, requests.Session()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.session.post(f"{self.url}{path}", json=body, timeout=60)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def get(self, path: str) -> dict[str, Any]:
        return dict(self.session.get(f"{self.url}{path}", timeout=60).json())


class AppSide:
    def __init__(self, app: Any) -> None:
        self.client = front(app)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.client.post(path, json=body)
        assert r.status_code == 200, r.json
        return dict(r.json)

    def get(self, path: str) -> dict[str, Any]:
        return dict(self.client.get(path).json)


@pytest.mark.postgres
@pytest.mark.slow
def test_every_offset_is_acknowledged_or_dead_lettered_exactly_once(
        serve_factory: Any, postgres_url: str) -> None:
    env = {"TXMSG_DATABASE_URL": postgres_url}
    servers = [serve_factory(env, "--no-checker") for _ in range(2)]
    app = create_app(make_settings(postgres_url))
    try:
        client = front(app)
        register(client)
        assert client.put(SUB, json={
            "initial_position": "earliest", "ack_timeout_ms": 1000, "max_redeliveries": 2,
            "redelivery_backoff": {"min_ms": 0, "max_ms": 0},
            "dead_letter_topic": "work-dlq"}).status_code == 201
        for start in range(0, N, 100):
            sent = send(client, messages=[{"topic": "work", "body": f"job {i}"}
                                          for i in range(start, start + 100)])
            assert finish(client, sent.json["transaction_id"], "commit").status_code == 200

        deliveries: dict[int, list[int]] = defaultdict(list)
        newly_acked: Counter[int] = Counter()
        lock = threading.Lock()
        failures: list[BaseException] = []
        deadline = time.monotonic() + 240

        def receiver(side: Any) -> None:
            try:
                while time.monotonic() < deadline:
                    got = side.post(f"{SUB}/receive", {"max_messages": 7, "wait_ms": 300})
                    if not got["messages"]:
                        if side.get(SUB)["backlog"] == 0:
                            return
                        continue
                    for m in got["messages"]:
                        offset, count = m["offset"], m["redelivery_count"]
                        with lock:
                            deliveries[offset].append(count)
                        what = action(offset, count)
                        if what == "ack":
                            n = side.post(f"{SUB}/ack", {"offsets": [offset]})["acked"]
                            with lock:
                                newly_acked[offset] += n
                        elif what == "nack":
                            side.post(f"{SUB}/nack", {"offsets": [offset], "delay_ms": 0})
            except BaseException as exc:  # noqa: BLE001 (reported by the test thread)
                failures.append(exc)

        sides = [HttpSide(s.url) for s in servers for _ in range(3)]
        sides += [AppSide(app) for _ in range(2)]
        threads = [threading.Thread(target=receiver, args=(side,)) for side in sides]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not failures, failures
        assert not any(t.is_alive() for t in threads)

        dead = [m for page in _pages(client, "work-dlq") for m in page]
        dead_offsets = Counter(int(m["properties"]["ORIGIN_OFFSET"]) for m in dead)
        failing = {o for o in range(N) if o % 5 == 0}
        assert dead_offsets == Counter(dict.fromkeys(failing, 1))  # each once
        assert all(m["properties"]["REDELIVERY_COUNT"] == "2" for m in dead)
        assert newly_acked == Counter({o: 1 for o in range(N) if o not in failing})
        for offset, counts in deliveries.items():
            # one delivery per count: never two holders at once, none after the ack
            assert sorted(counts) == list(range(len(counts))), (offset, counts)
        assert {o: len(c) for o, c in deliveries.items() if o % 5 == 0} == dict.fromkeys(
            failing, 3)
        final = client.get(SUB).json
        assert (final["ack_cursor"], final["backlog"], final["in_flight"]) == (N, 0, 0)
    finally:
        app.extensions["txmsg"].close()


def _pages(client: Any, topic: str) -> list[list[dict[str, Any]]]:
    pages, offset = [], 0
    while True:
        page = client.get(f"/v1/topics/{topic}/messages?from_offset={offset}&limit=1000").json
        if not page["messages"]:
            return pages
        pages.append(page["messages"])
        offset = page["next_offset"]
