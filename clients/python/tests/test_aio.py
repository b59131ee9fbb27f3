"""``txmsg_client.aio``: AsyncBarrier on each producer database, AsyncProducer and
AsyncConsumer against a real ``txmsg serve``, and the ASGI check endpoint."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("httpx")
pytest.importorskip("sqlalchemy.ext.asyncio")

import httpx
from conftest import Service
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.ext.asyncio import create_async_engine
from standardwebhooks.webhooks import Webhook
from txmsg_client import Resolution, message
from txmsg_client import _barrier_sql as sql
from txmsg_client.aio import AsyncBarrier, AsyncConsumer, AsyncProducer, asgi_checker_app
from txmsg_client.barrier import RolledBackByCheck

ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg",
                 "mysql": "mysql+aiomysql"}
metadata = MetaData()
orders = Table("orders", metadata, Column("id", Integer, primary_key=True),
               Column("transaction_id", String(128), nullable=False))


def async_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{ASYNC_DRIVERS[scheme.split('+')[0]]}://{rest}"


async def ready_barrier(database_url: str) -> AsyncBarrier:
    barrier = AsyncBarrier(create_async_engine(async_url(database_url)), wait_seconds=1.0)
    await barrier.create_table()
    await barrier.create_table()  # idempotent
    async with barrier.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    return barrier


def check(barrier: AsyncBarrier, group: str, txid: str) -> Any:
    return barrier.checker.check({"producer_group": group, "transaction_id": txid})


def test_async_barrier_answers(database_url: str) -> None:
    async def scenario() -> None:
        barrier = await ready_barrier(database_url)
        try:
            async with barrier.begin("g", "committed"):
                pass
            assert await check(barrier, "g", "committed") is Resolution.COMMIT
            with pytest.raises(ZeroDivisionError):
                async with barrier.begin("g", "failed"):
                    raise ZeroDivisionError
            assert await check(barrier, "g", "failed") is Resolution.ROLLBACK
            with pytest.raises(RolledBackByCheck):
                async with barrier.begin("g", "failed"):
                    pass
            async with barrier.begin("g", "open"):  # past the wait: asked again later
                barrier.wait_seconds = 0.2
                assert await check(barrier, "g", "open") is Resolution.UNKNOWN
            assert await check(barrier, "g", "open") is Resolution.COMMIT
            async with barrier.engine.begin() as conn:
                await conn.execute(barrier.table.update().values(
                    created_at=sql.now() - timedelta(days=8)))
            assert await barrier.cleanup() == 3
        finally:
            await barrier.engine.dispose()

    asyncio.run(scenario())


def test_async_barrier_check_waits_for_the_open_local_transaction(database_url: str) -> None:
    async def scenario() -> None:
        barrier = await ready_barrier(database_url)
        barrier.wait_seconds = 30
        try:
            local = barrier.begin("g", "t")
            await local.__aenter__()
            checking = asyncio.ensure_future(check(barrier, "g", "t"))
            await asyncio.sleep(0)  # let the check start; its answer waits for the commit
            assert not checking.done()
            await local.__aexit__(None, None, None)
            assert await asyncio.wait_for(checking, 30) is Resolution.COMMIT
        finally:
            await barrier.engine.dispose()

    asyncio.run(scenario())


def test_async_producer_local_transaction(service: Service, database_url: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        barrier = await ready_barrier(database_url)
        async with AsyncProducer(service.url, f"g-{uuid.uuid4().hex[:8]}") as producer:
            try:
                await producer.register(["http://127.0.0.1:9/check"])
                async with producer.local_transaction(barrier, message(topic, "a")) as local:
                    await local.connection.execute(
                        orders.insert().values(transaction_id=local.transaction_id))
                assert local.state == "COMMITTED"
                with pytest.raises(KeyError):
                    async with producer.local_transaction(barrier,
                                                          message(topic, "b")) as failed:
                        await failed.connection.execute(
                            orders.insert().values(transaction_id=failed.transaction_id))
                        raise KeyError("out of stock")
                assert (await producer.get(failed.transaction_id))["state"] == "ROLLED_BACK"
                async with barrier.engine.connect() as conn:
                    rows = (await conn.execute(select(orders.c.transaction_id))).scalars()
                    assert list(rows) == [local.transaction_id]
                assert [m["body"] for m in (await producer.read(topic))["messages"]] == ["a"]
            finally:
                await barrier.engine.dispose()

    asyncio.run(scenario())


def test_async_producer_and_consumer_calls(service: Service, topic: str) -> None:
    async def scenario() -> None:
        group = f"g-{uuid.uuid4().hex[:8]}"
        async with AsyncProducer(service.url, group) as producer, \
                AsyncConsumer(service.url, topic, "billing") as consumer:
            registered = await producer.register(["http://127.0.0.1:9/check"])
            assert (await producer.registration())["signing_secret"] == \
                registered["signing_secret"]
            assert (await producer.rotate_signing_secret())["signing_secret"] != \
                registered["signing_secret"]
            await consumer.subscribe(initial_position="earliest",
                                     redelivery_backoff={"min_ms": 0, "max_ms": 0})
            sent = await producer.send([message(topic, f"m{n}") for n in range(3)])
            assert (await producer.commit(sent["transaction_id"]))["state"] == "COMMITTED"
            dropped = await producer.send(message(topic, "never"))
            assert (await producer.rollback(dropped["transaction_id"]))["state"] == \
                "ROLLED_BACK"
            done = await producer.send_in_transaction(message(topic, "m3"), _commit_later)
            assert done.state == "COMMITTED"
            with pytest.raises(Exception, match="409"):
                await producer.resume_check(done.transaction_id)
            first = await consumer.receive(max_messages=2, wait_ms=5000)
            assert [m.body for m in first] == ["m0", "m1"]
            assert await consumer.renew(first) == 2
            assert await consumer.nack(first[1:], delay_ms=0) == 1
            assert await consumer.ack(first[:1]) == 1
            seen: list[str] = []

            async def handler(received: Any) -> None:
                seen.append(received.body)
                if len(seen) == 3:
                    consumer.stop()

            stats = await consumer.run(handler, wait_ms=1000, handle_signals=False)
            assert sorted(seen) == ["m1", "m2", "m3"] and stats.acked == 3
            assert (await consumer.describe())["backlog"] == 0
            assert (await consumer.seek(0))["subscription"] == "billing"
            relayed = await consumer.handle(await consumer.receive(4, wait_ms=5000),
                                            lambda m: message(f"{topic}-out", m.body or ""),
                                            producer=producer)
            assert len(relayed.published) == 4 and len(relayed.transactions) == 1
            await consumer.unsubscribe()

    asyncio.run(scenario())


async def _commit_later(sent: dict[str, Any]) -> Resolution:
    await asyncio.sleep(0)
    return Resolution.COMMIT


def signed(secret: str, body: bytes) -> dict[str, str]:
    msg_id = f"msg_{uuid.uuid4().hex}"
    now = datetime.now(UTC)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, now, body.decode())}


class Paid:
    def check(self, transaction: dict[str, Any]) -> Resolution:
        return Resolution.COMMIT if transaction["transaction_id"] == "paid" else \
            Resolution.ROLLBACK


class AsyncPaid:
    async def check(self, transaction: dict[str, Any]) -> Resolution:
        if transaction["transaction_id"] == "boom":
            raise RuntimeError("database down")
        return Resolution.COMMIT


@pytest.mark.parametrize("checker", [Paid(), AsyncPaid()], ids=["plain", "coroutine"])
def test_asgi_checker_app_verifies_signatures(checker: Any) -> None:
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
    app = asgi_checker_app(checker, signing_secret=secret)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            body = json.dumps({"transaction_id": "paid", "producer_group": "g"}).encode()
            ok = await client.post("/", content=body, headers=signed(secret, body))
            assert ok.status_code == 200 and ok.json() == {"resolution": "COMMIT"}
            forged = await client.post("/", content=body, headers=signed(
                "whsec_" + base64.b64encode(b"another secret of 32 bytes......").decode(), body))
            assert forged.status_code == 401
            assert forged.json()["code"] == "invalid_signature"
            assert (await client.post("/", content=body)).status_code == 401
            assert (await client.get("/")).status_code == 405
            app.signing_secret = None
            assert (await client.post("/", content=b"[1]")).status_code == 400
            if isinstance(checker, AsyncPaid):
                failed = await client.post("/", json={"transaction_id": "boom"})
                assert failed.status_code == 500 and failed.json()["code"] == "checker_error"

    asyncio.run(scenario())



def test_asgi_checker_app_refuses_a_body_past_its_limit_unread() -> None:
    """413 once the body passes ``max_body_bytes``: no further message is taken from the
    server and the checker is not asked; a body within it is answered."""
    seen: list[dict[str, Any]] = []

    class Ledger:
        def check(self, transaction: dict[str, Any]) -> Resolution:
            seen.append(transaction)
            return Resolution.COMMIT

    app = asgi_checker_app(Ledger(), max_body_bytes=1000)

    async def post(chunks: list[bytes]) -> tuple[int, dict[str, Any], int]:
        pulled = 0
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            nonlocal pulled
            pulled += 1
            return {"type": "http.request", "body": chunks[pulled - 1],
                    "more_body": pulled < len(chunks)}

        async def send(message: Any) -> None:
            sent.append(message)

        await app({"type": "http", "method": "POST", "headers": []}, receive, send)
        return sent[0]["status"], json.loads(sent[1]["body"]), pulled

    status, problem, pulled = asyncio.run(post([b" " * 600] * 5))
    assert (status, problem["code"], pulled) == (413, "payload_too_large", 2)
    assert seen == []
    body = json.dumps({"transaction_id": "paid"}).encode()
    status, answer, _ = asyncio.run(post([body[:5], body[5:], b" " * (1000 - len(body))]))
    assert (status, answer) == (200, {"resolution": "COMMIT"})
    assert seen == [{"transaction_id": "paid"}]
