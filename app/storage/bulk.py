"""How batches of rows travel to the database, shared by the SQL modules of the half table.

On PostgreSQL, lookups of many rows take arrays (``= ANY(:ids)``, a join on
``unnest(:groups, :ids)``) rather than IN lists, and inserts of many rows take one JSON
parameter (``JsonRows``): one statement text whatever the batch size, so it is parsed and
planned once (psycopg prepares it), and a join on the unique index instead of an OR of
index scans. SQLite has no arrays and keeps IN lists and executemany.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from psycopg.types.json import Json
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Engine,
    LargeBinary,
    String,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    column,
    func,
    insert,
    literal,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.schema import AnySelect, half_message

Key = tuple[str, str]  # (producer_group, transaction_id)

# (producer_group, transaction_id) pairs as two arrays, joined as a table (g, x)
KEYS = func.unnest(bindparam("k_groups", type_=postgresql.ARRAY(String)),
                   bindparam("k_ids", type_=postgresql.ARRAY(String))
                   ).table_valued("g", "x").render_derived()
TXN_IDS = bindparam("txn_ids", type_=postgresql.ARRAY(BigInteger))


def is_pg(conn: Connection | Engine) -> bool:
    return conn.dialect.name == "postgresql"


def dialect_insert(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT of the connection's dialect, one that takes ``ON CONFLICT`` clauses."""
    return postgresql.insert(table) if is_pg(conn) else sqlite.insert(table)


def among(conn: Connection, col: Any, ids: Sequence[int]) -> Any:
    """``col IN ids``; on PostgreSQL ``col = ANY(:array)``: one parameter, so one statement
    text whatever the number of ids (planned and prepared once, not rendered anew)."""
    if is_pg(conn):
        return col == any_(literal(list(ids), postgresql.ARRAY(BigInteger)))
    return col.in_(ids)


def key_params(keys: Sequence[Key]) -> dict[str, list[str]]:
    """The parameters of ``KEYS``."""
    return {"k_groups": [g for g, _ in keys], "k_ids": [t for _, t in keys]}


class JsonRows:
    """A batch of rows passed to PostgreSQL as one JSON parameter, read back with
    ``json_to_recordset``: one statement text (parsed and planned once) serves every batch
    size, and the batch is encoded by orjson in one call instead of one parameter per
    value. Binary columns travel as base64.

    The rows go to orjson as they are: ``json_to_recordset`` takes the columns it names
    and ignores other keys, so no row is copied to fit. orjson's bytes go to psycopg as
    they are (a ``Json`` whose dump is those bytes), not decoded to a str that psycopg
    encodes again: a batch of large bodies is held once, not three times."""

    def __init__(self, alias: str, columns: Sequence[Column[Any]]) -> None:
        self.alias = alias
        self._binary = {c.name for c in columns if isinstance(c.type, LargeBinary)}
        record = [column(c.name, Text if c.name in self._binary else c.type) for c in columns]
        self.table = func.json_to_recordset(cast(bindparam(alias, type_=Text), JSON)) \
            .table_valued(*record).render_derived(name=alias, with_types=True)

    def col(self, name: str) -> Any:
        c = self.table.c[name]
        return func.decode(c, "base64") if name in self._binary else c

    def param(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, Json]:
        return {self.alias: Json(self.encode(rows if isinstance(rows, list) else list(rows)),
                                 dumps=_as_is)}

    @staticmethod
    def encode(rows: Sequence[Mapping[str, Any]]) -> bytes:
        """Rows encoded ahead, to be passed with others by ``joined``."""
        return orjson.dumps(rows, default=_base64)

    def joined(self, parts: Iterable[bytes]) -> dict[str, Json]:
        """The parameter of the rows of several ``encode`` results, in order: one of them
        passed as it is, several copied once into one array (a send's rows can be most of
        its size: no slice of them is copied on the way)."""
        arrays = [p for p in parts if len(p) > 2]  # each a JSON array, "[]" if empty
        if len(arrays) == 1:
            return {self.alias: Json(arrays[0], dumps=_as_is)}
        pieces: list[bytes | memoryview] = [b"["]
        for array in arrays:
            pieces += (b"," if len(pieces) > 1 else b"", memoryview(array)[1:-1])
        pieces.append(b"]")
        return {self.alias: Json(b"".join(pieces), dumps=_as_is)}


def _as_is(data: bytes) -> bytes:
    return data


def _base64(value: Any) -> str:
    """orjson's fallback: bytes (a binary column's value) as base64."""
    if isinstance(value, bytes):
        return binascii.b2a_base64(value, newline=False).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@functools.cache
def _insert_stmt(table: Table) -> Any:
    return insert(table)


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        conn.execute(_insert_stmt(table), list(rows))


def by_txn_ids(conn: Connection, stmt: AnySelect, ids: list[int]) -> Any:
    """Run ``stmt`` (selecting rows of half_message) for these transaction ids, in send order."""
    order = (half_message.c.txn_id, half_message.c.seq)
    if is_pg(conn):
        return conn.execute(_pg_by_txn_ids(stmt, order), {"txn_ids": ids})
    return conn.execute(stmt.where(half_message.c.txn_id.in_(ids)).order_by(*order))


@functools.lru_cache(maxsize=32)
def _pg_by_txn_ids(stmt: AnySelect, order: tuple[Any, ...]) -> AnySelect:
    return stmt.where(half_message.c.txn_id == any_(TXN_IDS)).order_by(*order)

