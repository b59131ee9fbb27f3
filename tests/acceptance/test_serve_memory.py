"""A `txmsg serve` worker's memory stays bounded reading pages of large messages and
taking a large send: its peak resident set (VmHWM, from /proc) is measured around them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import requests

from tests.acceptance.conftest import start_serve
from tests.acceptance.memory import descendants, peak, reset_peak, rss

MiB = 1024 * 1024
pytestmark = pytest.mark.slow


def growth(pids: list[int], work: Callable[[], None]) -> int:
    """The most any of these processes' resident set rose above its start during ``work``."""
    for pid in pids:
        reset_peak(pid)
    start = {pid: rss(pid) for pid in pids}
    work()
    return max(peak(pid) - start[pid] for pid in pids)


def test_reading_pages_of_large_messages_holds_one_budget_at_a_time(
        database_url: str, tmp_path: Path) -> None:
    served = start_serve({"TXMSG_DATABASE_URL": database_url,
                          "TXMSG_MAX_READ_BYTES": str(4 * MiB)}, tmp_path, "--no-checker")
    try:
        s, url = requests.Session(), served.url
        s.put(f"{url}/v1/producer-groups/g", json={"check_urls": ["http://127.0.0.1:9/c"]})
        for _ in range(4):  # 24 messages of 2 MiB: 48 MiB in the topic
            sent = s.post(f"{url}/v1/producer-groups/g/transactions", json={
                "messages": [{"topic": "big", "body": "x" * (2 * MiB)}] * 6}).json()
            s.post(f"{url}/v1/producer-groups/g/transactions/{sent['transaction_id']}/commit")
        assert len(s.get(f"{url}/v1/topics/big/messages?limit=1").json()["messages"]) == 1
        pages: list[int] = []

        def read_all() -> None:
            offset = 0
            while page := s.get(f"{url}/v1/topics/big/messages",
                                params={"from_offset": offset, "limit": 100}).json()["messages"]:
                pages.append(len(page))
                offset = page[-1]["offset"] + 1

        grew = growth(descendants(served.proc.pid), read_all)
        assert pages == [2] * 12  # 4 MiB of bodies a page, though limit=100 allows all 24
        # one page (4 MiB of bodies, a few copies of it) rather than the whole topic, which
        # took the worker up by more than 200 MiB when a page was bounded by count only
        assert grew < 64 * MiB, f"the worker grew by {grew / MiB:.0f} MiB"
    finally:
        served.stop()


def test_a_large_send_takes_a_few_times_its_size(database_url: str, tmp_path: Path) -> None:
    served = start_serve({"TXMSG_DATABASE_URL": database_url}, tmp_path, "--no-checker")
    try:
        s, url = requests.Session(), served.url
        s.put(f"{url}/v1/producer-groups/g", json={"check_urls": ["http://127.0.0.1:9/c"]})
        assert s.post(f"{url}/v1/producer-groups/g/transactions",
                      json={"topic": "big", "body": "warm"}).status_code == 201
        request = orjson.dumps({"messages": [{"topic": "big", "body": "x" * (4 * MiB - 16)}]
                                * 15})  # 60 MiB

        def send() -> None:
            r = s.post(f"{url}/v1/producer-groups/g/transactions", data=request,
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 201, r.text[:300]

        grew = growth(descendants(served.proc.pid), send)
        assert grew < 6.5 * len(request), f"the worker grew by {grew / MiB:.0f} MiB"
    finally:
        served.stop()
