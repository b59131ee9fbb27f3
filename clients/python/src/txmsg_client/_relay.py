"""What a consumer does with a batch, without I/O: ``Consumer.handle`` and
``AsyncConsumer.handle`` drive the one generator here.

``handle`` yields steps (run the handler on a message, call the service, sleep) and is
sent each step's outcome, or thrown its exception; ``drive`` (blocking) and the asyncio
driver run the steps. So the rules are written once: what is acknowledged, given back or
released; which failures are tried again; how a relay's outputs are grouped into
transactions whose commit acknowledges their inputs (consume, process, produce: exactly
once).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from txmsg_client._wire import BatchResult, Message, ReceivedMessage, offsets_by_topic
from txmsg_client.errors import TxmsgError

log = logging.getLogger("txmsg_client.consumer")

MAX_TRANSACTION_MESSAGES = 1000
# a commit refused for its acks (a late commit whose inputs were acknowledged since, or are
# held by another transaction) leaves the transaction unresolved: it is rolled back
ACK_REFUSALS = frozenset({"ack_not_pending", "ack_conflict"})
ATTEMPTS = 3


@dataclass(frozen=True)
class Handle:
    """Run the handler on ``message``; the outcome is what it returned."""

    message: ReceivedMessage


@dataclass(frozen=True)
class Call:
    """Call ``action`` (``ack``, ``nack``: the consumer's; ``send``, ``commit``,
    ``rollback``: the producer's) with ``kwargs``; the outcome is its answer."""

    action: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Handle | Call | Sleep
Steps = Generator[Step, Any, Any]
S = TypeVar("S")


def transient(exc: BaseException) -> bool:
    """Worth trying again: the service unreachable, overloaded, or its database down."""
    return not isinstance(exc, TxmsgError) or exc.status >= 500 or exc.status == 408


def next_pause(pause: float) -> float:
    """The run loop's wait before receiving again after a transient failure."""
    return min(30.0, max(0.5, 2 * pause))


def drive(steps: Generator[S, Any, Any], do: Callable[[S], Any]) -> Any:
    """Run ``steps`` to the end, each by ``do`` (blocking); their result."""
    try:
        step = next(steps)
        while True:
            try:
                outcome = do(step)
            except BaseException as exc:  # noqa: BLE001 - the steps decide what they catch
                step = steps.throw(exc)
            else:
                step = steps.send(outcome)
    except StopIteration as stop:
        return stop.value


def outputs_of(output: Any) -> list[Message]:
    """What a handler returned: a message, several, or None."""
    if output is None:
        return []
    if isinstance(output, Mapping):
        return [output]
    return list(output)


def transactions(done: list[tuple[ReceivedMessage, list[Message]]]
                 ) -> list[list[tuple[ReceivedMessage, list[Message]]]]:
    """Inputs grouped in order so that no transaction has more than 1000 messages."""
    groups: list[list[tuple[ReceivedMessage, list[Message]]]] = []
    size = MAX_TRANSACTION_MESSAGES + 1
    for item in done:
        if size + len(item[1]) > MAX_TRANSACTION_MESSAGES:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += len(item[1])
    return groups


class Batch:
    """One batch's handling: ``steps()`` is the generator; ``failures`` are the driver's
    exceptions of a call that did not go through (its transport's, and ``TxmsgError``).
    The ack and nack calls name the messages themselves, so that each goes to its topic's
    subscription (a consumer of several topics)."""

    def __init__(self, messages: Sequence[ReceivedMessage], topic: str | None,
                 subscription: str, *, relay: bool,
                 failures: tuple[type[BaseException], ...]) -> None:
        self.messages = messages
        self.topic = topic
        self.subscription = subscription
        self.relay = relay
        self.failures = failures
        self.result = BatchResult()
        self._given_back: list[ReceivedMessage] = []

    def steps(self) -> Steps:
        """Run the handler on each message, then settle the batch (``Consumer.handle``).

        A key's order is kept: once a message with an ordering key fails, the later
        messages of that key in the batch are not handled but given back with it, so
        that they come again after it, in order; other keys go on."""
        result = self.result
        done: list[tuple[ReceivedMessage, list[Message]]] = []
        failed_keys: set[tuple[str, str]] = set()
        for i, message in enumerate(self.messages):
            key = (message.topic, message.ordering_key) if message.ordering_key else None
            if key in failed_keys:
                result.held.append(message.offset)
                self._given_back.append(message)
                continue
            try:
                output = yield Handle(message)
            except Exception:
                log.exception("handler failed on %s offset %d (redelivery %d)",
                              message.topic, message.offset, message.redelivery_count)
                result.nacked.append(message.offset)
                self._given_back.append(message)
                if key is not None:
                    failed_keys.add(key)
                continue
            except BaseException:  # KeyboardInterrupt, cancelled: settle, then leave
                yield from self._settle(done, release=self.messages[i:])
                raise
            done.append((message, outputs_of(output) if self.relay else []))
        yield from self._settle(done)
        return result

    def _settle(self, done: list[tuple[ReceivedMessage, list[Message]]],
                release: Sequence[ReceivedMessage] = ()) -> Steps:
        result = self.result
        plain = [m for m, outputs in done if not self.relay or not outputs]
        if self.relay:
            for group in transactions([(m, out) for m, out in done if out]):
                yield from self._transact(group)
        if plain and (yield from self._quietly(Call("ack", {"offsets": plain}))):
            result.acked.extend(m.offset for m in plain)
        if self._given_back:  # in offset order: a failed message before those it held
            yield from self._quietly(Call("nack", {"offsets": list(self._given_back)}))
        if release:
            result.released.extend(m.offset for m in release)
            yield from self._quietly(Call("nack", {"offsets": list(release), "delay_ms": 0}))

    def _transact(self, group: list[tuple[ReceivedMessage, list[Message]]]) -> Steps:
        """One transaction: the outputs of ``group`` with its inputs' acks."""
        result = self.result
        inputs = [m for m, _ in group]
        outputs = [out for _, outs in group for out in outs]
        txid = f"relay-{uuid.uuid4().hex}"
        acks = [{"topic": topic, "subscription": self.subscription, "offsets": offsets}
                for topic, offsets in offsets_by_topic(inputs, self.topic).items()]
        try:
            yield from self._retrying(Call("send", {"messages": outputs, "transaction_id": txid,
                                                    "acks": acks}))
        except self.failures as exc:
            if transient(exc):
                yield from self._abandon(txid, inputs, exc)
                return
            # refused (409 ack_not_pending: acknowledged elsewhere, say): nothing stored
            log.warning("transaction refused, its inputs given back: %s", exc)
            result.errors.append(exc)  # type: ignore[arg-type]
            result.released.extend(m.offset for m in inputs)
            yield from self._quietly(Call("nack", {"offsets": inputs, "delay_ms": 0}))
            return
        try:
            answer = yield from self._retrying(Call("commit", {"transaction_id": txid}))
        except self.failures as exc:
            if isinstance(exc, TxmsgError) and not transient(exc) \
                    and exc.code not in ACK_REFUSALS:
                # 409: resolved otherwise (rolled back by a check): its acks released
                result.errors.append(exc)
                result.released.extend(m.offset for m in inputs)
                return
            yield from self._abandon(txid, inputs, exc)
            return
        self._committed(txid, inputs, answer)

    def _abandon(self, txid: str, inputs: list[ReceivedMessage], why: BaseException) -> Steps:
        """Roll back a transaction whose send or commit did not go through."""
        result = self.result
        result.errors.append(why)  # type: ignore[arg-type]
        try:
            yield from self._retrying(Call("rollback", {"transaction_id": txid}))
        except self.failures as exc:
            if isinstance(exc, TxmsgError) and exc.status == 404:  # the send was never stored
                result.released.extend(m.offset for m in inputs)
                yield from self._quietly(Call("nack", {"offsets": inputs, "delay_ms": 0}))
                return
            if isinstance(exc, TxmsgError) and exc.status == 409:
                # it was committed after all: the commit's answer again
                result.errors.pop()
                try:
                    answer = yield from self._retrying(Call("commit", {"transaction_id": txid}))
                except self.failures as again:
                    result.errors.append(again)  # type: ignore[arg-type]
                    answer = {}
                self._committed(txid, inputs, answer)
                return
            log.warning("transaction %s left to the check: %s", txid, exc)
            return
        log.warning("transaction %s rolled back, its inputs released: %s", txid, why)
        result.released.extend(m.offset for m in inputs)

    def _committed(self, txid: str, inputs: list[ReceivedMessage],
                   answer: Mapping[str, Any]) -> None:
        self.result.transactions.append(txid)
        self.result.acked.extend(m.offset for m in inputs)
        self.result.published.extend(answer.get("messages", []))

    def _quietly(self, call: Call) -> Steps:
        """An ack or nack that fails leaves the messages to their lease: redelivered.
        Whether it went through."""
        try:
            yield call
        except self.failures as exc:
            log.warning("could not settle messages of subscription %s, they will be "
                        "redelivered: %s", self.subscription, exc)
            self.result.errors.append(exc)  # type: ignore[arg-type]
            return False
        return True

    def _retrying(self, call: Call) -> Steps:
        """``call`` tried again on a transient failure (idempotent calls only)."""
        for attempt in range(ATTEMPTS):
            try:
                return (yield call)
            except self.failures as exc:
                if attempt == ATTEMPTS - 1 or not transient(exc):
                    raise
                yield Sleep(0.2 * 2 ** attempt)
        raise AssertionError("unreachable")
