"""A message's ordering key through the SDK: built by ``message(ordering_key=...)``, sent
by the sync and asyncio producers, and shown by the transaction, a topic's page and a
received message."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from conftest import Service
from txmsg_client import Producer, ReceivedMessage, message


def test_message_carries_an_ordering_key_only_when_given() -> None:
    assert message("orders", "hi", ordering_key="order-1") == {
        "topic": "orders", "body": "hi", "ordering_key": "order-1"}
    assert "ordering_key" not in message("orders", "hi")


def test_a_received_message_shows_its_ordering_key() -> None:
    item = {"offset": 3, "message_id": "M", "body": "x"}
    assert ReceivedMessage.from_answer("t", {**item, "ordering_key": "k"}).ordering_key == "k"
    assert ReceivedMessage.from_answer("t", {**item, "ordering_key": None}).ordering_key is None
    assert ReceivedMessage.from_answer("t", item).ordering_key is None


def _keys(messages: list[dict[str, Any]]) -> list[str | None]:
    return [m["ordering_key"] for m in messages]


def test_sync_producer_sends_ordering_keys(producer: Producer, topic: str) -> None:
    sent = producer.send([message(topic, "a", ordering_key="k-1"), message(topic, "b")])
    assert _keys(producer.get(sent["transaction_id"])["messages"]) == ["k-1", None]
    committed = producer.commit(sent["transaction_id"])
    assert _keys(producer.read(topic)["messages"]) == ["k-1", None]
    # a retry is the same send only with the same keys
    assert producer.send([message(topic, "a", ordering_key="k-1"), message(topic, "b")],
                         transaction_id=sent["transaction_id"])["state"] == committed["state"]
    with pytest.raises(Exception, match="409"):
        producer.send([message(topic, "a", ordering_key="k-2"), message(topic, "b")],
                      transaction_id=sent["transaction_id"])


def test_async_producer_sends_ordering_keys(service: Service, topic: str) -> None:
    pytest.importorskip("httpx")
    from txmsg_client.aio import AsyncProducer

    async def scenario() -> None:
        async with AsyncProducer(service.url, f"g-{uuid.uuid4().hex[:8]}") as producer:
            await producer.register(["http://127.0.0.1:9/check"])
            sent = await producer.send(message(topic, "a", ordering_key="k-1"))
            assert _keys((await producer.get(sent["transaction_id"]))["messages"]) == ["k-1"]
            await producer.commit(sent["transaction_id"])
            assert _keys((await producer.read(topic))["messages"]) == ["k-1"]

    asyncio.run(scenario())
