"""What each subscription type (Pulsar's) changes in a receive and an ack.

- ``shared``: any consumer gets any deliverable message, lowest offsets first.
- ``key_shared``: one message of an ordering key in flight at a time, in offset order;
  messages without a key as on shared (``app.storage.ordering``).
- ``failover``: one consumer, the active one, is given messages; the others stand by
  (``app.domain.consumers``); offset order, cumulative acks.
- ``exclusive``: as failover, but a receive by another consumer is refused while the
  holder is alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.subscription_models import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    SubscriptionType,
)
from app.errors import InvalidRequest
from app.problems import ProblemCode
from app.storage.schema import AnyRow


@dataclass(frozen=True)
class Kind:
    name: SubscriptionType
    # served to one named consumer at a time (who is active: ``consumers.take_turn``)
    one_consumer: bool = False
    # a receive never gives an offset while a lower one given back is not due yet
    in_offset_order: bool = False
    # a keyed message waits until the earlier ones of its key are acknowledged
    by_key: bool = False

    @property
    def cumulative_acks(self) -> bool:
        return self.one_consumer


KINDS = {k.name: k for k in (
    Kind(SHARED),
    Kind(KEY_SHARED, by_key=True),
    Kind(FAILOVER, one_consumer=True, in_offset_order=True),
    Kind(EXCLUSIVE, one_consumer=True, in_offset_order=True),
)}


def of(sub: AnyRow) -> Kind:
    return KINDS[sub.type]


def consumer_required(sub: AnyRow) -> InvalidRequest:
    return InvalidRequest(f"subscription {sub.name!r} on {sub.topic!r} is {sub.type}: "
                          "a receive or a cumulative ack names its consumer",
                          code=ProblemCode.CONSUMER_REQUIRED)
