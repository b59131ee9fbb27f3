"""Prometheus metrics. Under ``txmsg serve`` the web workers and the embedded checker
are separate processes, so the CLI sets PROMETHEUS_MULTIPROC_DIR before this module is
first imported and scrapes aggregate every process's files."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

SENT = Counter("txmsg_sent_messages_total", "Half messages stored.")
COMMITTED = Counter("txmsg_commit_messages_total", "Messages committed (made visible).")
ROLLED_BACK = Counter("txmsg_rollback_messages_total", "Messages rolled back.")
DISCARDED = Counter("txmsg_discard_messages_total",
                    "Messages moved to TRANS_CHECK_MAX_TIME_TOPIC after the last check.")
CHECKS = Counter("txmsg_checks_total", "Checks delivered to producers, by result.", ["result"])
FINISH_LATENCY = Histogram(
    "txmsg_finish_latency_seconds", "Time from send to commit or rollback.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
BATCH_SIZE = Histogram(
    "txmsg_group_commit_batch_size", "Requests carried by one database transaction.",
    ["writer"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)

__all__ = [
    "BATCH_SIZE",
    "CHECKS",
    "COMMITTED",
    "CONTENT_TYPE_LATEST",
    "DISCARDED",
    "FINISH_LATENCY",
    "ROLLED_BACK",
    "SENT",
    "render",
]


class _HalfMessages:
    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("txmsg_half_messages",
                                "Half messages not yet resolved (PREPARED), from the database.",
                                value=self._count())


def render(count_half_messages: Callable[[], int]) -> bytes:
    """The exposition text: process counters (all processes under serve) plus DB gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    db_registry = CollectorRegistry()
    db_registry.register(_HalfMessages(count_half_messages))
    return generate_latest(registry) + generate_latest(db_registry)
