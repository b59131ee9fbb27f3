"""Bounds on offsets, counts and delays: the one home of each limit that arithmetic on
offsets or times must respect, asked by the models, the API, the CLI and the domain.

Each sum of an offset and a count is bounded where it is written (``offset_plus``), so
that no value past the database's ``BIGINT`` reaches it; each delay is at most
``MAX_DELAY_MS``, so that no time computed from one leaves the calendar.
"""

from __future__ import annotations

from datetime import datetime, timedelta

MAX_INT64 = 2**63 - 1  # the database's BIGINT: offsets, cursors
MAX_DELAY_MS = 864_000_000  # ten days: deliver_after_ms, deliver_at, a nack's delay_ms
MAX_DELAY = timedelta(milliseconds=MAX_DELAY_MS)
# a check's JSON at most, bodies left out past it: the SDK's check endpoints take 1 MiB
CHECK_PAYLOAD_BYTES = 1024 * 1024 - 64 * 1024


def offset_plus(offset: int, count: int) -> int:
    """``offset + count``, at most ``MAX_INT64`` (an exclusive end of a range of offsets)."""
    return min(offset + count, MAX_INT64)


def latest_delivery(now: datetime) -> datetime:
    """The latest time a message sent at ``now`` may ask to be delivered at."""
    return now + MAX_DELAY
