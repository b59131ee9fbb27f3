"""What the operator dashboard shows: the overview, transactions with their history, a
topic's messages by offset, producer groups.

Reads only; operator commit, rollback and resume-check go through ``Lifecycle.finish``
like the API's. Each function takes the names the viewer may see (``only_groups``,
``only_topics``: None for all, as ``app.domain.access.names_allowed`` gives them); the
caller decides who may see what, as the API's routes do.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Connection, Engine

from app.domain import clock
from app.domain import subscriptions as subs
from app.domain.names import check_name, is_valid_transaction_id
from app.errors import InvalidRequest, NotFound
from app.problems import ProblemCode
from app.storage import checks, log
from app.storage import groups as group_store
from app.storage import topics as topic_store
from app.storage import transactions as txn_store
from app.storage.groups import check_urls
from app.storage.schema import AnyRow
from app.vocabulary import State

RECENT = timedelta(hours=1)
OVERVIEW_TOPICS = 100
OVERVIEW_SUBSCRIPTIONS = 50
PAGE = 50
MAX_GROUPS = 1000
PREVIEW_BYTES = 256  # of each body in a topic page
DETAIL_BYTES = 64 * 1024  # of a body on its message's page
_MESSAGE_ID_LENGTH = 32


@dataclass(frozen=True)
class TopicLine:
    topic: str
    first_offset: int
    next_offset: int
    last_hour: int  # messages committed in the last hour


@dataclass(frozen=True)
class Overview:
    topics: list[TopicLine]
    states: dict[str, int]  # every state, 0 when none
    oldest_prepared_at: datetime | None
    oldest_prepared_age: float | None  # seconds
    checks: dict[str, int]  # by result, over the last hour
    now: datetime


def _topic_lines(conn: Connection, only_topics: Collection[str] | None,
                 since: datetime) -> list[TopicLine]:
    lines = []
    for row in topic_store.list_topics(conn, "", OVERVIEW_TOPICS, only_topics):
        first = min(row.first_offset, row.next_offset)
        recent = log.first_offset_since(conn, row.topic, first, row.next_offset, since)
        lines.append(TopicLine(row.topic, first, row.next_offset, row.next_offset - recent))
    return lines


def topics(engine: Engine, only_topics: Collection[str] | None) -> list[TopicLine]:
    """The first ``OVERVIEW_TOPICS`` topics by name, with their offsets and how many
    messages each had committed in the last hour."""
    with engine.connect() as conn:
        return _topic_lines(conn, only_topics, clock.utcnow() - RECENT)


def overview(engine: Engine, only_groups: Collection[str] | None,
             only_topics: Collection[str] | None) -> Overview:
    now = clock.utcnow()
    since = now - RECENT
    with engine.connect() as conn:
        lines = _topic_lines(conn, only_topics, since)
        counted = txn_store.count_by_state(conn, only_groups)
        oldest = txn_store.oldest_prepared(conn, only_groups)
        by_result = checks.checks_by_result(conn, since, only_groups)
    return Overview(
        lines, {s.value: counted.get(s.value, 0) for s in State}, oldest,
        None if oldest is None else max(0.0, (now - oldest).total_seconds()),
        dict(sorted(by_result.items())), now)


def subscriptions_with_backlog(engine: Engine, only_topics: Collection[str] | None,
                               limit: int = OVERVIEW_SUBSCRIPTIONS) -> list[dict[str, Any]]:
    """The subscriptions with something to consume (largest backlog first, at most
    ``limit``), each described as the API describes it: one aggregate query for the
    backlogs, then ``limit`` descriptions at most, never a scan of the messages."""
    waiting = sorted(((-n, t, name) for t, name, n in subs.backlogs(engine)
                      if n > 0 and (only_topics is None or t in only_topics)))[:limit]
    return subs.describe_each(engine, [(topic, name) for _, topic, name in waiting])


def topic_subscriptions(engine: Engine, topic: str) -> dict[str, Any]:
    """The first page of a topic's subscriptions, as the API lists them."""
    return subs.list_subscriptions(engine, topic, "", PAGE)


@dataclass(frozen=True)
class TransactionPage:
    transactions: list[AnyRow]
    groups: list[str]  # the groups to filter by
    next_before: int | None  # the id to page on from
    found_by: str | None = None  # what a search matched: "transaction id", "message id"


def parse_state(state: str | None) -> State | None:
    if not state:
        return None
    if state not in State.__members__:
        raise InvalidRequest(f"state must be one of {', '.join(State)}",
                             code=ProblemCode.INVALID_QUERY_PARAMETER, parameter="state")
    return State(state)


def parse_group(group: str | None) -> str | None:
    if not group:
        return None
    return check_name("producer group name", group, code=ProblemCode.INVALID_QUERY_PARAMETER,
                      parameter="group")


def transactions(engine: Engine, only_groups: Collection[str] | None, *, group: str | None,
                 state: State | None, search: str | None, before: int | None,
                 limit: int = PAGE) -> TransactionPage:
    """Transactions newest first, by group and state; or those a search names: a
    transaction id (in any group the viewer may see) or a message id."""
    with engine.connect() as conn:
        known = (txn_store.transaction_groups(conn, MAX_GROUPS) if only_groups is None
                 else sorted(only_groups))
        if group is not None and only_groups is not None and group not in only_groups:
            return TransactionPage([], known, None)
        wanted = [group] if group is not None else (None if only_groups is None else known)
        if search:
            search = search.strip()
            rows: list[AnyRow] = []
            found = None
            if is_valid_transaction_id(search):
                rows = txn_store.transactions_with_id(
                    conn, wanted if wanted is not None else known, search)
                found = "transaction id"
            if not rows and len(search) == _MESSAGE_ID_LENGTH:
                row = txn_store.transaction_of_message(conn, search.upper())
                if row is not None and (wanted is None or row.producer_group in wanted):
                    rows, found = [row], "message id"
            if state is not None:
                rows = [r for r in rows if r.state == state]
            return TransactionPage(rows, known, None, found if rows else None)
        rows = txn_store.newest_transactions(conn, wanted, [state] if state else [], before,
                                           limit)
    return TransactionPage(rows, known, rows[-1].id if len(rows) == limit else None)


@dataclass(frozen=True)
class Event:
    at: datetime
    what: str
    detail: str = ""


@dataclass
class TransactionView:
    transaction: AnyRow
    messages: list[dict[str, Any]]
    checks: list[AnyRow]
    ops: list[AnyRow]
    discarded_to: list[AnyRow]  # its entries on the discard topic
    timeline: list[Event] = field(default_factory=list)


def transaction(engine: Engine, group: str, transaction_id: str) -> TransactionView:
    """A transaction with its messages (sizes, not bodies), every check, every operation,
    and a timeline of all of them."""
    with engine.connect() as conn:
        row = txn_store.get_txn(conn, group, transaction_id)
        if row is None:
            raise NotFound(f"no transaction {transaction_id!r} in producer group {group!r}",
                           code=ProblemCode.TRANSACTION_NOT_FOUND)
        messages = txn_store.messages_without_bodies(conn, row.id)
        offsets = {m.message_id: m.queue_offset
                   for m in txn_store.committed_offsets(conn, [row.id])[row.id]}
        checked = checks.checks_of(conn, row.id)
        ops = txn_store.ops_of(conn, row.id)
        discarded = log.discard_entries(conn, [m.message_id for m in messages])
    shown = [{"message_id": m.message_id, "topic": m.topic, "tag": m.tag,
              "ordering_key": m.ordering_key,
              "keys": orjson.loads(m.keys), "size": m.size, "text": m.body_is_text,
              "offset": offsets.get(m.message_id)} for m in messages]
    view = TransactionView(row, shown, checked, ops, discarded)
    view.timeline = _timeline(row, checked, ops)
    return view


def _timeline(row: AnyRow, checked: list[AnyRow], ops: list[AnyRow]) -> list[Event]:
    events = [Event(row.created_at, "sent", f"{row.message_count} message(s)")]
    for c in checked:
        took = f" in {c.duration_ms:.0f} ms" if c.duration_ms is not None else ""
        events.append(Event(c.created_at, f"check #{c.check_times}: {c.result}",
                            f"{c.url or 'no URL'}{took}"))
    for op in ops:
        events.append(Event(op.created_at, op.op, f"by {op.source}, after "
                                                  f"{op.check_times} check(s)"))
    if row.state == State.PREPARED:
        events.append(Event(row.next_check_at, "next check due"))
    events.sort(key=lambda e: e.at)
    return events


@dataclass(frozen=True)
class TopicPage:
    topic: str
    messages: list[dict[str, Any]]
    first_offset: int
    next_offset: int  # the topic's
    from_offset: int
    following: int | None  # the offset the next page starts at, if any


def browse(engine: Engine, topic: str, from_offset: int | None,
           limit: int = PAGE) -> TopicPage:
    """A page of a topic's committed messages by offset (the latest page by default),
    each with its size and a preview of its body."""
    with engine.connect() as conn:
        line = topic_store.get_topic(conn, topic)
        first = min(line.first_offset, line.next_offset) if line is not None else 0
        end = line.next_offset if line is not None else 0
        start = max(end - limit, first) if from_offset is None else max(from_offset, first)
        rows = log.browse(conn, topic, start, limit, PREVIEW_BYTES)
    shown = [{"offset": r.queue_offset, "message_id": r.message_id,
              "transaction_id": r.transaction_id, "producer_group": r.producer_group,
              "tag": r.tag, "ordering_key": r.ordering_key, "keys": orjson.loads(r.keys),
              "size": r.size,
              "committed_at": r.committed_at,
              **_body(bytes(r.preview), r.body_is_text, r.size)} for r in rows]
    following = rows[-1].queue_offset + 1 if rows and rows[-1].queue_offset + 1 < end else None
    return TopicPage(topic, shown, first, end, start, following)


def _body(preview: bytes, is_text: bool, size: int) -> dict[str, Any]:
    """What a page shows of a body: text as text, binary as hex; ``cut`` when partial."""
    cut = len(preview) < size
    if is_text:
        return {"text": preview.decode("utf-8", errors="replace"), "hex": None, "cut": cut}
    return {"text": None, "hex": " ".join(f"{b:02x}" for b in preview), "cut": cut}


def message(engine: Engine, message_id: str) -> dict[str, Any]:
    """One message: its transaction, place in the log, properties and body (text shown,
    binary as a hex preview), at most ``DETAIL_BYTES`` of it."""
    with engine.connect() as conn:
        row = log.message_preview(conn, message_id.upper(), DETAIL_BYTES)
        discarded = log.discard_entries(conn, [row.message_id]) if row else []
    if row is None:
        raise NotFound(f"no message {message_id!r}", code=ProblemCode.MESSAGE_NOT_FOUND)
    preview = bytes(row.preview)
    return {"message_id": row.message_id, "topic": row.topic, "tag": row.tag,
            "ordering_key": row.ordering_key,
            "keys": orjson.loads(row.keys), "properties": orjson.loads(row.properties),
            "transaction_id": row.transaction_id, "producer_group": row.producer_group,
            "state": row.state, "offset": row.queue_offset, "committed_at": row.committed_at,
            "created_at": row.created_at, "size": row.size,
            "discarded_to": [{"topic": e.topic, "queue_offset": e.queue_offset,
                              "committed_at": e.committed_at,
                              "properties": orjson.loads(e.properties or "{}")}
                             for e in discarded],
            **_body(preview if row.body_is_text else preview[:PREVIEW_BYTES * 4],
                    row.body_is_text, row.size)}


def groups(engine: Engine, only_groups: Collection[str] | None,
           after: str = "", limit: int = PAGE) -> tuple[list[dict[str, Any]], str | None]:
    """Registered producer groups with their callbacks (never their signing secrets),
    and the name to page on from."""
    with engine.connect() as conn:
        rows = group_store.list_groups(conn, after, limit, only_groups)
    shown = [{"producer_group": r.name, "check_urls": check_urls(r),
              "check_timeout_ms": r.check_timeout_ms, "created_at": r.created_at,
              "updated_at": r.updated_at} for r in rows]
    return shown, rows[-1].name if len(rows) == limit else None
