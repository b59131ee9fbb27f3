"""How batches of rows travel to the database, shared by the SQL modules of the half table.

On PostgreSQL, lookups of many rows take arrays (``= ANY(:ids)``, a join on
``unnest(:groups, :ids)``) rather than IN lists, and inserts of many rows take one JSON
parameter (``JsonRows``): one statement text whatever the batch size, so it is parsed and
planned once (psycopg prepares it), and a join on the unique index instead of an OR of
index scans. SQLite has no arrays and keeps IN lists and executemany.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson
import psycopg
from psycopg.types.array import ListBinaryDumper
from psycopg.types.json import Json
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    LargeBinary,
    Result,
    String,
    Table,
    Text,
    TypeDecorator,
    any_,
    bindparam,
    cast,
    column,
    func,
    insert,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import NullType

from app.storage.dialects import dialect_of
from app.storage.schema import AnySelect, half_message

Key = tuple[str, str]  # (producer_group, transaction_id)

# (producer_group, transaction_id) pairs as two arrays, joined as a table (g, x)
KEYS = func.unnest(bindparam("k_groups", type_=postgresql.ARRAY(String)),
                   bindparam("k_ids", type_=postgresql.ARRAY(String))
                   ).table_valued("g", "x").render_derived()
TXN_IDS = bindparam("txn_ids", type_=postgresql.ARRAY(BigInteger))


def dialect_insert(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT of the connection's dialect, one that takes ``ON CONFLICT`` clauses."""
    return dialect_of(conn).insert(table)


def among(conn: Connection, col: Any, ids: Sequence[int]) -> Any:
    """``col IN ids``; with arrays ``col = ANY(:array)`` (``Dialect.among``)."""
    return dialect_of(conn).among(col, ids)


def plain_rows(result: Result[Any]) -> list[Any]:
    """A result's rows as named tuples, for a result whose every row is read column by
    column (a page of messages, a receive): a SQLAlchemy ``Row`` reads a column by name
    through ``__getattr__``, after the normal lookup failed (about 0.3 µs a column), a
    named tuple from a slot (0.02 µs)."""
    return list(map(_row_type(tuple(result.keys()))._make, result.all()))  # one fetchall


@functools.lru_cache(maxsize=64)
def _row_type(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("PlainRow", names, rename=True)


def key_params(keys: Sequence[Key]) -> dict[str, list[str]]:
    """The parameters of ``KEYS``."""
    return {"k_groups": [g for g, _ in keys], "k_ids": [t for _, t in keys]}


class Encoded(NamedTuple):
    """Rows of a ``JsonRows`` encoded ahead (``encode``), to be passed with others
    (``joined``)."""

    json: bytes  # a JSON array of the rows
    beside: list[list[Any]]  # a list per binary column, a value per row


class JsonRows:
    """A batch of rows passed to PostgreSQL as one JSON parameter, read back with
    ``json_to_recordset``: one statement text (parsed and planned once) serves every batch
    size, and the batch is encoded by orjson in one call instead of one parameter per
    value.

    The rows go to orjson as they are: ``json_to_recordset`` takes the columns it names
    and ignores other keys, so no row is copied to fit. orjson's bytes go to psycopg as
    they are (a ``Json`` whose dump is those bytes), not decoded to a str that psycopg
    encodes again.

    Binary columns (bodies) travel beside the JSON, each as one array of the values'
    bytes that psycopg sends in binary, zipped back to the rows by position (``ROWS
    FROM``): inside the JSON a body would be parsed twice by the server (the cast to
    json, then ``json_to_recordset``) and encoded (base64) on the way."""

    def __init__(self, alias: str, columns: Sequence[Column[Any]]) -> None:
        self.alias = alias
        self._binary = [c for c in columns if isinstance(c.type, LargeBinary)]
        record = [column(c.name, c.type) for c in columns if c not in self._binary]
        rows = cast(bindparam(alias, type_=Text), JSON)
        if not self._binary:
            self.table = func.json_to_recordset(rows).table_valued(*record) \
                .render_derived(name=alias, with_types=True)
            return
        arrays = [cast(bindparam(f"{alias}_{c.name}", type_=_AsIs()), postgresql.ARRAY(c.type))
                  for c in self._binary]
        self.table = _RowsFrom(_record_definition(record), rows, *arrays).table_valued(
            *(c.name for c in record), *(c.name for c in self._binary)).render_derived(name=alias)

    def col(self, name: str) -> Any:
        return self.table.c[name]

    def param(self, rows: Iterable[Mapping[str, Any]],
              beside: Sequence[list[Any]] = ()) -> dict[str, Any]:
        """The parameters of these rows; ``beside``: a list per binary column."""
        return self.joined([self.encode(rows if isinstance(rows, list) else list(rows),
                                        beside)])

    def encode(self, rows: Sequence[Mapping[str, Any]], beside: Sequence[list[Any]] = ()
               ) -> Encoded:
        """Rows (without their binary columns) and their binary columns' values, encoded
        ahead."""
        assert len(beside) == len(self._binary)
        return Encoded(orjson.dumps(rows), list(beside))

    def joined(self, parts: Iterable[Encoded]) -> dict[str, Any]:
        """The parameters of the rows of several ``encode`` results, in order: one of them
        passed as it is, several copied once into one array (a send's rows can be most of
        its size: no slice of them is copied on the way)."""
        parts = [p for p in parts if len(p.json) > 2]  # each a JSON array, "[]" if empty
        if len(parts) == 1:
            rows = parts[0].json
        else:
            pieces: list[bytes | memoryview] = [b"["]
            for part in parts:
                pieces += (b"," if len(pieces) > 1 else b"", memoryview(part.json)[1:-1])
            pieces.append(b"]")
            rows = b"".join(pieces)
        params: dict[str, Any] = {self.alias: Json(rows, dumps=_as_is)}
        for i, c in enumerate(self._binary):
            values = params[f"{self.alias}_{c.name}"] = BinaryArray()
            for part in parts:
                values += part.beside[i]
        return params


class BinaryArray(list[Any]):
    """A list that psycopg sends as an array in binary (registered below)."""


psycopg.adapters.register_dumper(BinaryArray, ListBinaryDumper)


class _AsIs(TypeDecorator[Any]):
    """A parameter handed to psycopg as it is (SQLAlchemy's ARRAY would copy a
    ``BinaryArray`` into a plain list, which psycopg sends as text)."""

    impl = NullType
    cache_ok = True


class _RowsFrom(FunctionElement[Any]):
    """``ROWS FROM (json_to_recordset(rows) AS (record), unnest(array), ...)``: the JSON
    rows zipped with the arrays by position, as one table (PostgreSQL only)."""

    _traverse_internals = [*FunctionElement._traverse_internals,  # noqa: RUF012 (SQLAlchemy's)
                           ("record", InternalTraversal.dp_string)]
    inherit_cache = True

    def __init__(self, record: str, rows: Any, *arrays: Any) -> None:
        self.record = record
        super().__init__(rows, *arrays)


@compiles(_RowsFrom)
def _compile_rows_from(element: _RowsFrom, compiler: Any, **kw: Any) -> str:
    rows, *arrays = element.clauses
    return (f"ROWS FROM (json_to_recordset({compiler.process(rows, **kw)}) AS "
            f"({element.record}), "
            + ", ".join(f"unnest({compiler.process(a, **kw)})" for a in arrays) + ")")


def _record_definition(record: Sequence[Any]) -> str:
    types = postgresql.dialect().type_compiler_instance  # type: ignore[no-untyped-call]
    return ", ".join(f"{c.name} {types.process(c.type)}" for c in record)


def _as_is(data: bytes) -> bytes:
    return data


@functools.cache
def _insert_stmt(table: Table) -> Any:
    return insert(table)


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        conn.execute(_insert_stmt(table), list(rows))


def by_txn_ids(conn: Connection, stmt: AnySelect, ids: list[int]) -> Any:
    """Run ``stmt`` (selecting rows of half_message) for these transaction ids, in send order."""
    order = (half_message.c.txn_id, half_message.c.seq)
    if dialect_of(conn).arrays:
        return conn.execute(_pg_by_txn_ids(stmt, order), {"txn_ids": ids})
    return conn.execute(stmt.where(half_message.c.txn_id.in_(ids)).order_by(*order))


@functools.lru_cache(maxsize=32)
def _pg_by_txn_ids(stmt: AnySelect, order: tuple[Any, ...]) -> AnySelect:
    return stmt.where(half_message.c.txn_id == any_(TXN_IDS)).order_by(*order)

