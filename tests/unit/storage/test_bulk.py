"""JsonRows: rows encoded ahead and joined are the rows of one parameter."""

from __future__ import annotations

import orjson
from sqlalchemy import Column, Integer, LargeBinary, Text

from app.storage.bulk import JsonRows

ROWS = JsonRows("r", [Column("n", Integer), Column("s", Text), Column("b", LargeBinary)])


def test_sends_encoded_apart_join_into_the_rows_of_one_parameter() -> None:
    batches = [[{"n": 1, "s": "é", "b": b"\x00\xff"}], [], [{"n": 2}, {"n": 3, "s": None}]]
    joined = ROWS.joined(ROWS.encode(rows) for rows in batches)["r"].obj
    together = ROWS.param([row for rows in batches for row in rows])["r"].obj
    assert orjson.loads(joined) == orjson.loads(together) == [
        {"n": 1, "s": "é", "b": "AP8="}, {"n": 2}, {"n": 3, "s": None}]
    assert orjson.loads(ROWS.joined([])["r"].obj) == []


def test_one_encoded_send_is_passed_as_it_is_not_copied() -> None:
    """A large send's rows are most of its size: the parameter holds them, not a copy."""
    encoded = ROWS.encode([{"n": 1, "b": b"x" * 1000}])
    assert ROWS.joined([encoded, ROWS.encode([])])["r"].obj is encoded
