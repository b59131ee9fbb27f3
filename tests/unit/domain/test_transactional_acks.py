"""Which offsets a transaction may hold as its acks, and the refusal of the others."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.domain.transactional_acks import _refusal


def offset_row(deliveries: int, held_by: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(deliveries=deliveries, held_by=held_by)


@pytest.mark.parametrize("row", [offset_row(1), offset_row(5), offset_row(1, held_by=7)])
def test_a_delivered_offset_free_or_held_by_the_same_transaction_may_be_held(
        row: SimpleNamespace) -> None:
    assert _refusal(row, 7, "orders", "billing", 3) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("row", [None, offset_row(0)])
def test_an_offset_acknowledged_or_never_delivered_is_not_pending(
        row: SimpleNamespace | None) -> None:
    refusal = _refusal(row, 7, "orders", "billing", 3)  # type: ignore[arg-type]
    assert refusal is not None
    assert (refusal.status, refusal.code) == (409, "ack_not_pending")
    assert refusal.extra == {"topic": "orders", "subscription": "billing", "offset": 3}


def test_an_offset_another_transaction_holds_is_a_conflict() -> None:
    refusal = _refusal(offset_row(1, held_by=8), 7, "orders", "billing", 3)  # type: ignore[arg-type]
    assert refusal is not None
    assert (refusal.status, refusal.code) == (409, "ack_conflict")
    assert refusal.extra == {"topic": "orders", "subscription": "billing", "offset": 3}
    assert "another unresolved transaction" in refusal.detail


def test_never_delivered_outweighs_held() -> None:
    refusal = _refusal(offset_row(0, held_by=8), 7, "orders", "billing", 3)  # type: ignore[arg-type]
    assert refusal is not None and refusal.code == "ack_not_pending"
