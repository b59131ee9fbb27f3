"""The load of a fault campaign: producers that send, then commit, roll back or abandon
(leave it to the check service), retrying what got no answer as a real producer would,
and a reader paging every topic by offset. Every request goes into the ``History``.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from typing import Any

import requests

from tests.faults.history import Call, History, keep_page

GROUP = "campaign"
TOPICS = ("orders", "payments", "audit")
PLANS = {"c": "commit", "r": "rollback", "a": "abandon"}
RETRY_PAUSE = 0.2


def plan_of(txid: str) -> str:
    """What the producer meant to do with a transaction: its id's last letter says."""
    return PLANS[txid.rsplit("-", 1)[1]]


def decided(txid: str) -> str:
    """The producer's answer to a check of ``txid`` (fixed by the id)."""
    return "COMMIT" if zlib.crc32(txid.encode()) % 2 == 0 else "ROLLBACK"


def register(url: str, check_url: str) -> None:
    r = requests.put(f"{url}/v1/producer-groups/{GROUP}",
                     json={"check_urls": [check_url], "check_timeout_ms": 1000}, timeout=60)
    assert r.status_code == 200, r.text


class Load:
    """``clients`` producer threads and one reader over the servers ``targets`` (name →
    URL): producer i uses target i mod n, the reader takes them in turn."""

    def __init__(self, history: History, targets: dict[str, str], clients: int = 8,
                 seed: int = 15, drain_seconds: float = 90) -> None:
        self.history, self.targets = history, list(targets.items())
        self.clients, self.seed, self.drain_seconds = clients, seed, drain_seconds
        self.stopping = threading.Event()
        self.deadline = float("inf")  # set by stop(): give up on what is still unanswered
        self.threads = [threading.Thread(target=self._producer, args=(i,), daemon=True,
                                         name=f"producer-{i}") for i in range(clients)]
        self.threads.append(threading.Thread(target=self._reader, daemon=True, name="reader"))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        """Stop starting transactions, let the producers finish theirs (bounded), join."""
        self.deadline = time.monotonic() + self.drain_seconds
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=self.drain_seconds + 70)
        alive = [t.name for t in self.threads if t.is_alive()]
        assert not alive, f"load threads still running: {alive}"

    def _producer(self, i: int) -> None:
        rng = random.Random(self.seed * 1000 + i)
        name, url = self.targets[i % len(self.targets)]
        base = f"{url}/v1/producer-groups/{GROUP}/transactions"
        with requests.Session() as s:
            n = 0
            while not self.stopping.is_set():
                plan = rng.choices("cra", weights=(6, 3, 1))[0]
                txid = f"p{i}-{n}-{plan}"
                n += 1
                body = {"transaction_id": txid,
                        "check_immunity_seconds": 0 if plan == "a" else 3600,
                        "messages": [{"topic": rng.choice(TOPICS), "body": f"{txid}/{k}"}
                                     for k in range(rng.randint(1, 3))]}
                if self._until_answered(s, "send", name, base, txid, body) and plan != "a":
                    self._until_answered(s, PLANS[plan], name, f"{base}/{txid}/{PLANS[plan]}",
                                         txid)

    def _until_answered(self, s: requests.Session, kind: str, target: str, url: str,
                        txid: str, body: Any = None) -> bool:
        """Retry while the answer is a 5xx or none (a retried send or finish is safe)."""
        while True:
            call: Call = self.history.request(s, kind, target, "POST", url, txid=txid,
                                              json_body=body)
            if call.ok:
                return True
            if (call.status is not None and call.status < 500) \
                    or time.monotonic() > self.deadline:
                return False
            time.sleep(RETRY_PAUSE)

    def _reader(self) -> None:
        next_offset = dict.fromkeys(TOPICS, 0)
        turn = 0
        with requests.Session() as s:
            while not self.stopping.is_set():
                for topic in TOPICS:
                    name, url = self.targets[turn % len(self.targets)]
                    turn += 1
                    call = self.history.request(
                        s, "read", name, "GET",
                        f"{url}/v1/topics/{topic}/messages?from_offset={next_offset[topic]}"
                        "&limit=20", topic=topic, keep=keep_page)
                    if call.ok:
                        next_offset[topic] = call.body["next_offset"]
                    else:
                        time.sleep(RETRY_PAUSE)
                time.sleep(0.01)


def read_all(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every topic's committed messages, paged by offset."""
    out: dict[str, list[dict[str, Any]]] = {}
    with requests.Session() as s:
        for topic in TOPICS:
            messages: list[dict[str, Any]] = []
            next_offset = 0
            while True:
                r = s.get(f"{url}/v1/topics/{topic}/messages",
                          params={"from_offset": next_offset, "limit": 1000}, timeout=60)
                assert r.status_code == 200, r.text
                page = r.json()
                if not page["messages"]:
                    break
                messages += page["messages"]
                next_offset = page["next_offset"]
            out[topic] = messages
    return out


def unresolved_abandoned(url: str) -> list[str]:
    """Abandoned transactions the check service has not resolved yet."""
    left: list[str] = []
    after: str | None = "0"
    with requests.Session() as s:
        while after is not None:
            r = s.get(f"{url}/v1/producer-groups/{GROUP}/transactions",
                      params={"state": "PREPARED", "limit": 1000, "after": after}, timeout=60)
            assert r.status_code == 200, r.text
            page = r.json()
            left += [t["transaction_id"] for t in page["transactions"]
                     if plan_of(t["transaction_id"]) == "abandon"]
            after = page["next_after"]
    return left
