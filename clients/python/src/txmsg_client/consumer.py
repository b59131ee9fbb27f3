"""The consumer: one subscription's calls to the service, and the loop that handles messages.

A subscription is Pulsar's shared subscription over HTTP: every consumer on it gets each
committed message in turn, leased for the subscription's ack timeout, and acknowledges
it, gives it back (nack) or lets the lease run out (redelivered, then dead-lettered).

``Consumer.run(handler)`` long-polls, calls ``handler`` per message, acknowledges what it
handled and gives back what raised. Given a ``Producer``, it is the consume → process →
produce loop, exactly once: the handler returns the messages to publish, and one
transaction carries them with the acknowledgement of their inputs (the send's ``acks``),
so that its commit acknowledges the inputs and publishes the outputs together, and a
rollback (or the check discarding it) does neither. The rules of a batch are
``txmsg_client._relay``'s, the same for ``AsyncConsumer``; this module drives them.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any, Self

import requests

from txmsg_client import _calls as calls
from txmsg_client import _relay, tracing
from txmsg_client._http import TRANSPORT_ERRORS, Transport
from txmsg_client._topics import Program, Topics, default_consumer_name
from txmsg_client._wire import (
    BatchResult,
    Handler,
    Offsets,
    ReceivedMessage,
    RunStats,
)
from txmsg_client.errors import TxmsgError
from txmsg_client.producer import Producer

__all__ = ["BatchResult", "Consumer", "Handler", "Offsets", "ReceivedMessage", "RunStats"]

log = logging.getLogger(__name__)

FAILURES: tuple[type[Exception], ...] = (*TRANSPORT_ERRORS, TxmsgError)


class Consumer:
    """One subscription's client of a txmsg service; ``token``: a bearer token with the
    scope ``consume:<topic>``, for a service with access control on. ``session``: a
    ``requests.Session`` of the caller's (``close`` leaves it open), else one of its own.

    ``topic``: one topic; or ``topics`` (a list) or ``topics_pattern`` (a regular
    expression whole topic names must match, the list read again every
    ``topics_refresh_seconds``): a subscription of the same name on each (Pulsar's
    multi-topic consumer); each message knows its topic, and its ack goes there.
    ``consumer``: this consumer's name on the subscription (failover and exclusive
    subscriptions tell their consumers apart by it); by default the host name and the
    process id. ``close`` (and the end of ``run``) leaves the subscription at once.
    """

    def __init__(self, base_url: str, topic: str | None = None, subscription: str | None = None,
                 token: str | None = None, *, topics: Sequence[str] | None = None,
                 topics_pattern: str | re.Pattern[str] | None = None,
                 consumer: str | None = None, topics_refresh_seconds: float = 60.0,
                 timeout: float = 10.0, session: requests.Session | None = None) -> None:
        if subscription is None:
            raise TypeError("Consumer needs a subscription")
        self._topics = Topics(subscription, topic=topic, topics=topics, pattern=topics_pattern,
                              refresh_seconds=topics_refresh_seconds)
        self._transport = Transport(base_url, token, timeout, session)
        self.base_url = self._transport.base_url
        self.topic = topic
        self.subscription = subscription
        self.consumer = consumer if consumer is not None else default_consumer_name()
        self.timeout = timeout
        self._stop = threading.Event()
        self._running: threading.Event | None = None

    @property
    def topics(self) -> list[str]:
        """The topics consumed (for a pattern: those found at the last look)."""
        return list(self._topics.names)

    def _do(self, program: Program) -> Any:
        def step(request: calls.Request | _relay.Sleep) -> Any:
            if isinstance(request, _relay.Sleep):
                time.sleep(request.seconds)
                return None
            return self._transport.do(request)

        return _relay.drive(program, step)

    # -- the subscription ------------------------------------------------------------------

    def subscribe(self, *, initial_position: str | None = None,
                  ack_timeout_ms: int | None = None, max_redeliveries: int | None = None,
                  redelivery_backoff: Mapping[str, int] | None = None,
                  dead_letter_topic: str | None = None, type: str | None = None,  # noqa: A002
                  consumer_timeout_ms: int | None = None,
                  tag_filter: str | None = None) -> dict[str, Any]:
        """Create the subscription, or change the settings given (the others keep their
        value: the service's default at creation). ``initial_position`` (``"latest"``,
        the default, or ``"earliest"``) counts only at creation. ``type``: ``"shared"``
        (the default), ``"key_shared"``, ``"failover"`` or ``"exclusive"``;
        ``tag_filter``: ``"*"`` or tags joined by ``||``. Returns its description; for
        several topics, each topic's by topic (topics found later by a pattern are
        subscribed with these settings)."""
        answers = self._do(self._topics.subscribe(calls.subscription_settings(
            initial_position=initial_position, ack_timeout_ms=ack_timeout_ms,
            max_redeliveries=max_redeliveries, redelivery_backoff=redelivery_backoff,
            dead_letter_topic=dead_letter_topic, type=type,
            consumer_timeout_ms=consumer_timeout_ms, tag_filter=tag_filter)))
        return answers[self.topic] if self.topic is not None else answers  # type: ignore[no-any-return]

    def describe(self, topic: str | None = None) -> dict[str, Any]:
        """Settings, ``backlog``, ``in_flight``, ``ack_cursor``, ``consumers`` (of
        ``topic``'s subscription: needed when there are several)."""
        return self._transport.do(calls.describe(self._topics.path(self._topics.one(topic))))

    def unsubscribe(self) -> None:
        """Delete the subscription (on every topic) and its state."""
        self._do(self._topics.each(calls.unsubscribe))

    # -- messages --------------------------------------------------------------------------

    def receive(self, max_messages: int = 10, wait_ms: int = 0) -> list[ReceivedMessage]:
        """Lease up to ``max_messages`` messages, lowest offsets first; with ``wait_ms``
        (at most 30000), wait that long for one to be deliverable (else an empty list).
        Several topics are taken in turn, one topic's messages per answer."""
        got: list[ReceivedMessage] = self._do(
            self._topics.receive(max_messages, wait_ms, self.consumer))
        return got

    def ack(self, offsets: Offsets) -> int:
        """Acknowledge: never delivered again. How many were not acknowledged before.
        A consumer of several topics is given messages, not bare offsets."""
        return self._settle("ack", offsets)

    def ack_cumulative(self, message: ReceivedMessage) -> int:
        """Acknowledge ``message`` and every offset of its topic below it (exclusive and
        failover subscriptions, by the consumer holding it). How many were acknowledged."""
        acked: int = self._do(self._topics.ack_through(message, self.consumer))
        return acked

    def nack(self, offsets: Offsets, delay_ms: int | None = None) -> int:
        """Give leased messages back: redelivered after ``delay_ms``, or after the
        subscription's backoff. How many were given back."""
        return self._settle("nack", offsets, delay_ms)

    def renew(self, offsets: Offsets) -> int:
        """The leases still held on these messages run for another ack timeout from now
        (for long work). How many were renewed."""
        return self._settle("renew", offsets)

    def seek(self, offset: int, topic: str | None = None) -> dict[str, Any]:
        """Every offset below ``offset`` acknowledged, every one from it on not; leases
        dropped (replay, or skip ahead)."""
        return self._transport.do(calls.seek(self._topics.path(self._topics.one(topic)), offset))

    def leave(self) -> None:
        """Leave the subscriptions at once (its leases released for redelivery; on
        failover and exclusive, another consumer takes over). Errors are ignored."""
        self._do(self._topics.leave(self.consumer))

    def _settle(self, action: str, offsets: Offsets, delay_ms: int | None = None) -> int:
        changed: int = self._do(self._topics.settle(action, offsets, self.consumer, delay_ms))
        return changed

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
                except FAILURES as exc:
                    if not _relay.transient(exc):
                        raise
                    pause = _relay.next_pause(pause)
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
            self.leave()
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
        the subscription's backoff) those it raised on. A key's order is kept: after a
        message with an ``ordering_key`` raised, the batch's later messages of that key
        are not handled but given back with it (``held``); other keys go on.

        With ``producer`` (consume → process → produce): the handler returns the messages
        to publish (a message, a list of them, or None). They are sent in one
        transaction (or more, 1000 messages each at most) whose ``acks`` are the inputs'
        offsets, then committed: outputs and acknowledgements happen together or not at
        all. A transaction that cannot be committed is rolled back, which releases its
        inputs for redelivery; one that can be neither (the service unreachable) stays
        unresolved until the check resolves it, holding its inputs until then.
        """
        batch = _relay.Batch(messages, self.topic, self.subscription,
                             relay=producer is not None, failures=FAILURES)

        def do(step: _relay.Step) -> Any:
            if isinstance(step, _relay.Handle):
                with tracing.handling(step.message, self.subscription):
                    return handler(step.message)
            if isinstance(step, _relay.Sleep):
                time.sleep(step.seconds)
                return None
            if step.action in ("send", "commit", "rollback"):
                assert producer is not None
                return getattr(producer, step.action)(**step.kwargs)
            return getattr(self, step.action)(**step.kwargs)

        result: BatchResult = _relay.drive(batch.steps(), do)
        return result

    # -- plumbing --------------------------------------------------------------------------

    def close(self) -> None:
        """Leave the subscriptions, then close the session (if it is this consumer's)."""
        try:
            self.leave()
        finally:
            self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
