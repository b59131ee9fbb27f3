"""What a consumer consumes, without I/O: one topic, a list of them, or those whose names
match a pattern (Pulsar's multi-topic consumer), each with a subscription of the same
name; the consumer's own name; and a receive that goes round the topics.

The calls are generators of ``_calls.Request`` (and ``_relay.Sleep``) that are sent each
answer or thrown its error, as ``_relay``'s batches are: ``Consumer`` drives them by
blocking, ``AsyncConsumer`` by awaiting, so the rules are written once.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from txmsg_client import _calls as calls
from txmsg_client._relay import Sleep
from txmsg_client._wire import Offsets, ReceivedMessage, offsets_by_topic, received
from txmsg_client.errors import TxmsgError

log = logging.getLogger("txmsg_client.consumer")

Program = Generator[calls.Request | Sleep, Any, Any]

NAME_MAX = 127
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_%|-]")
TOPICS_PAGE = 1000
# a receive across topics, none of which has a message, waits on one topic at a time for
# at most this long, then looks at every topic again
WAIT_SLICE_MS = 1000
SYSTEM_TOPICS = "RMQ_SYS_"


def default_consumer_name() -> str:
    """``<host name>-<process id>``, made to fit the name rule."""
    return consumer_name(f"{socket.gethostname()}-{os.getpid()}")


def consumer_name(wanted: str) -> str:
    """``wanted`` with every character the name rule refuses as ``-``, at most 127 long."""
    return _NOT_IN_NAME.sub("-", wanted)[:NAME_MAX] or "consumer"


class Topics:
    """The topics of one consumer and their subscription ``subscription``.

    Exactly one of ``topic``, ``topics`` and ``pattern`` is given. With ``pattern`` (a
    regular expression the whole topic name must match), the service's topic list is read
    again every ``refresh_seconds``; a topic found is subscribed with the settings of the
    last ``subscribe`` (the service's defaults if none), a topic gone from the list is
    dropped. The system's ``RMQ_SYS_`` topics and the subscription's own default
    dead-letter topics (``<topic>-<subscription>-DLQ``) are never matched.
    """

    def __init__(self, subscription: str, *, topic: str | None = None,
                 topics: Sequence[str] | None = None, pattern: str | re.Pattern[str] | None = None,
                 refresh_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if sum(x is not None for x in (topic, topics, pattern)) != 1:
            raise ValueError("give exactly one of topic, topics and topics_pattern")
        if topics is not None and (isinstance(topics, str) or not topics):
            raise ValueError("topics: a non-empty list of topic names")
        self.subscription = subscription
        self.single = topic
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.names: list[str] = [topic] if topic is not None else sorted(set(topics or ()))
        self.settings: dict[str, Any] = {}
        self.joined: set[str] = set()  # topics this consumer called: it leaves them
        self._read_at: float | None = None
        self._turn = 0

    def path(self, topic: str) -> str:
        return calls.subscription_path(topic, self.subscription)

    def matches(self, topic: str) -> bool:
        assert self.pattern is not None
        return (self.pattern.fullmatch(topic) is not None
                and not topic.startswith(SYSTEM_TOPICS)
                and not topic.endswith(f"-{self.subscription}-DLQ"))

    # -- the subscription on every topic ---------------------------------------------------

    def subscribe(self, settings: Mapping[str, Any]) -> Program:
        """Create or change the subscription on every topic (after reading the topic list,
        for a pattern); the settings are kept for topics found later. Each topic's
        description, by topic."""
        self.settings = dict(settings)
        if self.pattern is not None:
            self.names = yield from self._matching_topics()
            self._read_at = self.clock()
        answers = {}
        for topic in self.names:
            answers[topic] = yield calls.subscribe(self.path(topic), self.settings)
        return answers

    def refresh(self) -> Program:
        """For a pattern, when due: read the topic list again, subscribe to the new ones."""
        if self.pattern is None or (self._read_at is not None
                                    and self.clock() - self._read_at < self.refresh_seconds):
            return
        found = yield from self._matching_topics()
        self._read_at = self.clock()
        known = set(self.names)
        names = []
        for topic in found:
            if topic not in known:
                try:
                    yield calls.subscribe(self.path(topic), self.settings)
                except TxmsgError as exc:  # refused: looked at again at the next refresh
                    log.warning("could not subscribe %s to %s: %s", self.subscription, topic,
                                exc)
                    continue
                log.info("subscribed %s to topic %s", self.subscription, topic)
            names.append(topic)
        self.names = names

    def _matching_topics(self) -> Program:
        found: list[str] = []
        after: str | None = None
        while True:
            page = yield calls.list_topics(after, TOPICS_PAGE)
            found.extend(t["topic"] for t in page["topics"] if self.matches(t["topic"]))
            after = page.get("next_after")
            if not after:
                return found

    # -- messages --------------------------------------------------------------------------

    def receive(self, max_messages: int, wait_ms: int, consumer: str) -> Program:
        """Lease up to ``max_messages`` messages of one topic.

        Several topics are taken in turn, each receive starting at the topic after the
        one the last started at, so that a busy topic does not starve the others; when
        none has a message, it waits on one topic after the other (``WAIT_SLICE_MS`` each)
        until ``wait_ms`` is over."""
        yield from self.refresh()
        if len(self.names) == 1:
            return (yield from self._receive_one(self.names[0], max_messages, wait_ms, consumer))
        deadline = self.clock() + wait_ms / 1000
        while True:
            for topic in self._round():
                got = yield from self._receive_one(topic, max_messages, 0, consumer)
                if got:
                    return got
            left_ms = int((deadline - self.clock()) * 1000)
            if left_ms <= 0:
                return []
            if not self.names:  # a pattern nothing matches yet
                yield Sleep(min(left_ms, WAIT_SLICE_MS) / 1000)
                yield from self.refresh()
                continue
            topic = self.names[self._turn % len(self.names)]  # the next turn's first
            got = yield from self._receive_one(topic, max_messages,
                                               min(left_ms, WAIT_SLICE_MS), consumer)
            if got:
                return got

    def _round(self) -> list[str]:
        """The topics in the order of this turn; the next turn starts one further."""
        if not self.names:
            return []
        start = self._turn % len(self.names)
        self._turn = start + 1
        return self.names[start:] + self.names[:start]

    def _receive_one(self, topic: str, max_messages: int, wait_ms: int,
                     consumer: str) -> Program:
        self.joined.add(topic)
        answer = yield calls.receive(self.path(topic), max_messages, wait_ms, consumer)
        return received(topic, answer)

    def settle(self, action: str, offsets: Offsets, consumer: str,
               delay_ms: int | None = None) -> Program:
        """``ack``, ``nack`` or ``renew``, each topic's offsets to its subscription; how
        many changed."""
        changed = 0
        for topic, chosen in offsets_by_topic(offsets, self.single).items():
            request = calls.settle(self.path(topic), action, chosen, consumer, delay_ms)
            if request is not None:
                self.joined.add(topic)
                changed += calls.settled(action, (yield request), len(chosen))
        return changed

    def ack_through(self, message: ReceivedMessage, consumer: str) -> Program:
        self.joined.add(message.topic)
        answer = yield calls.ack_through(self.path(message.topic), message.offset, consumer)
        return int(answer.get("acked", 0))

    def leave(self, consumer: str) -> Program:
        """Leave every subscription this consumer called (its leases released at once);
        what fails is only logged: the service forgets a silent consumer anyway."""
        for topic in sorted(self.joined):
            try:
                yield calls.leave(self.path(topic), consumer)
            except Exception as exc:  # noqa: BLE001 - leaving is a courtesy
                log.info("could not leave %s/%s: %s", topic, self.subscription, exc)
        self.joined.clear()

    def one(self, topic: str | None) -> str:
        """The topic a call on one subscription means: ``topic``, or the only one."""
        if topic is not None:
            return topic
        if self.single is not None:
            return self.single
        raise ValueError("a consumer of several topics: name the topic")

    def each(self, request: Callable[[str], calls.Request]) -> Program:
        """``request`` on every topic's subscription."""
        for topic in list(self.names):
            yield request(self.path(topic))

