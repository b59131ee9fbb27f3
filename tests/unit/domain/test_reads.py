"""How reads shape a committed message (``app.domain.message_shapes``), and who may read
a message by its id."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from app.domain.access import Principal
from app.domain.message_shapes import as_read, body_fields
from app.domain.reads import check_may_read, list_transactions
from app.errors import Forbidden, InvalidRequest, NotFound
from app.vocabulary import State

AT = datetime(2024, 5, 1, tzinfo=UTC)


def test_a_text_body_is_text_and_a_binary_one_base64() -> None:
    assert body_fields(b"caf\xc3\xa9", True) == {"body": "café"}
    assert body_fields(b"\x00\xff", False) == {"body_base64": "AP8="}
    as_a_driver_may_give_it: Any = memoryview(b"hi")
    assert body_fields(as_a_driver_may_give_it, True) == {"body": "hi"}


def stored(**overrides: Any) -> Any:
    return SimpleNamespace(**{
        "queue_offset": 7, "message_id": "M" * 32, "transaction_id": "t-1",
        "producer_group": "shop", "keys": '["k1","k2"]', "tag": None, "ordering_key": "o",
        "properties": '{"a":"1"}', "body": b"\x01", "body_is_text": False,
        "created_at": AT, "committed_at": AT, **overrides})


def test_a_read_message_writes_its_stored_json_as_it_is() -> None:
    shown = as_read(stored())
    assert orjson.loads(orjson.dumps(shown)) == {
        "offset": 7, "message_id": "M" * 32, "transaction_id": "t-1",
        "producer_group": "shop", "keys": ["k1", "k2"], "tag": None, "ordering_key": "o",
        "properties": {"a": "1"}, "body_base64": "AQ==",
        "created_at": "2024-05-01T00:00:00+00:00", "committed_at": "2024-05-01T00:00:00+00:00"}
    assert isinstance(shown["properties"], orjson.Fragment)  # not parsed and dumped again


def message(state: State) -> dict[str, Any]:
    return {"producer_group": "shop", "topic": "orders", "state": state}


def principal(*scopes: str) -> Principal:
    return Principal("0123456789abcdef", frozenset(scopes))


@pytest.mark.parametrize("state", list(State))
def test_its_producers_see_a_message_in_every_state(state: State) -> None:
    check_may_read(principal("produce:shop"), message(state), "m")
    check_may_read(principal("produce:*"), message(state), "m")


def test_its_consumers_see_a_message_once_committed() -> None:
    check_may_read(principal("consume:orders"), message(State.COMMITTED), "m")


@pytest.mark.parametrize("state", [State.PREPARED, State.ROLLED_BACK, State.DISCARDED])
def test_to_anyone_else_an_uncommitted_message_is_not_there(state: State) -> None:
    for who in (principal("consume:orders"), principal("produce:other")):
        with pytest.raises(NotFound) as caught:
            check_may_read(who, message(state), "m-1")
        assert caught.value.code == "message_not_found"


def test_a_committed_message_others_may_not_read_is_forbidden_without_naming_it() -> None:
    with pytest.raises(Forbidden) as caught:
        check_may_read(principal("consume:other", "metrics"), message(State.COMMITTED), "m-1")
    assert "orders" not in caught.value.detail and "shop" not in caught.value.detail


def test_a_transaction_listing_refuses_an_unknown_state_before_reading() -> None:
    with pytest.raises(InvalidRequest) as caught:
        list_transactions(None, "shop", "committed", 0, 10)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_query_parameter"
    assert caught.value.extra == {"parameter": "state"}
