"""``Consumer`` for asyncio: the same calls and loop as coroutines, on an
``httpx.AsyncClient``. The rules (which failures are retried, how outputs are grouped into
transactions) are ``txmsg_client.consumer``'s."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx

from txmsg_client._http import auth_headers
from txmsg_client.aio._http import TRANSPORT_ERRORS, call
from txmsg_client.aio.producer import AsyncProducer
from txmsg_client.consumer import (
    ACK_REFUSALS,
    BatchResult,
    Offsets,
    ReceivedMessage,
    RunStats,
    _offsets,
    _outputs,
    _transactions,
    _transient,
)
from txmsg_client.errors import TxmsgError
from txmsg_client.producer import Message

log = logging.getLogger(__name__)

_T = TypeVar("_T")
AsyncHandler = Callable[[ReceivedMessage], Any]  # returns its output, or an awaitable of it
FAILURES = (*TRANSPORT_ERRORS, TxmsgError)


class AsyncConsumer:
    """One subscription's asyncio client of a txmsg service (see ``Consumer``)."""

    def __init__(self, base_url: str, topic: str, subscription: str, token: str | None = None,
                 *, timeout: float = 10.0, client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.topic = topic
        self.subscription = subscription
        self.timeout = timeout
        self._own_client = client is None
        self._client = client or httpx.AsyncClient()
        self._headers = auth_headers(token)
        self._path = (f"/v1/topics/{quote(topic, safe='')}/subscriptions/"
                      f"{quote(subscription, safe='')}")
        self._stop = asyncio.Event()

    # -- the subscription ------------------------------------------------------------------

    async def subscribe(self, *, initial_position: str | None = None,
                        ack_timeout_ms: int | None = None, max_redeliveries: int | None = None,
                        redelivery_backoff: Mapping[str, int] | None = None,
                        dead_letter_topic: str | None = None) -> dict[str, Any]:
        """Create the subscription, or change its settings (see ``Consumer.subscribe``)."""
        settings = {"initial_position": initial_position, "ack_timeout_ms": ack_timeout_ms,
                    "max_redeliveries": max_redeliveries,
                    "redelivery_backoff": dict(redelivery_backoff) if redelivery_backoff
                    else None, "dead_letter_topic": dead_letter_topic}
        return await self._call("PUT", "", {k: v for k, v in settings.items() if v is not None})

    async def describe(self) -> dict[str, Any]:
        return await self._call("GET", "")

    async def unsubscribe(self) -> None:
        await self._call("DELETE", "")

    # -- messages --------------------------------------------------------------------------

    async def receive(self, max_messages: int = 10, wait_ms: int = 0) -> list[ReceivedMessage]:
        answer = await self._call("POST", "/receive",
                                  {"max_messages": max_messages, "wait_ms": wait_ms},
                                  timeout=self.timeout + wait_ms / 1000)
        return [ReceivedMessage.from_answer(self.topic, m) for m in answer["messages"]]

    async def ack(self, offsets: Offsets) -> int:
        chosen = _offsets(offsets)
        return int((await self._call("POST", "/ack", {"offsets": chosen}))["acked"]) \
            if chosen else 0

    async def nack(self, offsets: Offsets, delay_ms: int | None = None) -> int:
        chosen = _offsets(offsets)
        if not chosen:
            return 0
        body: dict[str, Any] = {"offsets": chosen}
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        return int((await self._call("POST", "/nack", body)).get("nacked", len(chosen)))

    async def renew(self, offsets: Offsets) -> int:
        chosen = _offsets(offsets)
        return int((await self._call("POST", "/renew", {"offsets": chosen}))["renewed"]) \
            if chosen else 0

    async def seek(self, offset: int) -> dict[str, Any]:
        return await self._call("POST", "/seek", {"offset": offset})

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
                    if not _transient(exc):
                        raise
                    pause = min(30.0, max(0.5, 2 * pause))
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
        return stats

    def stop(self) -> None:
        """Make ``run`` return after the batch at hand."""
        self._stop.set()

    async def handle(self, messages: Sequence[ReceivedMessage], handler: AsyncHandler, *,
                     producer: AsyncProducer | None = None) -> BatchResult:
        """Run ``handler`` (plain or a coroutine function) on each message, then settle the
        batch (see ``Consumer.handle``)."""
        result = BatchResult()
        done: list[tuple[int, list[Message]]] = []
        for i, message in enumerate(messages):
            try:
                output = handler(message)
                if inspect.isawaitable(output):
                    output = await output
            except Exception:
                log.exception("handler failed on %s offset %d (redelivery %d)",
                              self.topic, message.offset, message.redelivery_count)
                result.nacked.append(message.offset)
                continue
            except BaseException:  # cancelled, KeyboardInterrupt: settle, then leave
                rest = [m.offset for m in messages[i:]]
                await self._settle(result, done, producer, release=rest)
                raise
            done.append((message.offset, _outputs(output) if producer is not None else []))
        await self._settle(result, done, producer)
        return result

    async def _settle(self, result: BatchResult, done: list[tuple[int, list[Message]]],
                      producer: AsyncProducer | None, release: Sequence[int] = ()) -> None:
        plain = [offset for offset, outputs in done if producer is None or not outputs]
        if producer is not None:
            for group in _transactions([(o, out) for o, out in done if out]):
                await self._transact(producer, group, result)
        if plain:
            async def ack_plain() -> None:
                await self.ack(plain)
                result.acked.extend(plain)
            await self._quietly(result, ack_plain)
        if result.nacked:
            await self._quietly(result, lambda: self.nack(result.nacked))
        if release:
            result.released.extend(release)
            await self._quietly(result, lambda: self.nack(release, delay_ms=0))

    async def _transact(self, producer: AsyncProducer, group: list[tuple[int, list[Message]]],
                        result: BatchResult) -> None:
        """One transaction: the outputs of ``group`` with its inputs' acks."""
        inputs = [offset for offset, _ in group]
        outputs = [m for _, out in group for m in out]
        txid = f"relay-{uuid.uuid4().hex}"
        acks = [{"topic": self.topic, "subscription": self.subscription, "offsets": inputs}]
        try:
            await _retrying(lambda: producer.send(outputs, transaction_id=txid, acks=acks))
        except FAILURES as exc:
            if not isinstance(exc, TxmsgError) or _transient(exc):
                await self._abandon(producer, txid, inputs, exc, result)
                return
            log.warning("transaction refused, its inputs given back: %s", exc)
            result.errors.append(exc)
            result.released.extend(inputs)
            await self._quietly(result, lambda: self.nack(inputs, delay_ms=0))
            return
        try:
            answer = await _retrying(lambda: producer.commit(txid))
        except FAILURES as exc:
            if isinstance(exc, TxmsgError) and not _transient(exc) \
                    and exc.code not in ACK_REFUSALS:
                result.errors.append(exc)
                result.released.extend(inputs)
                return
            await self._abandon(producer, txid, inputs, exc, result)
            return
        result.transactions.append(txid)
        result.acked.extend(inputs)
        result.published.extend(answer.get("messages", []))

    async def _abandon(self, producer: AsyncProducer, txid: str, inputs: list[int],
                       why: Exception, result: BatchResult) -> None:
        """Roll back a transaction whose send or commit did not go through."""
        result.errors.append(why)
        try:
            await _retrying(lambda: producer.rollback(txid))
        except TxmsgError as exc:
            if exc.status == 404:  # the send was never stored
                result.released.extend(inputs)
                await self._quietly(result, lambda: self.nack(inputs, delay_ms=0))
                return
            if exc.status == 409:  # it was committed after all
                result.errors.pop()
                try:
                    answer = await _retrying(lambda: producer.commit(txid))
                except FAILURES as again:
                    result.errors.append(again)
                    answer = {}
                result.transactions.append(txid)
                result.acked.extend(inputs)
                result.published.extend(answer.get("messages", []))
                return
            log.warning("transaction %s left to the check: %s", txid, exc)
            return
        except TRANSPORT_ERRORS as exc:
            log.warning("transaction %s left to the check: %s", txid, exc)
            return
        log.warning("transaction %s rolled back, its inputs released: %s", txid, why)
        result.released.extend(inputs)

    async def _quietly(self, result: BatchResult, fn: Callable[[], Awaitable[Any]]) -> None:
        try:
            await fn()
        except FAILURES as exc:
            log.warning("could not settle messages of %s/%s, they will be redelivered: %s",
                        self.topic, self.subscription, exc)
            result.errors.append(exc)

    # -- plumbing --------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, body: Any = None,
                    timeout: float | None = None) -> dict[str, Any]:
        return await call(self._client, method, self.base_url + self._path + path,
                          self._headers, timeout if timeout is not None else self.timeout, body)


async def _retrying(fn: Callable[[], Awaitable[_T]], attempts: int = 3) -> _T:
    """``fn`` awaited again on a transient failure (safe for idempotent calls only)."""
    for attempt in range(attempts):
        try:
            return await fn()
        except FAILURES as exc:
            if attempt == attempts - 1 or not _transient(exc):
                raise
            await asyncio.sleep(0.2 * 2 ** attempt)
    raise AssertionError("unreachable")


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
