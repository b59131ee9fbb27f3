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

import weakref
from dataclasses import dataclass

from sqlalchemy import Engine

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


# the type this process last saw of each subscription of each engine: a hint only, to
# skip a statement built for another type; every statement checks the type it is for
_seen: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], str]] = (
    weakref.WeakKeyDictionary())


def remember(engine: Engine, sub: AnyRow) -> None:
    seen = _seen.setdefault(engine, {})
    if len(seen) > 10_000:
        seen.clear()
    seen[(sub.topic, sub.name)] = sub.type if sub.tag_filter == "*" else "filtered"


def maybe_shared_unfiltered(engine: Engine, topic: str, name: str) -> bool:
    """Whether the subscription may be shared without a tag filter, as far as this
    process saw last (unknown: it may)."""
    return _seen.get(engine, {}).get((topic, name), SHARED) == SHARED


def maybe_key_shared(engine: Engine, topic: str, name: str) -> bool:
    return _seen.get(engine, {}).get((topic, name)) == KEY_SHARED
