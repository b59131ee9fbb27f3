"""The consumer: one subscription's calls to the service, and the loop that handles messages.

A subscription is Pulsar's shared subscription over HTTP: every consumer on it gets each
committed message in turn, leased for the subscription's ack timeout, and acknowledges
it, gives it back (nack) or lets the lease run out (redelivered, then dead-lettered).

``Consumer.run(handler)`` long-polls, calls ``handler`` per message, acknowledges what it
handled and gives back what raised. Given a ``Producer``, it is the consume → process →
produce loop, exactly once: the handler returns the messages to publish, and one
transaction carries them with the acknowledgement of their inputs (the send's ``acks``),
so that its commit acknowledges the inputs and publishes the outputs together, and a
rollback (or the check discarding it) does neither.
"""

from __future__ import annotations

import base64
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import requests

from txmsg_client import tracing
from txmsg_client._http import auth_headers, call
from txmsg_client.errors import TxmsgError
from txmsg_client.producer import Message, Producer

log = logging.getLogger(__name__)

MAX_TRANSACTION_MESSAGES = 1000
_T = TypeVar("_T")


@dataclass(frozen=True)
class ReceivedMessage:
    """A message received from a subscription.

    ``body`` is the text of a message sent with a text body, None for a binary one;
    ``body_bytes`` is the body as bytes either way. ``redelivery_count``: how many times
    it was delivered before this one.
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
                   committed_at=_timestamp(item.get("committed_at")))


Offsets = Iterable[int | ReceivedMessage]
Handler = Callable[[ReceivedMessage], Any]


@dataclass
class BatchResult:
    """What ``Consumer.handle`` did with one batch.

    ``acked``: offsets acknowledged (at once, or by the commit of the transaction that
    published their outputs); ``nacked``: offsets whose handler raised, given back;
    ``released``: offsets whose transaction did not commit (rolled back, or refused),
    redelivered. ``published``: the committed output messages with their offsets.
    ``errors``: what went wrong with the service on the way (the batch's messages are
    then redelivered, never lost).
    """

    acked: list[int] = field(default_factory=list)
    nacked: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
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
    published: int = 0
    transactions: int = 0
    errors: int = 0

    def add(self, batch: Sequence[ReceivedMessage], result: BatchResult) -> None:
        self.batches += 1
        self.received += len(batch)
        self.acked += len(result.acked)
        self.nacked += len(result.nacked)
        self.released += len(result.released)
        self.published += len(result.published)
        self.transactions += len(result.transactions)
        self.errors += len(result.errors)


class Consumer:
    """One subscription's client of a txmsg service; ``token``: a bearer token with the
    scope ``consume:<topic>``, for a service with access control on."""

    def __init__(self, base_url: str, topic: str, subscription: str, token: str | None = None,
                 *, timeout: float = 10.0, session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.topic = topic
        self.subscription = subscription
        self.timeout = timeout
        self._session = session or requests.Session()
        self._headers = auth_headers(token)
        self._path = (f"/v1/topics/{quote(topic, safe='')}/subscriptions/"
                      f"{quote(subscription, safe='')}")
        self._stop = threading.Event()
        self._running: threading.Event | None = None

    # -- the subscription ------------------------------------------------------------------

    def subscribe(self, *, initial_position: str | None = None,
                  ack_timeout_ms: int | None = None, max_redeliveries: int | None = None,
                  redelivery_backoff: Mapping[str, int] | None = None,
                  dead_letter_topic: str | None = None) -> dict[str, Any]:
        """Create the subscription, or change its settings (what is not given keeps the
        service's default). ``initial_position`` (``"latest"``, the default, or
        ``"earliest"``) counts only at creation. Returns its description."""
        settings = {"initial_position": initial_position, "ack_timeout_ms": ack_timeout_ms,
                    "max_redeliveries": max_redeliveries,
                    "redelivery_backoff": dict(redelivery_backoff) if redelivery_backoff
                    else None, "dead_letter_topic": dead_letter_topic}
        return self._call("PUT", "", {k: v for k, v in settings.items() if v is not None})

    def describe(self) -> dict[str, Any]:
        """Settings, ``backlog``, ``in_flight``, ``ack_cursor``."""
        return self._call("GET", "")

    def unsubscribe(self) -> None:
        """Delete the subscription and its state."""
        self._call("DELETE", "")

    # -- messages --------------------------------------------------------------------------

    def receive(self, max_messages: int = 10, wait_ms: int = 0) -> list[ReceivedMessage]:
        """Lease up to ``max_messages`` messages, lowest offsets first; with ``wait_ms``
        (at most 30000), wait that long for one to be deliverable (else an empty list)."""
        answer = self._call("POST", "/receive",
                            {"max_messages": max_messages, "wait_ms": wait_ms},
                            timeout=self.timeout + wait_ms / 1000)
        return [ReceivedMessage.from_answer(self.topic, m) for m in answer["messages"]]

    def ack(self, offsets: Offsets) -> int:
        """Acknowledge: never delivered again. How many were not acknowledged before."""
        chosen = _offsets(offsets)
        return int(self._call("POST", "/ack", {"offsets": chosen})["acked"]) if chosen else 0

    def nack(self, offsets: Offsets, delay_ms: int | None = None) -> int:
        """Give leased messages back: redelivered after ``delay_ms``, or after the
        subscription's backoff. How many were given back."""
        chosen = _offsets(offsets)
        if not chosen:
            return 0
        body: dict[str, Any] = {"offsets": chosen}
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        return int(self._call("POST", "/nack", body).get("nacked", len(chosen)))

    def renew(self, offsets: Offsets) -> int:
        """The leases still held on these messages run for another ack timeout from now
        (for long work). How many were renewed."""
        chosen = _offsets(offsets)
        return int(self._call("POST", "/renew", {"offsets": chosen})["renewed"]) \
            if chosen else 0

    def seek(self, offset: int) -> dict[str, Any]:
        """Every offset below ``offset`` acknowledged, every one from it on not; leases
        dropped (replay, or skip ahead)."""
        return self._call("POST", "/seek", {"offset": offset})

    # -- the loop --------------------------------------------------------------------------

    def run(self, handler: Handler, *, producer: Producer | None = None,
            max_messages: int = 10, wait_ms: int = 10_000,
            stop: threading.Event | None = None, handle_signals: bool = True) -> RunStats:
        """Receive (long polling ``wait_ms``) and ``handle`` batches until stopped.

        Stops after the batch at hand when ``stop()`` is called, ``stop`` is set, or (run
        in the main thread with ``handle_signals``) on the first SIGTERM or SIGINT; a
        second signal acts as it did before (SIGINT: KeyboardInterrupt). A stop waits for
        the receive in flight, at most ``wait_ms``. The service being unreachable or
        answering 5xx is retried with a backoff; any other refusal (unknown subscription,
        403...) is raised.
        """
        event = stop if stop is not None else threading.Event()
        self._running = event
        if self._stop.is_set():
            event.set()
        restore = _stop_on_signals(event) if handle_signals else _nothing
        stats = RunStats()
        pause = 0.0
        try:
            while not event.is_set():
                try:
                    batch = self.receive(max_messages, wait_ms)
                except (requests.RequestException, TxmsgError) as exc:
                    if not _transient(exc):
                        raise
                    pause = min(30.0, max(0.5, 2 * pause))
                    log.warning("receive failed, again in %.1f s: %s", pause, exc)
                    event.wait(pause)
                    continue
                pause = 0.0
                if batch:
                    stats.add(batch, self.handle(batch, handler, producer=producer))
        finally:
            restore()
            self._running = None
            self._stop.clear()
        return stats

    def stop(self) -> None:
        """Make ``run`` return after the batch at hand (from a handler or another thread)."""
        self._stop.set()
        running = self._running
        if running is not None:
            running.set()

    def handle(self, messages: Sequence[ReceivedMessage], handler: Handler, *,
               producer: Producer | None = None) -> BatchResult:
        """Run ``handler`` on each message, then settle the batch.

        Without ``producer``: acknowledge the messages it handled, give back (nack, with
        the subscription's backoff) those it raised on.

        With ``producer`` (consume → process → produce): the handler returns the messages
        to publish (a message, a list of them, or None). They are sent in one
        transaction (or more, 1000 messages each at most) whose ``acks`` are the inputs'
        offsets, then committed: outputs and acknowledgements happen together or not at
        all. A transaction that cannot be committed is rolled back, which releases its
        inputs for redelivery; one that can be neither (the service unreachable) stays
        unresolved until the check resolves it, holding its inputs until then.
        """
        result = BatchResult()
        done: list[tuple[int, list[Message]]] = []
        for i, message in enumerate(messages):
            try:
                with tracing.handling(message, self.subscription):
                    output = handler(message)
            except Exception:
                log.exception("handler failed on %s offset %d (redelivery %d)",
                              self.topic, message.offset, message.redelivery_count)
                result.nacked.append(message.offset)
                continue
            except BaseException:  # KeyboardInterrupt, SystemExit: settle, then leave
                rest = [m.offset for m in messages[i:]]
                self._settle(result, done, producer, release=rest)
                raise
            done.append((message.offset, _outputs(output) if producer is not None else []))
        self._settle(result, done, producer)
        return result

    def _settle(self, result: BatchResult, done: list[tuple[int, list[Message]]],
                producer: Producer | None, release: Sequence[int] = ()) -> None:
        plain = [offset for offset, outputs in done if producer is None or not outputs]
        if producer is not None:
            for group in _transactions([(o, out) for o, out in done if out]):
                self._transact(producer, group, result)
        if plain:
            def ack_plain() -> None:
                self.ack(plain)
                result.acked.extend(plain)
            self._quietly(result, ack_plain)
        if result.nacked:
            self._quietly(result, lambda: self.nack(result.nacked))
        if release:
            result.released.extend(release)
            self._quietly(result, lambda: self.nack(release, delay_ms=0))

    def _transact(self, producer: Producer, group: list[tuple[int, list[Message]]],
                  result: BatchResult) -> None:
        """One transaction: the outputs of ``group`` with its inputs' acks."""
        inputs = [offset for offset, _ in group]
        outputs = [m for _, out in group for m in out]
        txid = f"relay-{uuid.uuid4().hex}"
        acks = [{"topic": self.topic, "subscription": self.subscription, "offsets": inputs}]
        try:
            _retrying(lambda: producer.send(outputs, transaction_id=txid, acks=acks))
        except TxmsgError as exc:
            if _transient(exc):
                self._abandon(producer, txid, inputs, exc, result)
                return
            # refused (409 ack_not_pending: acknowledged elsewhere, say): nothing stored
            log.warning("transaction refused, its inputs given back: %s", exc)
            result.errors.append(exc)
            result.released.extend(inputs)
            self._quietly(result, lambda: self.nack(inputs, delay_ms=0))
            return
        except requests.RequestException as exc:
            self._abandon(producer, txid, inputs, exc, result)
            return
        try:
            answer = _retrying(lambda: producer.commit(txid))
        except (requests.RequestException, TxmsgError) as exc:
            if isinstance(exc, TxmsgError) and not _transient(exc) \
                    and exc.code not in ACK_REFUSALS:
                # 409: resolved otherwise (rolled back by a check): its acks released
                result.errors.append(exc)
                result.released.extend(inputs)
                return
            self._abandon(producer, txid, inputs, exc, result)
            return
        result.transactions.append(txid)
        result.acked.extend(inputs)
        result.published.extend(answer.get("messages", []))

    def _abandon(self, producer: Producer, txid: str, inputs: list[int], why: Exception,
                 result: BatchResult) -> None:
        """Roll back a transaction whose send or commit did not go through."""
        result.errors.append(why)
        try:
            _retrying(lambda: producer.rollback(txid))
        except TxmsgError as exc:
            if exc.status == 404:  # the send was never stored
                result.released.extend(inputs)
                self._quietly(result, lambda: self.nack(inputs, delay_ms=0))
                return
            if exc.status == 409:  # it was committed after all: the commit's answer again
                result.errors.pop()
                try:
                    answer = _retrying(lambda: producer.commit(txid))
                except (requests.RequestException, TxmsgError) as again:
                    result.errors.append(again)
                    answer = {}
                result.transactions.append(txid)
                result.acked.extend(inputs)
                result.published.extend(answer.get("messages", []))
                return
            log.warning("transaction %s left to the check: %s", txid, exc)
            return
        except requests.RequestException as exc:
            log.warning("transaction %s left to the check: %s", txid, exc)
            return
        log.warning("transaction %s rolled back, its inputs released: %s", txid, why)
        result.released.extend(inputs)

    def _quietly(self, result: BatchResult, fn: Callable[[], Any]) -> None:
        """An ack or nack that fails leaves the messages to their lease: redelivered."""
        try:
            fn()
        except (requests.RequestException, TxmsgError) as exc:
            log.warning("could not settle messages of %s/%s, they will be redelivered: %s",
                        self.topic, self.subscription, exc)
            result.errors.append(exc)

    # -- plumbing --------------------------------------------------------------------------

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None,
              timeout: float | None = None) -> dict[str, Any]:
        return call(self._session, method, self.base_url + self._path + path,
                    tracing.headers(self._headers),
                    timeout if timeout is not None else self.timeout, body)


def _offsets(items: Offsets) -> list[int]:
    return [i.offset if isinstance(i, ReceivedMessage) else int(i) for i in items]


def _outputs(output: Any) -> list[Message]:
    """What a handler returned: a message, several, or None."""
    if output is None:
        return []
    if isinstance(output, Mapping):
        return [output]
    return list(output)


def _transactions(done: list[tuple[int, list[Message]]]
                  ) -> list[list[tuple[int, list[Message]]]]:
    """Inputs grouped in order so that no transaction has more than 1000 messages."""
    groups: list[list[tuple[int, list[Message]]]] = []
    size = MAX_TRANSACTION_MESSAGES + 1
    for item in done:
        if size + len(item[1]) > MAX_TRANSACTION_MESSAGES:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += len(item[1])
    return groups


# a commit refused for its acks (a late commit whose inputs were acknowledged since, or are
# held by another transaction) leaves the transaction unresolved: it is rolled back
ACK_REFUSALS = frozenset({"ack_not_pending", "ack_conflict"})


def _transient(exc: Exception) -> bool:
    """Worth trying again: the service unreachable, overloaded, or its database down."""
    return not isinstance(exc, TxmsgError) or exc.status >= 500 or exc.status == 408


def _retrying(fn: Callable[[], _T], attempts: int = 3) -> _T:
    """``fn`` tried again on a transient failure (safe for idempotent calls only)."""
    for attempt in range(attempts):
        try:
            return fn()
        except (requests.RequestException, TxmsgError) as exc:
            if attempt == attempts - 1 or not _transient(exc):
                raise
            time.sleep(0.2 * 2 ** attempt)
    raise AssertionError("unreachable")


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _nothing() -> None:
    pass


def _stop_on_signals(event: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT set ``event`` (once; then they act as before); a function
    restoring the previous handlers. Only the main thread may set signal handlers; a
    signal the process ignores (say SIGINT under nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return _nothing
    previous: dict[int, Any] = {}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("%s: stopping after the batch at hand", signal.Signals(signum).name)
        event.set()
        restore()

    for signum in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, on_signal)
    return restore
