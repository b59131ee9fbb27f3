"""SQL of the committed log (message_log): committed messages as a read shows them (one
query, ``as_read``), a message by its id, and the appends that take offsets from a
topic's counter (topic_offset) outside a finish batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, or_, select, true

from app.storage.bulk import among, dialect_insert, insert_rows, plain_rows
from app.storage.schema import (
    AnyRow,
    half_message,
    logged_message_id,
    message_log,
    own_place,
    topic_offset,
    topic_retention,
    txn,
)
from app.storage.transactions import BODILESS_COLUMNS, MESSAGE_COLUMNS

BODY = half_message.c.body


def body_size() -> Any:
    """A half message's body size (``length`` of a PostgreSQL bytea or a SQLite blob reads
    its header, not its bytes)."""
    return func.length(half_message.c.body).label("size")


def body_preview(n: int) -> Any:
    """A half message's first ``n`` bytes."""
    return func.substr(half_message.c.body, 1, n).label("preview")


def as_read_columns(m: Any = message_log, h: Any = half_message, t: Any = txn
                    ) -> tuple[Any, ...]:
    """The columns of a committed message as a read shows them, over the log row ``m``,
    its half message ``h`` and its transaction ``t`` (aliases, for SQL written as text):
    the one list of them, which ``as_read`` selects and ``AS_READ_SQL`` spells."""
    return (m.c.queue_offset, m.c.committed_at, m.c.half_message_id,
            func.coalesce(m.c.properties, h.c.properties).label("properties"),
            func.coalesce(m.c.message_id, h.c.message_id).label("message_id"),
            h.c["keys"], h.c.tag, h.c.ordering_key, h.c.body_is_text, h.c.created_at,
            t.c.transaction_id, t.c.producer_group)


def _as_text(columns: tuple[Any, ...]) -> str:
    return str(select(*columns)).removeprefix("SELECT ").split("\nFROM ", 1)[0].rstrip()


# ``as_read_columns`` as SQL text over the aliases m, h and t (message_log, half_message,
# txn), and the names it gives them, for a statement written as text (PostgreSQL's
# one-statement receive)
AS_READ_SQL = _as_text(as_read_columns(message_log.alias("m"), half_message.alias("h"),
                                       txn.alias("t")))
AS_READ_NAMES = tuple(c.name for c in as_read_columns())


def as_read(*body: Any) -> Select[Any]:
    """Committed messages as a read shows them, the one query of them (a topic's page, a
    receive, a dead-letter copy's source, the dashboard's page): ``as_read_columns``
    (offset, commit time, half message id, properties and id (a dead-letter copy's own),
    keys, tag, ordering key, ``body_is_text``, creation time, transaction id and producer group), and
    ``body``: the columns the caller wants of the body (``BODY``, or ``body_size()`` and
    ``body_preview(n)``)."""
    return (select(*as_read_columns(), *body)
            .select_from(message_log
                         .join(half_message, half_message.c.id == message_log.c.half_message_id)
                         .join(txn, txn.c.id == half_message.c.txn_id)))


def _page() -> Select[Any]:
    order = message_log.c.queue_offset
    window = (as_read(BODY)
              .add_columns(func.sum(body_size()).over(order_by=order).label("running"),
                           func.row_number().over(order_by=order).label("n"))
              .where(message_log.c.topic == bindparam("topic"),
                     message_log.c.queue_offset >= bindparam("from_offset"),
                     message_log.c.queue_offset < bindparam("end"))
              .subquery("window"))
    # at most max_bytes, but at least one (``app.domain.limits.within_budget``)
    page = (select(*[c for c in window.c if c.name not in ("running", "n")])
            .where(or_(window.c.running <= bindparam("max_bytes"), window.c.n == 1))
            .subquery("page"))
    retained = select(func.coalesce(
        select(topic_retention.c.first_offset)
        .where(topic_retention.c.topic == bindparam("topic")).scalar_subquery(), 0)
        .label("first_offset")).subquery("retained")
    return (select(retained.c.first_offset, *page.c)
            .select_from(retained.outerjoin(page, true()))
            .order_by(page.c.queue_offset))


# Built once: building it costs more CPU than running it on a short page (its compiled
# form is cached either way; the construction is not).
_PAGE = _page()


def read_page(conn: Connection, topic: str, from_offset: int, end: int,
              max_bytes: int) -> tuple[int, list[AnyRow]]:
    """The lowest offset of ``topic`` still retained, and the committed messages at offsets
    ``from_offset`` up to ``end`` (excluded), in offset order (``as_read``), but at most
    ``max_bytes`` of bodies and never fewer than one: one statement, so that a lone read
    is one round trip (the retained range's one row is joined to the page, and stands
    alone when the page is empty).

    A topic's offsets are dense (each commit takes the next ones from its counter), so the
    range holds ``end - from_offset`` messages at most; bounding the range, not only the
    count, keeps a read at its page's rows whatever PostgreSQL's statistics say (without
    them, a ``>= from_offset ... LIMIT`` read the whole topic). The page is cut in SQL, on
    body sizes summed in offset order, so the bodies a reader receives, and that this
    process holds, stay within the budget.
    """
    rows = plain_rows(conn.execute(_PAGE, {"topic": topic, "from_offset": from_offset,
                                           "end": end, "max_bytes": max_bytes}))
    return rows[0].first_offset, [r for r in rows if r.queue_offset is not None]


def read_at(conn: Connection, topic: str, offsets: Sequence[int]) -> list[AnyRow]:
    """The committed messages at these offsets (``as_read``), in offset order. The list is
    also bounded by its first and last offsets: a range the planner takes for the primary
    key's index, where the list alone let it scan the topic's rows (a fresh backlog
    without statistics)."""
    if not offsets:
        return []
    wanted = sorted(offsets)
    return plain_rows(conn.execute(
        as_read(BODY)
        .where(message_log.c.topic == topic,
               message_log.c.queue_offset.between(wanted[0], wanted[-1]),
               among(conn, message_log.c.queue_offset, wanted))
        .order_by(message_log.c.queue_offset)))


def browse(conn: Connection, topic: str, from_offset: int, limit: int,
           preview_bytes: int) -> list[AnyRow]:
    """Committed messages from ``from_offset`` in offset order (``as_read``), each with its
    body's size and first ``preview_bytes`` bytes (never the whole body)."""
    return list(conn.execute(
        as_read(body_size(), body_preview(preview_bytes))
        .where(message_log.c.topic == topic, message_log.c.queue_offset >= from_offset)
        .order_by(message_log.c.queue_offset).limit(limit)))


def append(conn: Connection, topic: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """Append committed log rows (half_message_id, message_id, properties, committed_at) to
    ``topic`` at the next offsets, taken from its counter (locked until this transaction
    ends, as a commit does); the first offset taken."""
    n = len(rows)
    counter = dialect_insert(conn, topic_offset).values(topic=topic, next_offset=n)
    taken = counter.on_conflict_do_update(
        index_elements=[topic_offset.c.topic],
        set_={"next_offset": topic_offset.c.next_offset + counter.excluded.next_offset},
    ).returning(topic_offset.c.next_offset)
    first = int(conn.execute(taken).scalar_one()) - n
    insert_rows(conn, message_log, [{"topic": topic, "queue_offset": first + i,
                                     "deliver_at": None, **r} for i, r in enumerate(rows)])
    return first


def get_message(conn: Connection, message_id: str) -> AnyRow | None:
    """A message by its id: a half message (with its place in the log once committed), or
    a dead-letter copy (``dead_letter_copy``)."""
    stmt = (
        select(*MESSAGE_COLUMNS, txn.c.transaction_id, txn.c.producer_group,
               txn.c.state, message_log.c.queue_offset, message_log.c.committed_at)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .outerjoin(message_log, own_place())
        .where(half_message.c.message_id == message_id)
    )
    return conn.execute(stmt).first() or dead_letter_copy(conn, message_id, MESSAGE_COLUMNS)


def dead_letter_copy(conn: Connection, message_id: str, columns: Sequence[Any]
                     ) -> AnyRow | None:
    """The dead-letter copy with this id, in ``columns`` of its half message but for its
    own id, topic and properties, with its transaction and its place in the log."""
    own = {"message_id": logged_message_id(), "topic": message_log.c.topic,
           "properties": func.coalesce(message_log.c.properties, half_message.c.properties)
           .label("properties")}
    stmt = (
        select(*[own.get(c.name, c) for c in columns], txn.c.transaction_id,
               txn.c.producer_group, txn.c.state, message_log.c.queue_offset,
               message_log.c.committed_at)
        .select_from(message_log)
        .join(half_message, half_message.c.id == message_log.c.half_message_id)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .where(message_log.c.message_id == message_id)
    )
    return conn.execute(stmt).first()


_COMMITTED_AT = select(message_log.c.committed_at).where(
    message_log.c.topic == bindparam("topic"), message_log.c.queue_offset == bindparam("at"))


def first_offset_since(conn: Connection, topic: str, lo: int, hi: int, since: datetime) -> int:
    """The lowest offset in ``[lo, hi)`` committed at or after ``since`` (``hi`` if none):
    a bisection of primary-key lookups, about log2(hi - lo) of them. Offsets are handed out
    in commit order, so commit times rise with them (within the clock skew of writers in
    different processes, which is what the answer may be off by)."""
    while lo < hi:
        mid = (lo + hi) // 2
        at = conn.execute(_COMMITTED_AT, {"topic": topic, "at": mid}).scalar()
        if at is None or at < since:  # None: deleted by retention meanwhile
            lo = mid + 1
        else:
            hi = mid
    return lo


def message_preview(conn: Connection, message_id: str, preview_bytes: int) -> AnyRow | None:
    """One message with its transaction, its size and first ``preview_bytes`` bytes, and
    its place in the log once committed (``queue_offset``, NULL before)."""
    preview = func.substr(half_message.c.body, 1, preview_bytes).label("preview")
    stmt = (
        select(*BODILESS_COLUMNS, txn.c.transaction_id, txn.c.producer_group, txn.c.state,
               preview, message_log.c.queue_offset, message_log.c.committed_at)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .outerjoin(message_log, own_place())
        .where(half_message.c.message_id == message_id)
    )
    return conn.execute(stmt).first() or dead_letter_copy(conn, message_id,
                                                           (*BODILESS_COLUMNS, preview))


def discard_entries(conn: Connection, message_ids: Sequence[str]) -> list[AnyRow]:
    """Where these messages were appended to the discard topic (offsets, properties)."""
    if not message_ids:
        return []
    stmt = (select(message_log.c.topic, message_log.c.queue_offset, message_log.c.properties,
                   message_log.c.committed_at, half_message.c.message_id)
            .join(half_message, half_message.c.id == message_log.c.half_message_id)
            .where(half_message.c.message_id.in_(sorted(message_ids)),
                   message_log.c.topic != half_message.c.topic)
            .order_by(message_log.c.queue_offset))
    return list(conn.execute(stmt))
