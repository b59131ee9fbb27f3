"""Prometheus metrics. Under ``txmsg serve`` the web workers and the embedded checker
are separate processes, so the CLI sets PROMETHEUS_MULTIPROC_DIR before this module is
first imported and scrapes aggregate every process's files.

Every series whose label values are known in advance (check results, writers) is created
here at 0, so that it shows from the first scrape (a missing series is not a zero to a
rate() or an alert). The HTTP histogram's labels are the route pattern, the method and the
status, never the raw path: its cardinality is bounded by the routes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

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
    "render",
]


class _Backlog:
    """Gauges read from the database at scrape time."""

    def __init__(self, read: Callable[[], tuple[int, float]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        half_messages, oldest_age = self._read()
        yield GaugeMetricFamily("txmsg_half_messages",
                                "Half messages not yet resolved (PREPARED), from the database.",
                                value=half_messages)
        yield GaugeMetricFamily(
            "txmsg_oldest_prepared_transaction_age_seconds",
            "Age of the oldest PREPARED transaction (0 when there is none), from the database.",
            value=oldest_age)


class _OldestRetained:
    """Per topic, the age of its oldest retained committed message, at scrape time."""

    def __init__(self, ages: Callable[[], Iterable[tuple[str, float]]]) -> None:
        self._ages = ages

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "txmsg_retention_oldest_message_age_seconds",
            "Age of the oldest committed message still retained, per topic, from the database.",
            labels=["topic"])
        for topic, age in self._ages():
            family.add_metric([topic], age)
        yield family


class _SubscriptionBacklog:
    """Per subscription, its backlog, at scrape time."""

    def __init__(self, backlogs: Iterable[tuple[str, str, int]]) -> None:
        self._backlogs = backlogs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "txmsg_subscription_backlog",
            "Committed messages a subscription has not acknowledged (leased and delayed "
            "ones included), from the database.", labels=["topic", "subscription"])
        for topic, name, backlog in self._backlogs:
            family.add_metric([topic, name], backlog)
        yield family


def render(prepared_backlog: Callable[[], tuple[int, float]],
           oldest_retained: Callable[[], Iterable[tuple[str, float]]] = lambda: (),
           subscription_backlogs: Callable[[], Iterable[tuple[str, str, int]]] = lambda: (),
           ) -> bytes:
    """The exposition text: process metrics (all processes under serve) plus DB gauges;
    ``prepared_backlog`` gives (half messages, oldest PREPARED transaction's age),
    ``oldest_retained`` (topic, age of its oldest retained message),
    ``subscription_backlogs`` (topic, subscription, backlog). Each subscription's
    counters show from the first scrape that knows it, at 0 until they count."""
    backlogs = list(subscription_backlogs())
    for topic, name, _ in backlogs:
        for counter in (REDELIVERIES, DEAD_LETTERS, SUBSCRIPTION_EXPIRED):
            counter.labels(topic, name)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    db_registry = CollectorRegistry()
    db_registry.register(_Backlog(prepared_backlog))
    db_registry.register(_OldestRetained(oldest_retained))
    db_registry.register(_SubscriptionBacklog(backlogs))
    return generate_latest(registry) + generate_latest(db_registry)
