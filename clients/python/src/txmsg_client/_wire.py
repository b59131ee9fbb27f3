"""What travels to and from the service, for the sync and asyncio clients alike: the
messages a producer builds, the messages a consumer receives, and what a batch did."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Message = Mapping[str, Any]


def message(topic: str, body: str | bytes, *, keys: Iterable[str] = (), tag: str | None = None,
            properties: Mapping[str, str] | None = None, deliver_after_ms: int | None = None,
            deliver_at: datetime | str | None = None,
            ordering_key: str | None = None) -> dict[str, Any]:
    """One message for ``send``: text bodies as ``body``, bytes as ``body_base64``.

    ``deliver_after_ms`` (counted from the commit) or ``deliver_at``: subscriptions do not
    deliver it before then (offset reads show it at once). ``ordering_key`` (1..256
    characters): a key_shared subscription delivers the messages of a key one at a time,
    in offset order.
    """
    out: dict[str, Any] = {"topic": topic}
    if isinstance(body, bytes | bytearray | memoryview):
        out["body_base64"] = base64.b64encode(bytes(body)).decode()
    else:
        out["body"] = body
    if keys:
        out["keys"] = list(keys)
    if tag is not None:
        out["tag"] = tag
    if ordering_key is not None:
        out["ordering_key"] = ordering_key
    if properties:
        out["properties"] = dict(properties)
    if deliver_after_ms is not None:
        out["deliver_after_ms"] = deliver_after_ms
    if deliver_at is not None:
        out["deliver_at"] = deliver_at if isinstance(deliver_at, str) else \
            deliver_at.isoformat().replace("+00:00", "Z")
    return out


@dataclass(frozen=True)
class ReceivedMessage:
    """A message received from a subscription.

    ``body`` is the text of a message sent with a text body, None for a binary one;
    ``body_bytes`` is the body as bytes either way. ``redelivery_count``: how many times
    it was delivered before this one. ``ordering_key``: the key whose messages come in order.
    """

    topic: str
    offset: int
    message_id: str
    body: str | None
    body_bytes: bytes
    keys: tuple[str, ...] = ()
    tag: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    redelivery_count: int = 0
    transaction_id: str | None = None
    producer_group: str | None = None
    created_at: datetime | None = None
    committed_at: datetime | None = None
    ordering_key: str | None = None

    @classmethod
    def from_answer(cls, topic: str, item: Mapping[str, Any]) -> ReceivedMessage:
        """One message of a receive's answer."""
        text = item.get("body")
        data = text.encode() if text is not None else base64.b64decode(
            item.get("body_base64", ""))
        return cls(topic=topic, offset=int(item["offset"]), message_id=item["message_id"],
                   body=text, body_bytes=data, keys=tuple(item.get("keys") or ()),
                   tag=item.get("tag"), properties=dict(item.get("properties") or {}),
                   redelivery_count=int(item.get("redelivery_count", 0)),
                   transaction_id=item.get("transaction_id"),
                   producer_group=item.get("producer_group"),
                   created_at=_timestamp(item.get("created_at")),
                   committed_at=_timestamp(item.get("committed_at")),
                   ordering_key=item.get("ordering_key"))


Offsets = Iterable[int | ReceivedMessage]
Handler = Callable[[ReceivedMessage], Any]


def offsets_of(items: Offsets) -> list[int]:
    return [i.offset if isinstance(i, ReceivedMessage) else int(i) for i in items]


def offsets_by_topic(items: Offsets, topic: str | None) -> dict[str, list[int]]:
    """Offsets grouped by the topic they belong to: a message's own, and ``topic`` for a
    bare offset (which a consumer of several topics cannot place: ValueError)."""
    grouped: dict[str, list[int]] = {}
    for item in items:
        if isinstance(item, ReceivedMessage):
            grouped.setdefault(item.topic, []).append(item.offset)
        elif topic is None:
            raise ValueError("a consumer of several topics settles messages, not bare offsets")
        else:
            grouped.setdefault(topic, []).append(int(item))
    return grouped


def received(topic: str, answer: Mapping[str, Any]) -> list[ReceivedMessage]:
    """The messages of a receive's answer."""
    return [ReceivedMessage.from_answer(topic, m) for m in answer["messages"]]


@dataclass
class BatchResult:
    """What ``Consumer.handle`` did with one batch.

    ``acked``: offsets acknowledged (at once, or by the commit of the transaction that
    published their outputs); ``nacked``: offsets whose handler raised, given back;
    ``released``: offsets whose transaction did not commit (rolled back, or refused),
    redelivered. ``held``: offsets not handled because an earlier message of their
    ordering key failed in the batch; given back with it, so the key's order is kept. ``published``: the committed output messages with their offsets.
    ``errors``: what went wrong with the service on the way (the batch's messages are
    then redelivered, never lost).
    """

    acked: list[int] = field(default_factory=list)
    nacked: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)
    transactions: list[str] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)


@dataclass
class RunStats:
    """Totals of a ``Consumer.run``."""

    batches: int = 0
    received: int = 0
    acked: int = 0
    nacked: int = 0
    released: int = 0
    held: int = 0
    published: int = 0
    transactions: int = 0
    errors: int = 0

    def add(self, batch: Iterable[ReceivedMessage], result: BatchResult) -> None:
        self.batches += 1
        self.received += len(list(batch))
        self.acked += len(result.acked)
        self.nacked += len(result.nacked)
        self.released += len(result.released)
        self.held += len(result.held)
        self.published += len(result.published)
        self.transactions += len(result.transactions)
        self.errors += len(result.errors)


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None
