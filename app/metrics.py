"""Prometheus metrics. Under ``txmsg serve`` the web workers and the embedded checker
are separate processes, so the CLI sets PROMETHEUS_MULTIPROC_DIR before this module is
first imported and scrapes aggregate every process's files.

Every series whose label values are known in advance (check results, writers) is created
here at 0, so that it shows from the first scrape (a missing series is not a zero to a
rate() or an alert). The HTTP histogram's labels are the route pattern, the method and the
status, never the raw path: its cardinality is bounded by the routes. The series of each
topic and subscription (gauges read from the database, and the per-subscription counters)
are built afresh, for the topics and subscriptions that exist, at most once every
TXMSG_METRICS_CACHE_SECONDS (``Exposition``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.vocabulary import CheckResult

SENT = Counter("txmsg_sent_messages_total", "Half messages stored.")
COMMITTED = Counter("txmsg_commit_messages_total", "Messages committed (made visible).")
ROLLED_BACK = Counter("txmsg_rollback_messages_total", "Messages rolled back.")
DISCARDED = Counter("txmsg_discard_messages_total",
                    "Messages moved to TRANS_CHECK_MAX_TIME_TOPIC after the last check.")
CHECKS = Counter("txmsg_checks_total", "Checks delivered to producers, by result.", ["result"])
CHECK_DURATION = Histogram(
    "txmsg_check_duration_seconds", "Time one check took to be answered (every URL asked), "
    "by result.", ["result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180),
)
for _result in CheckResult:
    CHECKS.labels(_result.value)
    CHECK_DURATION.labels(_result.value)
HTTP_DURATION = Histogram(
    "txmsg_http_request_duration_seconds",
    "Time from a request's arrival to its answer, by route pattern, method and status.",
    ["route", "method", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
FINISH_LATENCY = Histogram(
    "txmsg_finish_latency_seconds", "Time from send to commit or rollback.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
BATCH_SIZE = Histogram(
    "txmsg_group_commit_batch_size", "Requests carried by one database transaction.",
    ["writer"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
# summed over the live processes (each process has its own writers: web workers, checker)
QUEUE_DEPTH = Gauge(
    "txmsg_writer_queue_depth",
    "Requests waiting for a group-commit writer: queued or in the batch being written "
    "(sampled every second).", ["writer"], multiprocess_mode="livesum",
)
WRITERS = ("send", "finish")
for _writer in WRITERS:
    BATCH_SIZE.labels(_writer)
    QUEUE_DEPTH.labels(_writer)
REDELIVERIES = Counter(
    "txmsg_redeliveries_total",
    "Messages delivered again by a subscription (after a nack or a lease that ran out).",
    ["topic", "subscription"])
DEAD_LETTERS = Counter(
    "txmsg_dead_letter_messages_total",
    "Messages a subscription appended to its dead-letter topic.", ["topic", "subscription"])
SUBSCRIPTION_EXPIRED = Counter(
    "txmsg_subscription_expired_messages_total",
    "Messages retention deleted before a subscription acknowledged them (its ack cursor "
    "moved past them).", ["topic", "subscription"])
RETENTION_DELETED = Counter(
    "txmsg_retention_deleted_total",
    "Rows deleted by retention, by kind (committed log messages, transactions, their half "
    "messages, op records and check records).", ["kind"])
RETENTION_KINDS = ("messages", "transactions", "half_messages", "op_records", "check_records")
for _kind in RETENTION_KINDS:  # every kind shows from the start, at 0
    RETENTION_DELETED.labels(_kind)

WAKEUP_SOURCES = ("local", "notify", "probe")
WAKEUPS = Counter(
    "txmsg_wakeups_total",
    "Waiting receives told to look again, by what told them: a commit of this process "
    "(local), one of another process, notified through PostgreSQL (notify), or the probe "
    "of the subscription finding something due (probe).", ["source"])
for _source in WAKEUP_SOURCES:
    WAKEUPS.labels(_source)

__all__ = [
    "BATCH_SIZE",
    "CHECKS",
    "CHECK_DURATION",
    "COMMITTED",
    "CONTENT_TYPE_LATEST",
    "DEAD_LETTERS",
    "DISCARDED",
    "FINISH_LATENCY",
    "HTTP_DURATION",
    "PER_SUBSCRIPTION",
    "QUEUE_DEPTH",
    "REDELIVERIES",
    "RETENTION_DELETED",
    "RETENTION_KINDS",
    "ROLLED_BACK",
    "SENT",
    "SUBSCRIPTION_EXPIRED",
    "WAKEUPS",
    "WAKEUP_SOURCES",
    "WRITERS",
    "DatabaseState",
    "Exposition",
]


class DatabaseState(NamedTuple):
    """What /metrics reads from the database: one bounded set of queries."""

    half_messages: int  # of PREPARED transactions
    oldest_prepared_age: float  # seconds; 0 when nothing is PREPARED
    oldest_retained: Sequence[tuple[str, float]]  # (topic, age of its oldest retained one)
    backlogs: Sequence[tuple[str, str, int]]  # (topic, subscription, backlog)
    # (topic, subscription) -> consumers alive; a subscription left out has none
    consumers: Mapping[tuple[str, str], int]


PER_SUBSCRIPTION = (REDELIVERIES, DEAD_LETTERS, SUBSCRIPTION_EXPIRED)
_PER_SUBSCRIPTION = {family.name: family.documentation
                     for counter in PER_SUBSCRIPTION for family in counter.describe()}


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def _text(families: Iterable[Metric]) -> bytes:
    return generate_latest(_Families(families))


def _database_families(state: DatabaseState, counted: Iterable[Metric]) -> list[Metric]:
    """The gauges read from the database, and the per-subscription counters (``counted``:
    as the processes counted them) for the subscriptions that exist now, at 0 until they
    count: a deleted subscription's series are gone, whatever the processes counted."""
    subscriptions = [(topic, name) for topic, name, _ in state.backlogs]
    families: list[Metric] = [
        GaugeMetricFamily("txmsg_half_messages",
                          "Half messages not yet resolved (PREPARED), from the database.",
                          value=state.half_messages),
        GaugeMetricFamily(
            "txmsg_oldest_prepared_transaction_age_seconds",
            "Age of the oldest PREPARED transaction (0 when there is none), from the database.",
            value=state.oldest_prepared_age)]
    retained = GaugeMetricFamily(
        "txmsg_retention_oldest_message_age_seconds",
        "Age of the oldest committed message still retained, per topic, from the database.",
        labels=["topic"])
    for topic, age in state.oldest_retained:
        retained.add_metric([topic], age)
    backlog = GaugeMetricFamily(
        "txmsg_subscription_backlog",
        "Committed messages a subscription has not acknowledged (leased and delayed "
        "ones included), from the database.", labels=["topic", "subscription"])
    alive = GaugeMetricFamily(
        "txmsg_subscription_consumers",
        "Named consumers alive (seen within the subscription's consumer_timeout_ms), "
        "from the database.", labels=["topic", "subscription"])
    for topic, name, value in state.backlogs:
        backlog.add_metric([topic, name], value)
        alive.add_metric([topic, name], state.consumers.get((topic, name), 0))
    families += [retained, backlog, alive]
    totals: dict[str, dict[tuple[str, str], float]] = {name: {} for name in _PER_SUBSCRIPTION}
    for family in counted:
        for sample in family.samples:
            if family.name in totals and sample.name.endswith("_total"):
                key = (sample.labels["topic"], sample.labels["subscription"])
                totals[family.name][key] = totals[family.name].get(key, 0.0) + sample.value
    for name, documentation in _PER_SUBSCRIPTION.items():
        counter = CounterMetricFamily(name, documentation, labels=["topic", "subscription"])
        for key in subscriptions:
            counter.add_metric(list(key), totals[name].get(key, 0.0))
        families.append(counter)
    return families


class Exposition:
    """/metrics' text: the process metrics (every process's under serve) as they are at
    each scrape, then what comes from the database with the per-subscription counters,
    computed at most once every ``ttl`` seconds and by one scrape at a time, the
    scrapes meanwhile answering with the last computation. A scrape then costs the same
    however many topics and subscriptions there are and however many scrapers ask, and
    each computation builds its series afresh from the database (nothing kept per label,
    so what was deleted disappears)."""

    def __init__(self, read: Callable[[], DatabaseState], ttl: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self._ttl, self._clock = read, ttl, clock
        self._computing = threading.Lock()
        self._last: tuple[float, bytes] | None = None  # (when its computation began, text)

    def render(self) -> bytes:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        else:
            registry = REGISTRY
        families = list(registry.collect())
        own = [f for f in families if f.name not in _PER_SUBSCRIPTION]
        counted = [f for f in families if f.name in _PER_SUBSCRIPTION]
        return _text(own) + self._database_part(counted)

    def _fresh(self) -> bytes | None:
        last = self._last
        return last[1] if last is not None and self._clock() - last[0] < self._ttl else None

    def _database_part(self, counted: list[Metric]) -> bytes:
        text = self._fresh()
        if text is not None:
            return text
        with self._computing:
            text = self._fresh()  # computed while this scrape waited
            if text is None:
                began = self._clock()
                text = _text(_database_families(self._read(), counted))
                self._last = (began, text)
            return text
