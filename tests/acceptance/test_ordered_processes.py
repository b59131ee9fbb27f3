"""Ordered consumption proved from outside, on both stores: consumer processes against a
real `txmsg serve`, one of them killed -9 mid-stream.

- key_shared: four consumers nack, drop (lease timeouts) and ack at random; every
  message is acknowledged exactly once, and each key's messages are handled in offset
  order (a key's next message is received only after the one before it was
  acknowledged, so the receive times of the acknowledged deliveries order them);
- failover: three consumers; the active one acknowledges cumulatively and is killed; the
  standby that takes over resumes from the lowest unacknowledged offset: acknowledged
  offsets run 0..N-1, each once, in order."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.acceptance.conftest import clean_env
from tests.callbacks import wait_until

GROUP = "orders-svc"
SUB = "/v1/topics/orders/subscriptions/s"


def _setup(url: str, settings: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    s = requests.Session()
    assert s.put(f"{url}/v1/producer-groups/{GROUP}",
                 json={"check_urls": ["http://127.0.0.1:9/check"]}).status_code == 200
    assert s.put(f"{url}{SUB}", json={"initial_position": "earliest", **settings}
                 ).status_code == 201
    for start in range(0, len(messages), 100):
        sent = s.post(f"{url}/v1/producer-groups/{GROUP}/transactions",
                      json={"messages": messages[start:start + 100]})
        assert sent.status_code == 201, sent.text
        txid = sent.json()["transaction_id"]
        assert s.post(f"{url}/v1/producer-groups/{GROUP}/transactions/{txid}/commit"
                      ).status_code == 200


def _consumer(url: str, name: str, log: Path, mode: str, seed: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.acceptance.ordered_consumer", url, SUB, name,
         str(log), mode, str(seed)], env=clean_env({}), cwd=Path(__file__).parents[2])


def _events(log: Path) -> list[dict[str, Any]]:
    return sorted((json.loads(line) for line in log.read_text().splitlines() if line.strip()),
                  key=lambda e: e["t"])


def _acked_once(events: list[dict[str, Any]], killed: str) -> dict[int, dict[str, Any]]:
    """Each offset's ack: the one answered ``acked: 1``, or the killed consumer's ack
    left without an answer (its outcome unknown: it committed if no one else acked).
    Fails on an offset acknowledged twice."""
    acks: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "acked" and e["acked"]:
            assert e["offset"] not in acks, ("acknowledged twice", e)
            acks[e["offset"]] = e
    answered = {(e["consumer"], e["offset"]) for e in events if e["event"] == "acked"}
    for e in events:
        if (e["event"] == "acking" and e["consumer"] == killed
                and (killed, e["offset"]) not in answered and e["offset"] not in acks):
            acks[e["offset"]] = e
    return acks


@pytest.mark.slow
def test_key_shared_consumers_keep_each_keys_order_through_nacks_timeouts_and_kill_9(
        serve_factory: Any, database_url: str, tmp_path: Path) -> None:
    served = serve_factory({"TXMSG_DATABASE_URL": database_url}, "--no-checker")
    n, keys = 200, 12
    _setup(served.url, {"type": "key_shared", "ack_timeout_ms": 1000,
                        "redelivery_backoff": {"min_ms": 0, "max_ms": 0},
                        "max_redeliveries": 1000},
           [{"topic": "orders", "body": f"m{i}", "ordering_key": f"order-{i % keys}"}
            for i in range(n)])
    log = tmp_path / "events.jsonl"
    procs = {f"c{i}": _consumer(served.url, f"c{i}", log, "key_shared", i) for i in range(4)}
    wait_until(lambda: log.exists() and log.read_text().count('"acked"') > 40, timeout=120,
               what="acks before the kill")
    procs["c0"].send_signal(signal.SIGKILL)
    for p in procs.values():
        p.wait(timeout=300)
    events = _events(log)
    acks = _acked_once(events, "c0")
    assert sorted(acks) == list(range(n))
    received_at = {}
    for e in events:
        if e["event"] == "received":
            received_at[(e["consumer"], e["offset"])] = e["t"]
    by_key: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for offset, ack in acks.items():
        by_key[offset % keys].append((received_at[(ack["consumer"], offset)], offset))
    for key, handled in by_key.items():
        order = [offset for _, offset in sorted(handled)]
        assert order == sorted(order), (key, order)
    final = requests.get(f"{served.url}{SUB}", timeout=30).json()
    assert (final["backlog"], final["waiting"], final["ack_cursor"]) == (0, 0, n)


@pytest.mark.slow
def test_a_failover_standby_resumes_where_the_killed_active_consumer_stopped(
        serve_factory: Any, database_url: str, tmp_path: Path) -> None:
    served = serve_factory({"TXMSG_DATABASE_URL": database_url}, "--no-checker")
    n = 150
    _setup(served.url, {"type": "failover", "consumer_timeout_ms": 2000},
           [{"topic": "orders", "body": f"m{i}"} for i in range(n)])
    log = tmp_path / "events.jsonl"
    procs = {name: _consumer(served.url, name, log, "failover", i)
             for i, name in enumerate(["a", "b", "c"])}
    active = None

    def some_acked() -> bool:
        nonlocal active
        acked = [e for e in _events(log) if e["event"] == "acked"] if log.exists() else []
        if len(acked) > 30:
            active = acked[0]["consumer"]
            return True
        return False

    wait_until(some_acked, timeout=120, what="acks before the kill")
    assert active is not None
    procs[active].send_signal(signal.SIGKILL)
    for p in procs.values():
        p.wait(timeout=300)
    events = _events(log)
    acks = _acked_once(events, active)
    ordered = [offset for offset, _ in sorted(acks.items(), key=lambda kv: kv[1]["t"])]
    assert ordered == list(range(n))  # cumulative acks one by one: nothing skipped
    others = [e for e in events if e["event"] == "received" and e["consumer"] != active]
    last_of_killed = max(o for o, e in acks.items() if e["consumer"] == active)
    assert others[0]["offset"] <= last_of_killed + 1  # from the lowest unacknowledged one
    assert {e["consumer"] for e in others} == {min({"a", "b", "c"} - {active})}
    final = requests.get(f"{served.url}{SUB}", timeout=30).json()
    assert (final["backlog"], final["ack_cursor"]) == (0, n)
