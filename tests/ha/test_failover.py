"""Failover with Patroni: the primary's PostgreSQL and then its Patroni killed (SIGKILL)
under a send/commit load and a consume → produce copier, with txmsg on the multi-host URL
(``target_session_attrs=read-write``). Nothing acknowledged is lost (the standby was
synchronous), nothing answers 500, and txmsg follows the new primary by itself: its
retention too, which expires a topic aged by hand on the new primary.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from sqlalchemy import text
from txmsg_client import Consumer, Producer, ReceivedMessage, message

from tests.acceptance.conftest import run_txmsg
from tests.callbacks import CallbackServer, answer, wait_until
from tests.faults.campaign import RECOVERY_SECONDS, Campaign, check_callback
from tests.faults.load import Load, read_all, register
from tests.ha.infra import PatroniCluster, connect

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(600)]

SOURCE, COPY = "orders", "orders-copy"
# retention's topic: read by nothing else here, its messages aged by hand
AGED = "aged"


class Copier:
    """``Consumer.run`` with a producer: each message of SOURCE published again on COPY,
    in the transaction that acknowledges it."""

    def __init__(self, url: str, check: CallbackServer) -> None:
        self.producer = Producer(url, "copier")
        self.producer.register([check.url], check_timeout_ms=1000)
        self.consumer = Consumer(url, SOURCE, "copier")
        self.consumer.subscribe(initial_position="earliest", ack_timeout_ms=5000)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="copier", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.consumer.run(self._copy, producer=self.producer, wait_ms=2000,
                          stop=self.stopping, handle_signals=False)

    @staticmethod
    def _copy(received: ReceivedMessage) -> object:
        assert received.body is not None
        return message(COPY, received.body)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the copier did not stop"


def bodies(messages: list[dict[str, object]]) -> Counter[object]:
    return Counter(m["body"] for m in messages)


def read_topic(url: str, topic: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    offset = 0
    while True:
        r = requests.get(f"{url}/v1/topics/{topic}/messages",
                         params={"from_offset": offset, "limit": 1000}, timeout=60)
        assert r.status_code == 200, r.text
        page = r.json()
        if not page["messages"]:
            return out
        out += page["messages"]
        offset = page["next_offset"]


def expire_aged_topic(url: str, primary_url: str, check: CallbackServer) -> None:
    """Messages committed on AGED, the topic's retention set to 60 s and their commits
    made an hour old on the primary: the check service's retention must expire them."""
    started = time.monotonic()
    producer = Producer(url, "aging")
    producer.register([check.url], check_timeout_ms=1000)
    producer.send([message(AGED, f"aged {i}") for i in range(3)], transaction_id="aged-1",
                  check_immunity_seconds=3600)
    offsets = [m["offset"] for m in producer.commit("aged-1")["messages"]]
    r = requests.put(f"{url}/v1/topics/{AGED}", json={"retention_seconds": 60}, timeout=60)
    assert r.status_code == 200, r.text
    with connect(primary_url) as conn:
        aged = conn.execute(text(
            "UPDATE message_log SET committed_at = committed_at - interval '1 hour' "
            "WHERE topic = :topic"), {"topic": AGED}).rowcount
        conn.commit()
    assert aged == len(offsets) == 3

    def first_offset() -> int:
        r = requests.get(f"{url}/v1/topics/{AGED}", timeout=60)
        assert r.status_code == 200, r.text
        return int(r.json()["first_offset"])

    wait_until(lambda: first_offset() > max(offsets), timeout=RECOVERY_SECONDS,
               what=f"retention to expire {AGED}'s offsets {offsets} on the new primary")
    print(f"retention: {AGED} expired on the new primary {time.monotonic() - started:.1f} s "
          "after its first send")


def test_a_killed_primary_loses_no_acknowledged_commit(patroni: PatroniCluster,
                                                        tmp_path: Path) -> None:
    url = patroni.create_database("failover")
    migrated = run_txmsg(["migrate"], {"TXMSG_DATABASE_URL": url}, tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    campaign = Campaign(patroni, url, tmp_path)  # type: ignore[arg-type]
    # the checker's retention runs often enough to be seen after the failover
    campaign.env.setdefault("TXMSG_RETENTION_INTERVAL_SECONDS", "1")
    callback = check_callback()
    copier_check = CallbackServer(answer("ROLLBACK"))
    copier: Copier | None = None
    try:
        served = campaign.serve("serve", "--no-checker")
        campaign.checker()
        register(served.url, callback.url)
        copier = Copier(served.url, copier_check)
        load = Load(campaign.history, {"serve": served.url}, clients=4)
        load.start()
        campaign.wait_for_progress(campaign.history.note("load started"), "at the start")

        old = patroni.leader()
        killed = campaign.history.note(f"{old.name}: PostgreSQL and Patroni killed")
        old.kill_postgres()
        old.kill()
        new = patroni.wait_for_leader(other_than=old)
        promoted = campaign.history.note(f"{new.name} promoted")
        campaign.wait_for_progress(killed, "after the failover")
        first_commit = min(c.end for c in campaign.history.snapshot()
                           if c.kind == "commit" and c.ok and c.start >= killed)
        print(f"failover: Patroni promoted {new.name} {promoted - killed:.1f} s after the "
              f"kill; first commit {first_commit - killed:.1f} s after the kill")
        # the commit notifications' listener followed the primary too
        wait_until(lambda: "commit notifications listener: connected again"
                   in served.log.read_text(), timeout=RECOVERY_SECONDS,
                   what="the listener to reconnect")
        # and retention, in the checker, works on the new primary
        expire_aged_topic(served.url, new.url("failover"), copier_check)

        outcome = campaign.finish(load, served.url)
        print(outcome)
        source = read_all(served.url)[SOURCE]
        wait_until(lambda: len(read_topic(served.url, COPY)) >= len(source),
                   timeout=RECOVERY_SECONDS, what="the copier to catch up")
        copier.stop()
        copied = read_topic(served.url, COPY)
        assert [m["offset"] for m in copied] == list(range(len(copied)))
        assert bodies(copied) == bodies(source)
        assert callback.checks, "the check service never ran"
        assert all(proc.poll() is None for proc in
                   [served.proc, *(c.proc for c in campaign.checkers)]), "a process exited"
    finally:
        if copier is not None:
            copier.stopping.set()
        callback.close()
        copier_check.close()
        campaign.close()
