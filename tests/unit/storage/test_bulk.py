"""JsonRows: rows encoded ahead and joined are the rows of one parameter, their binary
columns one array each beside it. plain_rows: rows copied to named tuples."""

from __future__ import annotations

import orjson
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer
from sqlalchemy import Column, Integer, LargeBinary, Text, create_engine, literal, select

from app.storage.bulk import JsonRows, plain_rows

ROWS = JsonRows("r", [Column("n", Integer), Column("s", Text), Column("b", LargeBinary)])


def test_sends_encoded_apart_join_into_the_rows_of_one_parameter() -> None:
    batches = [([{"n": 1, "s": "é"}], [b"\x00\xff"]), ([], []),
               ([{"n": 2}, {"n": 3, "s": None}], [b"", b"x"])]
    joined = ROWS.joined(ROWS.encode(rows, [bodies]) for rows, bodies in batches)
    together = ROWS.param([row for rows, _ in batches for row in rows],
                          [[b for _, bodies in batches for b in bodies]])
    assert orjson.loads(joined["r"].obj) == orjson.loads(together["r"].obj) == [
        {"n": 1, "s": "é"}, {"n": 2}, {"n": 3, "s": None}]
    assert joined["r_b"] == together["r_b"] == [b"\x00\xff", b"", b"x"]
    empty = ROWS.joined([])
    assert orjson.loads(empty["r"].obj) == [] and empty["r_b"] == []


def test_binary_columns_are_sent_in_binary() -> None:
    """psycopg dumps the array of a binary column in binary: the bytes as they are, not
    hex text that the server decodes."""
    values = ROWS.param([{"n": 1}], [[b"\x00\xff"]])["r_b"]
    assert Transformer().get_dumper(values, PyFormat.AUTO).format is pq.Format.BINARY


def test_one_encoded_send_is_passed_as_it_is_not_copied() -> None:
    """A large send's rows are most of its size: the parameter holds them, not a copy."""
    encoded = ROWS.encode([{"n": 1}], [[b"x" * 1000]])
    assert ROWS.joined([encoded, ROWS.encode([], [[]])])["r"].obj is encoded.json


def test_plain_rows_read_as_the_rows_they_copy() -> None:
    """Named tuples of a result's rows: the same values by name and by place, whatever
    the columns are called (here after tuple methods, and a label SQLAlchemy made)."""
    engine = create_engine("sqlite://")
    stmt = select(literal(1).label("count"), literal("x").label("index"),
                  literal(None).label("keys"), literal(2) + 3)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
        plain = plain_rows(conn.execute(stmt))
    assert plain == [tuple(r) for r in rows] == [(1, "x", None, 5)]
    assert (plain[0].count, plain[0].index, plain[0].keys) == (rows[0].count, "x", None)
