"""The leasing decisions of subscriptions (``app.domain.leasing``): the backoff, lease
ends, redelivery counts and the dead-letter threshold, the numbers both receive paths use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import pytest

from app.domain import leasing
from app.domain.subscription_models import MAX_BACKOFF_MS

NOW = datetime(2025, 1, 1, tzinfo=UTC)


class Sub(NamedTuple):
    ack_timeout_ms: int = 30_000
    max_redeliveries: int = 16
    backoff_min_ms: int = 1000
    backoff_max_ms: int = 60_000


@pytest.mark.parametrize(("redelivery_count", "ms"), [
    (0, 1000), (1, 2000), (2, 4000), (5, 32_000), (6, 60_000), (7, 60_000), (61, 60_000),
    (62, 60_000), (10_000, 60_000),
])
def test_backoff_doubles_up_to_its_maximum(redelivery_count: int, ms: int) -> None:
    assert leasing.backoff_ms(1000, 60_000, redelivery_count) == ms
    assert leasing.backoff(Sub(), redelivery_count) == timedelta(milliseconds=ms)


def test_a_zero_minimum_is_no_backoff() -> None:
    assert [leasing.backoff_ms(0, 60_000, r) for r in (0, 1, 62, 1000)] == [0, 0, 0, 0]


def test_equal_bounds_are_a_constant_backoff() -> None:
    assert {leasing.backoff_ms(500, 500, r) for r in range(100)} == {500}


@pytest.mark.parametrize("min_ms", [0, 1, 999, 1000, 4096, MAX_BACKOFF_MS])
@pytest.mark.parametrize("max_ms", [0, 1, 1000, 60_000, MAX_BACKOFF_MS])
def test_the_first_backoff_is_what_the_one_statement_receive_computes(
        min_ms: int, max_ms: int) -> None:
    # app.storage.subscription_leases.first_deliveries: LEAST(backoff_min_ms, backoff_max_ms)
    assert leasing.backoff_ms(min_ms, max_ms, 0) == min(min_ms, max_ms)


def test_the_backoff_never_passes_its_maximum_nor_shrinks() -> None:
    waits = [leasing.backoff_ms(3, 3_600_000, r) for r in range(100)]
    assert waits == sorted(waits)
    assert max(waits) == 3_600_000


def test_a_lease_runs_for_the_ack_timeout_then_the_backoff() -> None:
    sub = Sub(ack_timeout_ms=5000, backoff_min_ms=100, backoff_max_ms=1000)
    until = leasing.lease_until(sub, NOW)
    assert until == NOW + timedelta(seconds=5)
    assert leasing.redeliverable_at(sub, until, 0) == until + timedelta(milliseconds=100)
    assert leasing.redeliverable_at(sub, until, 3) == until + timedelta(milliseconds=800)
    assert leasing.redeliverable_at(sub, until, 4) == until + timedelta(milliseconds=1000)


def test_redelivery_counts_and_the_dead_letter_threshold() -> None:
    assert leasing.FIRST_DELIVERY == 1
    assert [leasing.redelivery_count(d) for d in (1, 2, 17)] == [0, 1, 16]
    # delivered 1 + max_redeliveries times: the next time it is due, it is dead-lettered
    assert leasing.dead_letter_from(Sub(max_redeliveries=16)) == 17
    assert leasing.dead_letter_from(Sub(max_redeliveries=0)) == 1
