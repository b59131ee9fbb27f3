"""The API (in process) plus check services on one store, for the checker tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.config import Settings
from app.storage import checks, transactions
from app.storage.schema import op_log
from app.web import create_app
from checker.service import CheckService
from tests.callbacks import CallbackServer, Reply
from tests.conftest import make_settings
from tests.front_client import front

# small timings: due at once, checked again 0.1 s later, discarded after 3 checks,
# a dead checker's claim retried 2 s after the callbacks' own timeouts
FAST = {"transaction_timeout_seconds": 0, "check_interval_seconds": 0.1, "check_max_times": 3,
        "checker_poll_seconds": 0.1, "checker_lease_seconds": 2, "checker_concurrency": 4}


class Harness:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.client = front(self.app)
        self.engine = self.app.extensions["txmsg"].engine
        self.services: list[CheckService] = []
        self.servers: list[CallbackServer] = []

    def callback(self, reply: Any) -> CallbackServer:
        server = CallbackServer(reply)
        self.servers.append(server)
        return server

    def start_checker(self, **overrides: Any) -> CheckService:
        settings = self.settings.model_copy(update=overrides) if overrides else self.settings
        service = CheckService(settings)
        self.services.append(service)
        service.start()
        return service

    def register(self, group: str, urls: list[str], timeout_ms: int = 3000) -> None:
        r = self.client.put(f"/v1/producer-groups/{group}",
                            json={"check_urls": urls, "check_timeout_ms": timeout_ms})
        assert r.status_code == 200, r.json

    def send(self, group: str, transaction_id: str, **extra: Any) -> dict[str, Any]:
        body = {"transaction_id": transaction_id, **extra}
        if "messages" not in body:
            body.update(topic="orders", body=f"body of {transaction_id}")
        r = self.client.post(f"/v1/producer-groups/{group}/transactions", json=body)
        assert r.status_code == 201, r.json
        return r.json

    def op(self, group: str, transaction_id: str, op: str) -> Any:
        return self.client.post(f"/v1/producer-groups/{group}/transactions/"
                                f"{transaction_id}/{op}")

    def txn(self, group: str, transaction_id: str) -> dict[str, Any]:
        r = self.client.get(f"/v1/producer-groups/{group}/transactions/{transaction_id}")
        assert r.status_code == 200, r.json
        return r.json

    def state(self, group: str, transaction_id: str) -> str:
        return self.txn(group, transaction_id)["state"]

    def topic(self, topic: str) -> list[dict[str, Any]]:
        return self.client.get(f"/v1/topics/{topic}/messages?limit=1000").json["messages"]

    def check_log(self, group: str, transaction_id: str) -> list[Any]:
        with self.engine.connect() as conn:
            row = transactions.get_txn(conn, group, transaction_id)
            assert row is not None
            return checks.checks_of(conn, row.id)

    def ops(self, group: str, transaction_id: str) -> list[tuple[str, str, int]]:
        with self.engine.connect() as conn:
            row = transactions.get_txn(conn, group, transaction_id)
            assert row is not None
            return [(r.op, r.source, r.check_times) for r in conn.execute(
                select(op_log).where(op_log.c.txn_id == row.id).order_by(op_log.c.id))]

    def close(self) -> None:
        for server in self.servers:
            server.released.set()
        for service in self.services:
            service.shutdown()
        for server in self.servers:
            server.close()
        self.app.extensions["txmsg"].close()


@pytest.fixture
def harness_factory(database_url: str) -> Iterator[Any]:
    made: list[Harness] = []

    def factory(**overrides: Any) -> Harness:
        harness = Harness(make_settings(database_url, **{**FAST, **overrides}))
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        harness.close()


@pytest.fixture
def harness(harness_factory: Any) -> Harness:
    return harness_factory()


__all__ = ["FAST", "Harness", "Reply", "harness", "harness_factory"]
