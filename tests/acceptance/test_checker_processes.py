"""The check service as real processes: `txmsg checker` processes on one PostgreSQL never
check one transaction at once nor count a check twice, a checker killed mid-check loses
nothing, and `txmsg serve` runs its own check service."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import text

from app.web import create_app
from tests.acceptance.conftest import Checker
from tests.callbacks import CallbackServer, Reply, answer, wait_until
from tests.conftest import make_settings
from tests.front_client import front

CHECKER_ENV = {"TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0", "TXMSG_CHECK_INTERVAL_SECONDS": "0",
               "TXMSG_CHECK_MAX_TIMES": "3", "TXMSG_CHECKER_POLL_SECONDS": "0.1",
               "TXMSG_CHECKER_CONCURRENCY": "3", "TXMSG_CHECKER_LEASE_SECONDS": "1"}


@pytest.fixture
def checkers(tmp_path: Path) -> Iterator[Any]:
    started: list[Checker] = []

    def start(env: dict[str, str]) -> Checker:
        checker = Checker(env, tmp_path / f"checker-{len(started)}.log")
        started.append(checker)
        return checker

    yield start
    for checker in started:
        if checker.proc.poll() is None:
            checker.kill()


@pytest.fixture
def api(postgres_url: str) -> Iterator[Any]:
    app = create_app(make_settings(postgres_url, transaction_timeout_seconds=0))
    yield app
    app.extensions["txmsg"].close()


def _state(api: Any, txid: str) -> dict[str, Any]:
    return front(api).get(f"/v1/producer-groups/shop/transactions/{txid}").json


def _check_log(api: Any, txid: str) -> list[int]:
    with api.extensions["txmsg"].engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT c.check_times FROM check_log c JOIN txn t ON t.id = c.txn_id "
            "WHERE t.transaction_id = :t ORDER BY c.id"), {"t": txid}).scalars())


@pytest.mark.postgres
def test_two_checker_processes_never_check_one_transaction_twice(
        api: Any, checkers: Any, postgres_url: str) -> None:
    callback = CallbackServer(Reply(body=b'{"resolution": "UNKNOWN"}', delay=0.02))
    try:
        client = front(api)
        client.put("/v1/producer-groups/shop", json={"check_urls": [callback.url]})
        env = {"TXMSG_DATABASE_URL": postgres_url, **CHECKER_ENV}
        procs = [checkers(env), checkers(env)]
        for proc in procs:
            proc.wait_started()
        txids = [f"order-{i}" for i in range(30)]
        for txid in txids:
            r = client.post("/v1/producer-groups/shop/transactions",
                            json={"transaction_id": txid, "topic": "orders", "body": txid})
            assert r.status_code == 201

        for txid in txids:
            wait_until(lambda t=txid: _state(api, t)["state"] == "DISCARDED", timeout=90,
                       what=f"{txid} discarded")
        assert callback.overlaps == []
        for txid in txids:
            assert callback.numbers(txid) == [1, 2, 3], txid
            assert _check_log(api, txid) == [1, 2, 3], txid
            assert _state(api, txid)["check_times"] == 3
        parked = client.get("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/messages?limit=1000").json
        assert sorted(m["transaction_id"] for m in parked["messages"]) == sorted(txids)
        per_process = [p.output().count("checker.service: check #") for p in procs]
        assert sum(per_process) == 90, per_process
        assert [p.terminate() for p in procs] == [0, 0]  # SIGTERM: a clean exit
    finally:
        callback.close()


@pytest.mark.postgres
def test_a_checker_killed_mid_check_loses_nothing(api: Any, checkers: Any,
                                                  postgres_url: str) -> None:
    hung: list[int] = []

    def reply(check: dict[str, Any]) -> Reply:
        if not hung:  # the first check never gets its answer: the checker dies waiting
            hung.append(check["check_times"])
            return Reply(hang=callback.released)
        return answer("UNKNOWN")

    callback = CallbackServer(reply)
    try:
        client = front(api)
        # 2 s per URL: the lease is 1 s + 3 x 2 s, the kill comes long before a timeout
        client.put("/v1/producer-groups/shop",
                   json={"check_urls": [callback.url], "check_timeout_ms": 2000})
        client.post("/v1/producer-groups/shop/transactions",
                    json={"transaction_id": "order-1", "topic": "orders", "body": "x"})
        env = {"TXMSG_DATABASE_URL": postgres_url, **CHECKER_ENV}

        first = checkers(env)
        wait_until(lambda: callback.numbers("order-1") == [1], what="the first check")
        os.kill(first.proc.pid, signal.SIGKILL)
        assert first.proc.wait(timeout=10) == -signal.SIGKILL
        with api.extensions["txmsg"].engine.connect() as conn:
            times, owner = conn.execute(text(
                "SELECT check_times, lease_owner FROM txn WHERE transaction_id = 'order-1'"
            )).one()
        assert times == 0 and owner is not None  # nothing counted, still leased to the dead

        second = checkers(env)
        wait_until(lambda: _state(api, "order-1")["state"] == "DISCARDED", timeout=60,
                   what="the second checker to finish the job")
        # check #1 again (its first delivery never completed), then 2 and 3: counted once each
        assert callback.numbers("order-1") == [1, 1, 2, 3]
        assert _check_log(api, "order-1") == [1, 2, 3]
        assert _state(api, "order-1")["check_times"] == 3
        assert second.terminate() == 0
    finally:
        callback.close()


def test_serve_runs_the_check_service_alongside_the_api(serve_factory: Any) -> None:
    """`txmsg serve` (embedded default store) checks transactions itself, and its /metrics
    shows the checks counted by the check service in the serve process."""
    callback = CallbackServer(answer("COMMIT"))
    try:
        served = serve_factory({k: v for k, v in CHECKER_ENV.items()
                                if k != "TXMSG_CHECK_INTERVAL_SECONDS"})
        s = requests.Session()
        s.put(f"{served.url}/v1/producer-groups/shop", json={"check_urls": [callback.url]})
        s.post(f"{served.url}/v1/producer-groups/shop/transactions",
               json={"transaction_id": "order-1", "topic": "orders", "body": "x"})
        wait_until(lambda: s.get(f"{served.url}/v1/producer-groups/shop/transactions/order-1")
                   .json()["state"] == "COMMITTED", what="the embedded check service")
        assert callback.numbers("order-1") == [1]
        metrics = s.get(f"{served.url}/metrics").text
        assert 'txmsg_checks_total{result="COMMIT"} 1.0' in metrics
    finally:
        callback.close()
