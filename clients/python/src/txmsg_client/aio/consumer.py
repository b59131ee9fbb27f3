"""``Consumer`` for asyncio: the same calls and loop as coroutines, on an
``httpx.AsyncClient``. A batch's rules are ``txmsg_client._relay``'s, driven here by
awaiting each step, as ``Consumer`` drives them by blocking."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import signal
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, Self, TypeVar

import httpx

from txmsg_client import _calls as calls
from txmsg_client import _relay, tracing
from txmsg_client._topics import Program, Topics, default_consumer_name
from txmsg_client._wire import BatchResult, Offsets, ReceivedMessage, RunStats
from txmsg_client.aio._http import TRANSPORT_ERRORS, AsyncTransport
from txmsg_client.aio.producer import AsyncProducer
from txmsg_client.errors import TxmsgError

log = logging.getLogger(__name__)

AsyncHandler = Callable[[ReceivedMessage], Any]  # returns its output, or an awaitable of it
FAILURES: tuple[type[Exception], ...] = (*TRANSPORT_ERRORS, TxmsgError)
S = TypeVar("S")


class AsyncConsumer:
    """One subscription's asyncio client of a txmsg service (see ``Consumer``: the same
    ``topics``, ``topics_pattern`` and ``consumer``). ``client``: an ``httpx.AsyncClient``
    of the caller's (``aclose`` leaves it open), else one of its own."""

    def __init__(self, base_url: str, topic: str | None = None, subscription: str | None = None,
                 token: str | None = None, *, topics: Sequence[str] | None = None,
                 topics_pattern: str | re.Pattern[str] | None = None,
                 consumer: str | None = None, topics_refresh_seconds: float = 60.0,
                 timeout: float = 10.0, client: httpx.AsyncClient | None = None) -> None:
        if subscription is None:
            raise TypeError("AsyncConsumer needs a subscription")
        self._topics = Topics(subscription, topic=topic, topics=topics, pattern=topics_pattern,
                              refresh_seconds=topics_refresh_seconds)
        self._transport = AsyncTransport(base_url, token, timeout, client)
        self.base_url = self._transport.base_url
        self.topic = topic
        self.subscription = subscription
        self.consumer = consumer if consumer is not None else default_consumer_name()
        self.timeout = timeout
        self._stop = asyncio.Event()

    @property
    def topics(self) -> list[str]:
        return list(self._topics.names)

    async def _do(self, program: Program) -> Any:
        async def step(request: calls.Request | _relay.Sleep) -> Any:
            if isinstance(request, _relay.Sleep):
                await asyncio.sleep(request.seconds)
                return None
            return await self._transport.do(request)

        return await _drive(program, step)

    # -- the subscription ------------------------------------------------------------------

    async def subscribe(self, *, initial_position: str | None = None,
                        ack_timeout_ms: int | None = None, max_redeliveries: int | None = None,
                        redelivery_backoff: Mapping[str, int] | None = None,
                        dead_letter_topic: str | None = None,
                        type: str | None = None,  # noqa: A002
                        consumer_timeout_ms: int | None = None,
                        tag_filter: str | None = None) -> dict[str, Any]:
        """Create the subscription, or change its settings (see ``Consumer.subscribe``)."""
        answers = await self._do(self._topics.subscribe(calls.subscription_settings(
            initial_position=initial_position, ack_timeout_ms=ack_timeout_ms,
            max_redeliveries=max_redeliveries, redelivery_backoff=redelivery_backoff,
            dead_letter_topic=dead_letter_topic, type=type,
            consumer_timeout_ms=consumer_timeout_ms, tag_filter=tag_filter)))
        return answers[self.topic] if self.topic is not None else answers  # type: ignore[no-any-return]

    async def describe(self, topic: str | None = None) -> dict[str, Any]:
        return await self._transport.do(
            calls.describe(self._topics.path(self._topics.one(topic))))

    async def unsubscribe(self) -> None:
        await self._do(self._topics.each(calls.unsubscribe))

    # -- messages --------------------------------------------------------------------------

    async def receive(self, max_messages: int = 10, wait_ms: int = 0) -> list[ReceivedMessage]:
        got: list[ReceivedMessage] = await self._do(
            self._topics.receive(max_messages, wait_ms, self.consumer))
        return got

    async def ack(self, offsets: Offsets) -> int:
        return await self._settle("ack", offsets)

    async def ack_cumulative(self, message: ReceivedMessage) -> int:
        """See ``Consumer.ack_cumulative``."""
        acked: int = await self._do(self._topics.ack_through(message, self.consumer))
        return acked

    async def nack(self, offsets: Offsets, delay_ms: int | None = None) -> int:
        return await self._settle("nack", offsets, delay_ms)

    async def renew(self, offsets: Offsets) -> int:
        return await self._settle("renew", offsets)

    async def seek(self, offset: int, topic: str | None = None) -> dict[str, Any]:
        return await self._transport.do(
            calls.seek(self._topics.path(self._topics.one(topic)), offset))

    async def leave(self) -> None:
        """See ``Consumer.leave``."""
        await self._do(self._topics.leave(self.consumer))

    async def _settle(self, action: str, offsets: Offsets, delay_ms: int | None = None) -> int:
        changed: int = await self._do(
            self._topics.settle(action, offsets, self.consumer, delay_ms))
        return changed

    # -- the loop --------------------------------------------------------------------------

    async def run(self, handler: AsyncHandler, *, producer: AsyncProducer | None = None,
                  max_messages: int = 10, wait_ms: int = 10_000,
                  stop: asyncio.Event | None = None, handle_signals: bool = True) -> RunStats:
        """Receive and ``handle`` batches until ``stop()``, ``stop`` set, or (with
        ``handle_signals``, on the main thread's loop) SIGTERM / SIGINT; see ``Consumer.run``.
        """
        event = stop if stop is not None else asyncio.Event()
        stopper = asyncio.ensure_future(self._stop.wait())
        stopper.add_done_callback(lambda _: event.set())
        restore = _stop_on_signals(event) if handle_signals else _nothing
        stats = RunStats()
        pause = 0.0
        try:
            while not event.is_set():
                try:
                    batch = await self.receive(max_messages, wait_ms)
                except FAILURES as exc:
                    if not _relay.transient(exc):
                        raise
                    pause = _relay.next_pause(pause)
                    log.warning("receive failed, again in %.1f s: %s", pause, exc)
                    try:
                        await asyncio.wait_for(event.wait(), pause)
                    except TimeoutError:
                        pass
                    continue
                pause = 0.0
                if batch:
                    stats.add(batch, await self.handle(batch, handler, producer=producer))
        finally:
            restore()
            stopper.cancel()
            self._stop.clear()
            await self.leave()
        return stats

    def stop(self) -> None:
        """Make ``run`` return after the batch at hand."""
        self._stop.set()

    async def handle(self, messages: Sequence[ReceivedMessage], handler: AsyncHandler, *,
                     producer: AsyncProducer | None = None) -> BatchResult:
        """Run ``handler`` (plain or a coroutine function) on each message, then settle the
        batch (see ``Consumer.handle``)."""
        steps = _relay.Batch(messages, self.topic, self.subscription,
                             relay=producer is not None, failures=FAILURES).steps()

        async def do(step: _relay.Step) -> Any:
            if isinstance(step, _relay.Handle):
                with tracing.handling(step.message, self.subscription):
                    output = handler(step.message)
                    return await output if inspect.isawaitable(output) else output
            if isinstance(step, _relay.Sleep):
                await asyncio.sleep(step.seconds)
                return None
            if step.action in ("send", "commit", "rollback"):
                assert producer is not None
                return await getattr(producer, step.action)(**step.kwargs)
            return await getattr(self, step.action)(**step.kwargs)

        result: BatchResult = await _drive(steps, do)
        return result

    # -- plumbing --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Leave the subscriptions, then close the client (if it is this consumer's)."""
        try:
            await self.leave()
        finally:
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _drive(steps: Generator[S, Any, Any], do: Callable[[S], Awaitable[Any]]) -> Any:
    """Run ``steps`` to the end, awaiting ``do`` of each (``_relay.drive``'s twin)."""
    try:
        step = next(steps)
        while True:
            try:
                outcome = await do(step)
            except BaseException as exc:  # noqa: BLE001 - the steps decide what they catch
                step = steps.throw(exc)
            else:
                step = steps.send(outcome)
    except StopIteration as stop:
        return stop.value


def _nothing() -> None:
    pass


def _stop_on_signals(event: asyncio.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT set ``event`` (once); a function removing the handlers. Only a
    loop in the main thread on Unix can take signals: elsewhere, nothing."""
    loop = asyncio.get_running_loop()
    taken: list[int] = []

    def restore() -> None:
        for signum in taken:
            loop.remove_signal_handler(signum)
        taken.clear()

    def on_signal(signum: int) -> None:
        log.info("%s: stopping after the batch at hand", signal.Signals(signum).name)
        event.set()
        restore()

    for signum in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (RuntimeError, ValueError, NotImplementedError):
            return restore
        taken.append(signum)
    return restore
