"""Every call of the service as a request, without I/O: method, path and body. The sync
driver (``requests``) and the asyncio one (``httpx``) send them (``_http``, ``aio._http``)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote

from txmsg_client._wire import Message


class Request(NamedTuple):
    method: str
    path: str
    body: Any = None
    wait_ms: int = 0  # a long poll: the call's timeout grows by it
    idempotent: bool = False  # safe to try again (``_retry``)


# -- a producer group ---------------------------------------------------------------------

def group_path(group: str) -> str:
    return f"/v1/producer-groups/{quote(group, safe='')}"


def transaction_path(group: str, transaction_id: str, action: str | None = None) -> str:
    path = f"{group_path(group)}/transactions/{quote(transaction_id, safe='')}"
    return f"{path}/{action}" if action else path


def register(group: str, check_urls: Sequence[str], check_timeout_ms: int) -> Request:
    return Request("PUT", group_path(group), {"check_urls": list(check_urls),
                                              "check_timeout_ms": check_timeout_ms},
                   idempotent=True)


def registration(group: str) -> Request:
    return Request("GET", group_path(group))


def rotate_signing_secret(group: str) -> Request:
    return Request("POST", f"{group_path(group)}/signing-secret/rotate")


def send_body(messages: Message | Sequence[Message], transaction_id: str | None,
              check_url: str | None, check_immunity_seconds: int | None,
              acks: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The body of a send (one message or several)."""
    batch = [messages] if isinstance(messages, Mapping) else list(messages)
    body: dict[str, Any] = {"messages": [dict(m) for m in batch]}
    if transaction_id is not None:
        body["transaction_id"] = transaction_id
    if check_url is not None:
        body["check_url"] = check_url
    if check_immunity_seconds is not None:
        body["check_immunity_seconds"] = check_immunity_seconds
    if acks:
        body["acks"] = [dict(a) for a in acks]
    return body


def send(group: str, messages: Message | Sequence[Message], transaction_id: str | None,
         check_url: str | None, check_immunity_seconds: int | None,
         acks: Sequence[Mapping[str, Any]] | None) -> Request:
    """A send, idempotent by its transaction id: one of the client's own when none is given,
    so that a retry never stores the messages twice."""
    return Request("POST", f"{group_path(group)}/transactions", send_body(
        messages, transaction_id or new_transaction_id(), check_url, check_immunity_seconds,
        acks), idempotent=True)


def new_transaction_id() -> str:
    """A UUIDv7 (RFC 9562) in 32 upper-case hex digits, as the service makes its own: the
    time leads, so ids made together sit together in the index that holds them (random ids
    would scatter a busy producer's inserts over the whole index)."""
    value = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80 | int.from_bytes(
        os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # variant 10
    return f"{value:032X}"


def finish(group: str, transaction_id: str, action: str) -> Request:
    """``commit`` or ``rollback`` (idempotent), or ``resume-check``."""
    return Request("POST", transaction_path(group, transaction_id, action),
                   idempotent=action in ("commit", "rollback"))


def transaction(group: str, transaction_id: str) -> Request:
    return Request("GET", transaction_path(group, transaction_id))


def read(topic: str, from_offset: int, limit: int) -> Request:
    return Request("GET", f"/v1/topics/{quote(topic, safe='')}/messages"
                          f"?from_offset={from_offset}&limit={limit}")


# -- a subscription -----------------------------------------------------------------------

def subscription_path(topic: str, subscription: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/subscriptions/{quote(subscription, safe='')}"


def subscription_settings(*, initial_position: str | None = None,
                          ack_timeout_ms: int | None = None, max_redeliveries: int | None = None,
                          redelivery_backoff: Mapping[str, int] | None = None,
                          dead_letter_topic: str | None = None, type: str | None = None,  # noqa: A002
                          consumer_timeout_ms: int | None = None,
                          tag_filter: str | None = None) -> dict[str, Any]:
    """The body of a subscription's ``PUT``: only the settings given (the service keeps
    the others as they are)."""
    settings = {"initial_position": initial_position, "ack_timeout_ms": ack_timeout_ms,
                "max_redeliveries": max_redeliveries,
                "redelivery_backoff": dict(redelivery_backoff) if redelivery_backoff else None,
                "dead_letter_topic": dead_letter_topic, "type": type,
                "consumer_timeout_ms": consumer_timeout_ms, "tag_filter": tag_filter}
    return {k: v for k, v in settings.items() if v is not None}


def subscribe(path: str, settings: Mapping[str, Any]) -> Request:
    """Create or change a subscription (``subscription_settings``)."""
    return Request("PUT", path, dict(settings))


def describe(path: str) -> Request:
    return Request("GET", path)


def unsubscribe(path: str) -> Request:
    return Request("DELETE", path)


def receive(path: str, max_messages: int, wait_ms: int, consumer: str) -> Request:
    return Request("POST", f"{path}/receive", {"max_messages": max_messages,
                                               "wait_ms": wait_ms, "consumer": consumer},
                   wait_ms)


def settle(path: str, action: str, offsets: list[int], consumer: str,
           delay_ms: int | None = None) -> Request | None:
    """``ack``, ``nack`` or ``renew`` of ``offsets``; None when there are none (no call)."""
    if not offsets:
        return None
    body: dict[str, Any] = {"offsets": offsets, "consumer": consumer}
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    return Request("POST", f"{path}/{action}", body)


def ack_through(path: str, offset: int, consumer: str) -> Request:
    """Cumulative acknowledgement: every offset up to ``offset`` (exclusive and failover)."""
    return Request("POST", f"{path}/ack", {"through": offset, "consumer": consumer})


def leave(path: str, consumer: str) -> Request:
    """The consumer leaves the subscription: its leases are released at once."""
    return Request("DELETE", f"{path}/consumers/{quote(consumer, safe='')}")


def list_topics(after: str | None, limit: int) -> Request:
    query = f"?limit={limit}" + (f"&after={quote(after, safe='')}" if after else "")
    return Request("GET", f"/v1/topics{query}")


def settled(action: str, answer: Mapping[str, Any], asked: int) -> int:
    """How many an ``ack``, ``nack`` or ``renew`` changed."""
    key = {"ack": "acked", "nack": "nacked", "renew": "renewed"}[action]
    return int(answer.get(key, asked if action == "nack" else 0))


def seek(path: str, offset: int) -> Request:
    return Request("POST", f"{path}/seek", {"offset": offset})
