"""A message's JSON shapes (app/domain/message_shapes.py): each shaper returns its
TypedDict, the same class the OpenAPI document's schema is made from, and what it builds
validates against that schema; no other module shapes a message's body again."""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_type_hints

import orjson
import pytest
from jsonschema import Draft202012Validator, ValidationError
from pydantic import TypeAdapter

from app.api import schemas
from app.api.routes import ROUTES
from app.domain import message_shapes as shapes
from app.vocabulary import State

ROOT = Path(__file__).resolve().parents[3]
HOME = ROOT / "app" / "domain" / "message_shapes.py"
_T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
# a stored body made JSON by hand (text decoded, binary base64): what ``body_fields`` is for
_BODY_BY_HAND = re.compile(r"""\bb64encode\(\s*[\w.]*body\b|\bbody\)?\.decode\(""")


def body_shapings(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if _BODY_BY_HAND.search(line)]


def _row(*, text: bool = True, offset: int | None = 7, state: State = State.COMMITTED) -> Any:
    return SimpleNamespace(
        message_id="0F8E3B0C9D2A4C6E8F1A2B3C4D5E6F70", transaction_id="order-1",
        producer_group="orders-svc", topic="orders", state=state, tag="created",
        ordering_key="order-1",
        keys='["k1"]', properties='{"region":"eu"}',
        body=b"hello" if text else b"\x00\xff", body_is_text=text,
        queue_offset=offset, created_at=_T, committed_at=_T if offset is not None else None)


def _valid(tp: Any, value: Any) -> Any:
    """``value`` as a client reads it (written as JSON), validated by ``tp``'s JSON Schema
    (the document's, ``oneOf`` included)."""
    read = orjson.loads(orjson.dumps(value))
    Draft202012Validator(TypeAdapter(tp).json_schema(mode="serialization")).validate(read)
    return read


@pytest.mark.parametrize("text", [True, False])
def test_each_shape_validates_against_its_type(text: bool) -> None:
    committed, prepared = _row(text=text), _row(text=text, offset=None, state=State.PREPARED)
    _valid(shapes.CommittedMessage, shapes.as_read(committed))
    assert _valid(shapes.ReceivedMessage,
                  shapes.as_received(committed, 2))["redelivery_count"] == 2
    assert "offset" in _valid(shapes.Message, shapes.by_id(committed))
    assert "offset" not in _valid(shapes.Message, shapes.by_id(prepared))
    assert _valid(shapes.TransactionMessage, shapes.in_transaction(committed, 7))["offset"] == 7
    assert "offset" not in _valid(shapes.TransactionMessage, shapes.in_transaction(prepared, None))
    body = "body" if text else "body_base64"
    assert body in _valid(shapes.CheckMessage, shapes.in_check(committed))
    omitted = _valid(shapes.CheckMessage, shapes.in_check(committed, with_body=False))
    assert (omitted["body_omitted"], omitted["body_bytes"], body in omitted) == (True, len(
        committed.body), False)


def test_a_shape_refuses_what_its_type_does_not_describe() -> None:
    """The validation above can fail: a field the type lacks, or no body, is refused."""
    with pytest.raises(ValidationError):
        _valid(shapes.CommittedMessage, {**shapes.as_read(_row()), "state": "COMMITTED"})
    no_body = {k: v for k, v in shapes.in_check(_row()).items() if k != "body"}
    with pytest.raises(ValidationError):
        _valid(shapes.CheckMessage, no_body)


def test_the_hot_read_writes_stored_json_as_it_is() -> None:
    page = orjson.loads(orjson.dumps(shapes.as_read(_row())))
    assert (page["keys"], page["properties"]) == (["k1"], {"region": "eu"})


def test_the_answers_schemas_are_the_shapers_types() -> None:
    """The document's message schemas are the classes the shapers are typed to return."""
    returned = {getattr(shapes, inspect.signature(fn).return_annotation) for fn in (
        shapes.as_read, shapes.as_received, shapes.by_id, shapes.in_transaction,
        shapes.in_check)}
    assert returned == {shapes.CommittedMessage, shapes.ReceivedMessage, shapes.Message,
                        shapes.TransactionMessage, shapes.CheckMessage}
    hints = {name: get_type_hints(getattr(schemas, name)) for name in (
        "TopicPage", "Received", "Transaction", "CheckRequest")}
    assert hints["TopicPage"]["messages"] == list[shapes.CommittedMessage]
    assert hints["Transaction"]["messages"] == list[shapes.TransactionMessage]
    assert hints["CheckRequest"]["messages"] == list[shapes.CheckMessage]
    assert get_type_hints(schemas.Received)["messages"] == list[shapes.ReceivedMessage]
    by_id = next(r for r in ROUTES if r.name == "getMessage")
    assert by_id.answers["200"] is shapes.Message


def test_no_module_but_the_shapes_writes_a_body_as_json() -> None:
    offenders = {str(path.relative_to(ROOT)): found
                 for package in ("app", "checker")
                 for path in sorted((ROOT / package).rglob("*.py"))
                 if path != HOME and (found := body_shapings(path.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize("line", [
    '    return {"body": bytes(body).decode()}',
    "    body = {'body_base64': base64.b64encode(row.body).decode()}",
    '        "offset": m.offset, **({"body": m.body.decode()} if m.body_is_text else {})',
    '    text = bytes(row.body).decode("utf-8")',
])
def test_the_rule_finds_a_planted_body(line: str) -> None:
    assert body_shapings(f"def f(row):\n{line}\n") == [line.strip()]
