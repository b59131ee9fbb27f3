"""Pure leasing decisions of subscriptions: how long a lease runs, when a message is
deliverable again, when its deliveries are spent. Both receive paths take their numbers
from here: the general one (``app.domain.subscription_receives``) and PostgreSQL's one
statement for first deliveries (``app.storage.subscription_leases.first_deliveries``),
which is given ``FIRST_DELIVERY`` and reads the subscription's settings itself.

A receive leases a message for ``ack_timeout_ms``. A lease that runs out, or a nack
without a delay, makes it deliverable again after the backoff: ``min_ms × 2^r`` for a
message delivered with redelivery count r, at most ``max_ms``. A message whose delivery
number would be ``2 + max_redeliveries`` is dead-lettered instead.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

# the deliveries an offset row has once its first delivery is leased (redelivery count 0)
FIRST_DELIVERY = 1


class LeaseSettings(Protocol):
    """A subscription's leasing settings (its row)."""

    @property
    def ack_timeout_ms(self) -> int: ...
    @property
    def max_redeliveries(self) -> int: ...
    @property
    def backoff_min_ms(self) -> int: ...
    @property
    def backoff_max_ms(self) -> int: ...


def backoff_ms(min_ms: int, max_ms: int, redelivery_count: int) -> int:
    """``min_ms × 2^redelivery_count``, at most ``max_ms`` (for redelivery count 0:
    ``min(min_ms, max_ms)``)."""
    if min_ms == 0:
        return 0
    if redelivery_count >= 62 or min_ms << redelivery_count > max_ms:
        return max_ms
    return min_ms << redelivery_count


def backoff(sub: LeaseSettings, redelivery_count: int) -> timedelta:
    """``backoff_ms`` with the subscription's settings."""
    return timedelta(milliseconds=backoff_ms(sub.backoff_min_ms, sub.backoff_max_ms,
                                             redelivery_count))


def redelivery_count(deliveries: int) -> int:
    """The redelivery count of an offset row's latest delivery (its first: 0)."""
    return deliveries - FIRST_DELIVERY


def lease_until(sub: LeaseSettings, now: datetime) -> datetime:
    """When a lease taken (or renewed) at ``now`` runs out."""
    return now + timedelta(milliseconds=sub.ack_timeout_ms)


def redeliverable_at(sub: LeaseSettings, until: datetime, redelivery_count: int) -> datetime:
    """When a message leased until ``until``, delivered with ``redelivery_count``, is
    deliverable again if its lease runs out: after the backoff."""
    return until + backoff(sub, redelivery_count)


def dead_letter_from(sub: LeaseSettings) -> int:
    """The deliveries from which a due offset row is dead-lettered instead of delivered
    again (``1 + max_redeliveries``)."""
    return FIRST_DELIVERY + sub.max_redeliveries


def consumers_alive_since(consumer_timeout_ms: int, now: datetime) -> datetime:
    """Consumers last seen from then on are alive (``consumer_timeout_ms`` ago)."""
    return now - timedelta(milliseconds=consumer_timeout_ms)
