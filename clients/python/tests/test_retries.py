"""``send``, ``commit``, ``rollback`` and ``register`` are tried again after a connection
error or a 503, up to ``retry_seconds``, with one transaction id throughout: against a
scripted HTTP server on 127.0.0.1 that drops or refuses its first requests."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from txmsg_client import Producer, TxmsgError, message

PROBLEM_503 = json.dumps({"status": 503, "code": "database_unavailable", "detail": "down"})


class Scripted:
    """Answers each request by the next action: ``drop`` (close without answering), a
    status (a problem+json answer), then 200 with the request's body echoed, for good."""

    def __init__(self, actions: list[str | int]) -> None:
        self.actions = list(actions)
        self.seen: list[dict[str, Any]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                head, _, rest = self._read(conn).partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                body = json.loads(rest) if rest else {}
                self.seen.append(body)
                action = self.actions.pop(0) if self.actions else 200
                if action == "drop":
                    continue
                answer = PROBLEM_503 if action == 503 else json.dumps(
                    {"status": action, "code": "refused", "detail": "no"}) \
                    if action != 200 else json.dumps({**body, "state": "PREPARED",
                                                      "messages": []})
                kind = "application/problem+json" if action != 200 else "application/json"
                conn.sendall(f"HTTP/1.1 {action} X\r\nContent-Type: {kind}\r\nContent-Length: "
                             f"{len(answer)}\r\nConnection: close\r\n\r\n{answer}".encode())

    @staticmethod
    def _read(conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def scripted(request: pytest.FixtureRequest) -> Iterator[Scripted]:
    server = Scripted(request.param)
    yield server
    server.close()


@pytest.mark.parametrize("scripted", [["drop", 503, "drop"]], indirect=True)
def test_a_send_is_tried_again_with_its_own_transaction_id(scripted: Scripted) -> None:
    with Producer(scripted.url, "g", retry_seconds=10) as producer:
        sent = producer.send(message("orders", "x"))
    ids = {body["transaction_id"] for body in scripted.seen}
    assert len(scripted.seen) == 4 and ids == {sent["transaction_id"]}


@pytest.mark.parametrize("scripted", [[503, 503]], indirect=True)
def test_commit_rollback_and_register_are_tried_again(scripted: Scripted) -> None:
    with Producer(scripted.url, "g", retry_seconds=10) as producer:
        producer.commit("t1")
        scripted.actions[:] = ["drop"]
        producer.rollback("t1")
        scripted.actions[:] = [503]
        producer.register(["http://127.0.0.1:9/check"])
    assert len(scripted.seen) == 3 + 2 + 2


@pytest.mark.parametrize("scripted", [[409, 503]], indirect=True)
def test_a_refusal_is_not_tried_again(scripted: Scripted) -> None:
    with Producer(scripted.url, "g", retry_seconds=10) as producer, \
            pytest.raises(TxmsgError) as refused:
        producer.commit("t1")
    assert refused.value.status == 409 and len(scripted.seen) == 1


@pytest.mark.parametrize("scripted", [[503] * 1000], indirect=True)
def test_retries_stop_at_the_deadline(scripted: Scripted) -> None:
    with Producer(scripted.url, "g", retry_seconds=0.5) as producer, \
            pytest.raises(TxmsgError) as refused:
        producer.commit("t1")
    assert refused.value.status == 503 and 2 <= len(scripted.seen) < 1000
    with Producer(scripted.url, "g", retry_seconds=0) as producer, \
            pytest.raises(TxmsgError):
        before = len(scripted.seen)
        producer.commit("t1")
    assert len(scripted.seen) == before + 1


def test_an_unreachable_service_raises_after_the_deadline() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with Producer(f"http://127.0.0.1:{port}", "g", retry_seconds=0.3) as producer, \
            pytest.raises(requests.ConnectionError):
        producer.commit("t1")


@pytest.mark.parametrize("scripted", [["drop", 503, 503]], indirect=True)
def test_the_asyncio_producer_retries_alike(scripted: Scripted) -> None:
    pytest.importorskip("httpx")
    from txmsg_client.aio import AsyncProducer

    async def scenario() -> dict[str, Any]:
        async with AsyncProducer(scripted.url, "g", retry_seconds=10) as producer:
            return await producer.send(message("orders", "x"))

    sent = asyncio.run(scenario())
    assert len(scripted.seen) == 4
    assert {body["transaction_id"] for body in scripted.seen} == {sent["transaction_id"]}


def test_the_clients_transaction_ids_are_uuidv7_in_time_order() -> None:
    """As the service's own: the time leads, so a producer's ids sit together in the
    index (random ones would scatter its inserts)."""
    import time
    import uuid

    from txmsg_client._calls import new_transaction_id

    first = new_transaction_id()
    time.sleep(0.002)
    later = new_transaction_id()
    assert uuid.UUID(first).version == 7 and uuid.UUID(first).variant == uuid.RFC_4122
    assert first == first.upper() and len(first) == 32 and first < later
    assert abs(int(first[:12], 16) - time.time() * 1000) < 60_000
