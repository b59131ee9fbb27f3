"""The committed view read from Python: what the streaming source's tasks run.

A Python data source's task yields its rows to Spark itself, so the JDBC source of
``txmsg ingest`` cannot serve it: each task reads its exact offset ranges of
``committed_messages`` through SQLAlchemy (a server-side cursor on PostgreSQL) and yields
Arrow record batches already in ``OUTPUT_SCHEMA``'s columns, the same values
``job.transform`` gives (keys and properties parsed from their JSON, ``commit_date`` the
UTC day of the commit). Executors therefore need txmsg's Python packages, as the driver does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Connection, Engine, LargeBinary, column, select, table

from app.config import Settings
from app.domain.lake import UTCDateTime, make_engine
from spark_outbox.errors import IngestError
from spark_outbox.plan import TopicRange

if TYPE_CHECKING:
    import pyarrow as pa

# rows per Arrow batch (and per fetch from the server-side cursor)
BATCH_ROWS = 10_000

committed_messages = table(
    "committed_messages", column("topic"), column("queue_offset"), column("message_id"),
    column("transaction_id"), column("producer_group"), column("keys"), column("tag"),
    column("ordering_key"), column("properties"), column("body"), column("body_bytes", LargeBinary),
    column("created_at", UTCDateTime), column("committed_at", UTCDateTime))

_c = committed_messages.c
# in OUTPUT_SCHEMA's order
_SELECTED = select(
    _c.queue_offset, _c.message_id, _c.transaction_id, _c.producer_group, _c.topic, _c["keys"],
    _c.tag, _c.ordering_key, _c.properties, _c.body,
    _c.body_bytes, _c.created_at, _c.committed_at)


def engine_for(url: str) -> Engine:
    """An engine on the database at ``url``, raising the driver's own errors."""
    return make_engine(Settings(database_url=url, read_database_url=None), pool=False,
                       domain_errors=False)


def read_ranges(url: str, ranges: Sequence[TopicRange],
                schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every committed message of ``ranges`` as ``schema`` batches; each range must be
    complete (retention deleting offsets while they are read fails the task)."""
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            for r in ranges:
                yield from _read_range(conn, r, schema)
    finally:
        engine.dispose()


def _read_range(conn: Connection, r: TopicRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    stmt = _SELECTED.where(_c.topic == r.topic, _c.queue_offset >= r.start,
                           _c.queue_offset < r.end)
    result = conn.execution_options(stream_results=True, yield_per=BATCH_ROWS).execute(stmt)
    found = 0
    for rows in result.partitions():
        found += len(rows)
        yield to_batch(rows, schema)
    if found != r.rows:
        raise IngestError(
            f"topic {r.topic}: offsets [{r.start}, {r.end}) should give {r.rows} rows, "
            f"the committed view gave {found} (retention deleted some while they were read? "
            "the restarted query reports them as a gap)")


def to_batch(rows: Sequence[Any], schema: pa.Schema) -> pa.RecordBatch:
    """Rows of the committed view (``_SELECTED``'s columns) as one batch of ``schema``."""
    import pyarrow as pa

    columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] if rows else \
        [[] for _ in range(13)]
    (offsets, message_ids, transaction_ids, groups, topics, keys, tags, ordering_keys,
     properties, bodies, body_bytes, created, committed) = columns
    values = [offsets, message_ids, transaction_ids, groups, topics,
              [_json(k, list) for k in keys], tags, ordering_keys,
              [_json(p, dict) for p in properties], bodies,
              [bytes(b) if b is not None else None for b in body_bytes],
              created, committed, [_utc_day(t) for t in committed]]
    arrays = [pa.array(v, type=f.type) for v, f in zip(values, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _json(text: str, shape: type) -> Any:
    # the view holds the JSON txmsg wrote: anything else stops the read, as in transform
    value = orjson.loads(text)
    if not isinstance(value, shape):
        raise IngestError(f"expected a JSON {shape.__name__}, the committed view has {text!r}")
    return value


def _utc_day(ts: datetime | None) -> Any:
    return ts.date() if ts is not None else None  # UTCDateTime: an aware UTC datetime
