"""Read side: transactions, topics and messages as the API shows them."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from sqlalchemy import Engine

from app.domain import clock
from app.domain import message_shapes as shapes
from app.domain.access import CONSUME, PRODUCE, UNRESTRICTED, Principal
from app.domain.limits import offset_plus
from app.domain.message_shapes import Message
from app.errors import Forbidden, InvalidRequest, NotFound
from app.problems import ProblemCode
from app.storage import checks, log, topics, transactions
from app.storage.db import read_connection
from app.storage.replica import Reads
from app.storage.schema import AnyRow
from app.vocabulary import State


def _transaction(row: AnyRow, messages: list[AnyRow], offsets: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "transaction_id": row.transaction_id, "producer_group": row.producer_group,
        "state": row.state, "check_times": row.check_times, "created_at": row.created_at,
        "resolved_at": row.resolved_at, "check_url": row.check_url,
        "check_immunity_seconds": row.check_immunity_seconds,
        "message_count": row.message_count,
    }
    if row.state == State.PREPARED:
        out["next_check_at"] = row.next_check_at
    out["messages"] = [shapes.in_transaction(m, offsets.get(m.message_id)) for m in messages]
    return out


def get_transaction(engine: Engine, group: str, transaction_id: str, *,
                    with_checks: bool = False) -> dict[str, Any]:
    """One transaction and its messages; ``with_checks``: its check history too, oldest
    first (``checks``: number, time, URL, result, detail)."""
    with read_connection(engine) as conn:
        row, messages = transactions.transaction_as_read(conn, group, transaction_id)
        if row is None:
            raise NotFound(f"no transaction {transaction_id!r} in producer group {group!r}",
                           code=ProblemCode.TRANSACTION_NOT_FOUND)
        offsets = {}
        if row.state == State.COMMITTED:
            offsets = {m.message_id: m.queue_offset for m in messages}
        out = _transaction(row, messages, offsets)
        if with_checks:
            out["checks"] = [{"check_times": c.check_times, "created_at": c.created_at,
                              "url": c.url, "result": c.result, "detail": c.detail}
                             for c in checks.checks_of(conn, row.id)]
        return out


def list_transactions(engine: Engine, group: str | None, state: str | None, after: int,
                      limit: int) -> dict[str, Any]:
    """Transactions in id order (oldest first), of ``group`` or of every group if None."""
    if state is not None and state not in State.__members__:
        raise InvalidRequest(f"state must be one of {', '.join(State)}",
                             code=ProblemCode.INVALID_QUERY_PARAMETER, parameter="state")
    wanted = State(state) if state is not None else None
    with read_connection(engine) as conn:
        rows = transactions.list_txns(conn, group, wanted, after, limit)
    items = [{k: v for k, v in _transaction(r, [], {}).items() if k != "messages"} for r in rows]
    return {"producer_group": group, "transactions": items,
            "next_after": str(rows[-1].id) if len(rows) == limit else None}


def read_topic(engine: Engine, topic: str, from_offset: int, limit: int,
               max_bytes: int) -> dict[str, Any]:
    """A page of committed messages: at most ``limit`` and ``max_bytes`` of bodies (but
    at least one message); the next page starts at ``next_offset``. Below the retained
    range it starts at ``first_offset``."""
    with read_connection(engine) as conn:
        first, rows = log.read_page(conn, topic, from_offset, offset_plus(from_offset, limit),
                                    max_bytes)
        while first > from_offset:  # below the retained range (which may move on meanwhile)
            from_offset = first
            first, rows = log.read_page(conn, topic, from_offset,
                                        offset_plus(from_offset, limit), max_bytes)
    messages = [shapes.as_read(r) for r in rows]
    next_offset = rows[-1].queue_offset + 1 if rows else from_offset
    return {"topic": topic, "messages": messages, "next_offset": next_offset,
            "first_offset": first}


def list_topics(engine: Engine, after: str, limit: int,
                only: Collection[str] | None = None) -> dict[str, Any]:
    """Topics by name; only those in ``only`` (the ones a token may consume) unless None."""
    with read_connection(engine) as conn:
        rows = topics.list_topics(conn, after, limit, only)
    return {"topics": [{"topic": r.topic, "next_offset": r.next_offset} for r in rows],
            "next_after": rows[-1].topic if len(rows) == limit else None}


def message_not_found(message_id: str) -> NotFound:
    return NotFound(f"no message {message_id!r}", code=ProblemCode.MESSAGE_NOT_FOUND)


def check_may_read(principal: Principal, message: Mapping[str, Any], message_id: str) -> None:
    """Refuse a message read by id that ``principal`` may not see: its group's producers
    see it in every state, its topic's consumers only once it is committed. To anyone
    but its producers an unresolved, rolled-back or discarded message is not there (404,
    the same as an unknown ``message_id``: its existence does not leak); a committed one
    the principal may not read is 403, naming neither its topic nor its group (a token
    must not learn them from a message id)."""
    if principal.may(PRODUCE, message["producer_group"]):
        return
    if message["state"] != State.COMMITTED:
        raise message_not_found(message_id)
    if not principal.may(CONSUME, message["topic"]):
        raise Forbidden(f"this token may not read message {message_id!r}: it needs consume "
                        "on its topic or produce on its producer group")


def get_message(engine: Engine | Reads, message_id: str,
                principal: Principal = UNRESTRICTED) -> Message:
    """One message as ``principal`` may see it (``check_may_read``). Looked up in
    ``Reads`` (a replica that may lag), a message it does not have yet is looked up on
    the primary before answering 404: its id came from a send answered by the primary."""
    def lookup(engine: Engine) -> AnyRow | None:
        with read_connection(engine) as conn:
            return log.get_message(conn, message_id)

    row = (engine.run(lookup, lagging=lambda row: row is None) if isinstance(engine, Reads)
           else lookup(engine))
    if row is None:
        raise message_not_found(message_id)
    out = shapes.by_id(row)
    check_may_read(principal, out, message_id)
    return out


class PreparedBacklog(NamedTuple):
    half_messages: int
    oldest_age_seconds: float  # 0 when nothing is PREPARED


def prepared_backlog(engine: Engine) -> PreparedBacklog:
    """What /metrics shows of the unresolved transactions, read at scrape time."""
    with read_connection(engine) as conn:
        messages, oldest = transactions.prepared_backlog(conn)
    age = 0.0 if oldest is None else max(0.0, (clock.utcnow() - oldest).total_seconds())
    return PreparedBacklog(messages, age)

