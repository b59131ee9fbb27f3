"""Pure leasing decisions of subscriptions: when a message is deliverable again.

A lease that runs out, or a nack without a delay, makes a message deliverable again after
the backoff: ``min_ms × 2^r`` for a message delivered with ``redelivery_count`` r, at most
``max_ms``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol


class BackoffSettings(Protocol):
    """A subscription's backoff (its row)."""

    @property
    def backoff_min_ms(self) -> int: ...
    @property
    def backoff_max_ms(self) -> int: ...


def backoff_ms(min_ms: int, max_ms: int, redelivery_count: int) -> int:
    """``min_ms × 2^redelivery_count``, at most ``max_ms``."""
    if min_ms == 0:
        return 0
    if redelivery_count >= 62 or min_ms << redelivery_count > max_ms:
        return max_ms
    return min_ms << redelivery_count


def backoff(sub: BackoffSettings, redelivery_count: int) -> timedelta:
    """``backoff_ms`` with the subscription's settings."""
    return timedelta(milliseconds=backoff_ms(sub.backoff_min_ms, sub.backoff_max_ms,
                                             redelivery_count))
