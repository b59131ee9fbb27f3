"""Bounds on offsets, counts, delays and settings: the one home of each limit that a
request is held to or that arithmetic on offsets or times must respect, asked by the
models, the answers' shapes, the API's pages, the CLI and the domain.

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

# a page of a listing (``limit``): its default and its largest size; the CLI reads whole
# listings in pages of the largest
DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 1000

# a subscription's settings
MIN_ACK_TIMEOUT_MS = 1000
MAX_ACK_TIMEOUT_MS = 43_200_000  # twelve hours
MIN_CONSUMER_TIMEOUT_MS = 1000
MAX_CONSUMER_TIMEOUT_MS = 600_000
MAX_REDELIVERIES = 1000
MAX_BACKOFF_MS = 3_600_000  # an hour: either bound of the redelivery backoff

# a transaction's checks and a producer group's check callbacks
MAX_CHECK_IMMUNITY_SECONDS = 365 * 24 * 3600  # a year
MIN_CHECK_TIMEOUT_MS = 100
MAX_CHECK_TIMEOUT_MS = 60_000


def offset_plus(offset: int, count: int) -> int:
    """``offset + count``, at most ``MAX_INT64`` (an exclusive end of a range of offsets)."""
    return min(offset + count, MAX_INT64)


def latest_delivery(now: datetime) -> datetime:
    """The latest time a message sent at ``now`` may ask to be delivered at."""
    return now + MAX_DELAY


def within_budget(taken: int, used: int, size: int, max_bytes: int) -> bool:
    """Whether a page or a receive that holds ``taken`` messages of ``used`` body bytes
    takes the next one, of ``size`` bytes: at most ``max_bytes`` of bodies, but at least
    one message. The SQL that cuts a page or a first delivery (``app.storage.log.read_page``,
    ``app.storage.subscription_leases.first_deliveries``) writes it as a running sum:
    ``sum(size) OVER (ORDER BY offset) <= max_bytes OR row_number() = 1``
    (tests/integration/domain/test_budgets.py runs both on the same rows)."""
    return taken == 0 or used + size <= max_bytes
