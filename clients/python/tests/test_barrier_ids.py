"""One barrier id used again: every sequence of ``local_transaction`` calls with one
transaction id leaves the messages committed if and only if the local work committed,
once. Sync and asyncio, on each producer database, against a real ``txmsg serve``."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")
pytest.importorskip("httpx")

from conftest import Service
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from sqlalchemy.ext.asyncio import create_async_engine
from test_aio import async_url
from txmsg_client import Producer, Resolution, TxmsgError, message
from txmsg_client.aio import AsyncBarrier, AsyncProducer
from txmsg_client.barrier import Barrier
from txmsg_client.errors import AlreadyCommitted, NotPrepared

metadata = MetaData()
orders = Table("id_orders", metadata, Column("id", Integer, primary_key=True),
               Column("transaction_id", String(128), nullable=False))


class OutOfStock(Exception):
    pass


@pytest.fixture
def barrier(engine: Any) -> Barrier:
    made = Barrier(engine)
    made.create_table()
    metadata.create_all(engine)
    return made


def txid() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


def orders_of(engine: Any, transaction_id: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(orders).where(
            orders.c.transaction_id == transaction_id)).scalar_one())


def barrier_reason(barrier: Barrier, group: str, transaction_id: str) -> str | None:
    with barrier.engine.connect() as conn:
        return conn.execute(select(barrier.table.c.reason).where(
            barrier.table.c.producer_group == group,
            barrier.table.c.transaction_id == transaction_id)).scalar()


def assert_all_or_nothing(producer: Producer, barrier: Barrier, transaction_id: str) -> None:
    """The promise: committed iff the local work was, once, and the check agrees."""
    done = orders_of(barrier.engine, transaction_id)
    state = producer.get(transaction_id)["state"]
    check = barrier.checker.check({"producer_group": producer.group,
                                   "transaction_id": transaction_id})
    assert done in (0, 1)
    assert (state == "COMMITTED") == (done == 1), (state, done)
    assert (check is Resolution.COMMIT) == (done == 1), (check, done)


def place_order(local: Any, transaction_id: str) -> None:
    local.connection.execute(orders.insert().values(transaction_id=transaction_id))


def test_a_block_that_raised_leaves_its_id_rolled_back_for_good(
        producer: Producer, barrier: Barrier, topic: str) -> None:
    tid = txid()
    with pytest.raises(OutOfStock), \
            producer.local_transaction(barrier, message(topic, "o"), transaction_id=tid) as local:
        place_order(local, tid)
        raise OutOfStock
    assert barrier_reason(barrier, producer.group, tid) == "rollback"
    ran = []
    with pytest.raises(NotPrepared) as refused, \
            producer.local_transaction(barrier, message(topic, "o"), transaction_id=tid):
        ran.append(True)
    assert ran == [] and refused.value.state == "ROLLED_BACK"
    assert orders_of(barrier.engine, tid) == 0
    assert_all_or_nothing(producer, barrier, tid)


def test_two_local_transactions_with_one_id_at_once(
        producer: Producer, barrier: Barrier, topic: str) -> None:
    """One block raises after 0.8 s, the other starts 0.2 s later with the same id and
    messages (the report's sequence): the second's work waits on the first's barrier row."""
    tid = txid()
    outcomes: dict[str, BaseException | str] = {}

    def failing() -> None:
        try:
            with producer.local_transaction(barrier, message(topic, "o"),
                                            transaction_id=tid) as local:
                place_order(local, tid)
                time.sleep(0.8)
                raise OutOfStock
        except BaseException as exc:  # noqa: BLE001 - kept for the assertions
            outcomes["failing"] = exc

    def succeeding() -> None:
        time.sleep(0.2)
        try:
            with Producer(producer.base_url, producer.group) as other, \
                    other.local_transaction(barrier, message(topic, "o"),
                                            transaction_id=tid) as local:
                place_order(local, tid)
            outcomes["succeeding"] = local.state
        except BaseException as exc:  # noqa: BLE001 - kept for the assertions
            outcomes["succeeding"] = exc

    threads = [threading.Thread(target=failing), threading.Thread(target=succeeding)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert isinstance(outcomes["failing"], OutOfStock)
    assert isinstance(outcomes["succeeding"], str | NotPrepared), outcomes
    assert_all_or_nothing(producer, barrier, tid)


def test_a_retry_after_cleanup_does_not_run_the_work_again(
        producer: Producer, barrier: Barrier, topic: str) -> None:
    tid = txid()
    with producer.local_transaction(barrier, message(topic, "o"), transaction_id=tid) as local:
        place_order(local, tid)
    assert local.state == "COMMITTED"
    assert barrier.cleanup(older_than=__import__("datetime").timedelta(0)) >= 1
    ran = []
    with pytest.raises(AlreadyCommitted), \
            producer.local_transaction(barrier, message(topic, "o"), transaction_id=tid):
        ran.append(True)
    assert ran == [] and orders_of(barrier.engine, tid) == 1
    assert [m["body"] for m in producer.read(topic)["messages"]] == ["o"]


def test_a_commit_the_service_refuses_is_raised(
        producer: Producer, barrier: Barrier, topic: str) -> None:
    """Rolled back by hand while the local work ran: the 409 is raised, not logged away."""
    tid = txid()
    with pytest.raises(TxmsgError) as refused, \
            producer.local_transaction(barrier, message(topic, "o"), transaction_id=tid) as local:
        place_order(local, tid)
        producer.rollback(tid)
    assert refused.value.status == 409
    assert producer.get(tid)["state"] == "ROLLED_BACK"


@pytest.mark.parametrize("change", [{"check_immunity_seconds": 60},
                                    {"check_url": "http://127.0.0.1:9/other"}])
def test_a_retry_with_other_settings_raises_before_the_block(
        producer: Producer, barrier: Barrier, topic: str, change: dict[str, Any]) -> None:
    tid = txid()
    producer.send(message(topic, "o"), transaction_id=tid, check_immunity_seconds=5,
                  check_url="http://127.0.0.1:9/check")
    ran = []
    settings = {"check_immunity_seconds": 5, "check_url": "http://127.0.0.1:9/check", **change}
    with pytest.raises(TxmsgError) as refused, \
            producer.local_transaction(barrier, message(topic, "o"), transaction_id=tid,
                                       **settings):
        ran.append(True)
    assert ran == [] and refused.value.status == 409
    assert refused.value.code == "transaction_id_conflict"
    assert barrier_reason(barrier, producer.group, tid) is None


# -- asyncio: the same sequences on AsyncProducer and AsyncBarrier ---------------------------

def run_async(database_url: str, service: Service,
              scenario: Callable[[AsyncProducer, AsyncBarrier, str], Any]) -> None:
    async def main() -> None:
        barrier = AsyncBarrier(create_async_engine(async_url(database_url)))
        await barrier.create_table()
        async with barrier.engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        try:
            async with AsyncProducer(service.url, f"g-{uuid.uuid4().hex[:8]}") as producer:
                await producer.register(["http://127.0.0.1:9/check"])
                await scenario(producer, barrier, f"t-{uuid.uuid4().hex[:8]}")
        finally:
            await barrier.engine.dispose()

    asyncio.run(main())


async def async_orders_of(barrier: AsyncBarrier, transaction_id: str) -> int:
    async with barrier.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(orders).where(
            orders.c.transaction_id == transaction_id))).scalar_one())


async def async_all_or_nothing(producer: AsyncProducer, barrier: AsyncBarrier,
                               transaction_id: str) -> None:
    done = await async_orders_of(barrier, transaction_id)
    state = (await producer.get(transaction_id))["state"]
    check = await barrier.checker.check({"producer_group": producer.group,
                                         "transaction_id": transaction_id})
    assert done in (0, 1)
    assert (state == "COMMITTED") == (done == 1), (state, done)
    assert (check is Resolution.COMMIT) == (done == 1), (check, done)


async def async_place_order(local: Any, transaction_id: str) -> None:
    await local.connection.execute(orders.insert().values(transaction_id=transaction_id))


def test_async_a_block_that_raised_leaves_its_id_rolled_back_for_good(
        service: Service, database_url: str) -> None:
    async def scenario(producer: AsyncProducer, barrier: AsyncBarrier, topic: str) -> None:
        tid = txid()
        with pytest.raises(OutOfStock):
            async with producer.local_transaction(barrier, message(topic, "o"),
                                                  transaction_id=tid) as local:
                await async_place_order(local, tid)
                raise OutOfStock
        ran = []
        with pytest.raises(NotPrepared):
            async with producer.local_transaction(barrier, message(topic, "o"),
                                                  transaction_id=tid):
                ran.append(True)
        assert ran == [] and await async_orders_of(barrier, tid) == 0
        await async_all_or_nothing(producer, barrier, tid)

    run_async(database_url, service, scenario)


def test_async_two_local_transactions_with_one_id_at_once(
        service: Service, database_url: str) -> None:
    async def scenario(producer: AsyncProducer, barrier: AsyncBarrier, topic: str) -> None:
        tid = txid()

        async def failing() -> None:
            async with producer.local_transaction(barrier, message(topic, "o"),
                                                  transaction_id=tid) as local:
                await async_place_order(local, tid)
                await asyncio.sleep(0.8)
                raise OutOfStock

        async def succeeding() -> str:
            await asyncio.sleep(0.2)
            async with AsyncProducer(producer.base_url, producer.group) as other, \
                    other.local_transaction(barrier, message(topic, "o"),
                                            transaction_id=tid) as local:
                await async_place_order(local, tid)
            return local.state

        first, second = await asyncio.wait_for(
            asyncio.gather(failing(), succeeding(), return_exceptions=True), 60)
        assert isinstance(first, OutOfStock)
        assert isinstance(second, str | NotPrepared), second
        await async_all_or_nothing(producer, barrier, tid)

    run_async(database_url, service, scenario)


def test_async_a_retry_after_cleanup_does_not_run_the_work_again(
        service: Service, database_url: str) -> None:
    from datetime import timedelta

    async def scenario(producer: AsyncProducer, barrier: AsyncBarrier, topic: str) -> None:
        tid = txid()
        async with producer.local_transaction(barrier, message(topic, "o"),
                                              transaction_id=tid) as local:
            await async_place_order(local, tid)
        assert local.state == "COMMITTED"
        assert await barrier.cleanup(older_than=timedelta(0)) >= 1
        ran = []
        with pytest.raises(AlreadyCommitted):
            async with producer.local_transaction(barrier, message(topic, "o"),
                                                  transaction_id=tid):
                ran.append(True)
        assert ran == [] and await async_orders_of(barrier, tid) == 1

    run_async(database_url, service, scenario)


def test_async_a_commit_the_service_refuses_is_raised(
        service: Service, database_url: str) -> None:
    async def scenario(producer: AsyncProducer, barrier: AsyncBarrier, topic: str) -> None:
        tid = txid()
        with pytest.raises(TxmsgError) as refused:
            async with producer.local_transaction(barrier, message(topic, "o"),
                                                  transaction_id=tid) as local:
                await async_place_order(local, tid)
                await producer.rollback(tid)
        assert refused.value.status == 409

    run_async(database_url, service, scenario)
