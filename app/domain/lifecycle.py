"""The half-message lifecycle: send, and the operations that resolve a transaction.

Both the API and the checker go through ``Lifecycle.finish``: one code path decides and
writes COMMIT, ROLLBACK, DISCARD and RESUME. Writes are group-committed: ``apply_sends``
and ``apply_finishes`` each handle a whole batch of requests inside one transaction.
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Connection, Engine

from app import metrics, tracing
from app.config import Settings
from app.domain import clock, spans, states, subscriptions
from app.domain.callback_policy import CallbackPolicy
from app.domain.messages import MessageIn, TransactionIn
from app.domain.names import DISCARD_TOPIC, new_message_ids
from app.domain.states import Outcome
from app.domain.trace_context import TraceContext
from app.domain.wakeups import TopicSignal
from app.errors import ApiError, Conflict, NotFound, UnregisteredProducerGroup
from app.problems import ProblemCode
from app.storage import finishes, groups, notices, sends, transactions
from app.storage.bulk import Encoded
from app.storage.db import write_transaction
from app.storage.sends import NewTransaction
from app.storage.writer import GroupCommitWriter
from app.vocabulary import RESOLVED, Op, State

# A send of this many messages has its rows and its answer's list built by its handler,
# while the writer is busy with the batch ahead: the writer, which every send of a batch
# waits for, is the bottleneck of large sends. A smaller send leaves them to the writer,
# as the event loop, busier than the writer under many small sends, is then the one to
# spare (measured: docs/performance.md, "Large sends").
_BUILT_AHEAD = 8


@dataclass(frozen=True)
class SendCmd:
    """A send as its request's handler prepares it; a large one (``_BUILT_AHEAD``) with
    its rows and its answer's list, so that the writer of its batch, which every send of
    the batch waits for, has little left to do per message."""

    group: str
    request: TransactionIn
    transaction_id: str
    fingerprint: str
    first_check_delay: float
    message_ids: list[str]  # if the send is new (a retried one answers with its first ids)
    encoded: Encoded | None = None  # its messages' rows (``sends.encoded_messages``)
    listed: list[dict[str, str]] | None = None  # its messages as its answer lists them

    def answer_messages(self) -> list[dict[str, str]]:
        """Its messages as its answer lists them, if it is new."""
        if self.listed is not None:
            return self.listed
        return listed(self.message_ids, self.request.messages)


def listed(message_ids: Sequence[str], messages: Sequence[MessageIn]) -> list[dict[str, str]]:
    """Messages as a send's answer lists them."""
    return [{"message_id": i, "topic": m.topic}
            for i, m in zip(message_ids, messages, strict=True)]


@dataclass(frozen=True)
class FinishCmd:
    group: str
    transaction_id: str
    op: Op
    source: str = "api"
    check_times: int | None = None  # DISCARD: the check number that ended without an answer


@dataclass
class SendResult:
    body: dict[str, Any]
    created: bool


@dataclass
class FinishResult:
    body: dict[str, Any]
    applied: bool
    # for metrics, set only when applied
    message_count: int = 0
    created_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def apply_sends(conn: Connection, cmds: Sequence[SendCmd]) -> list[SendResult | ApiError]:
    """Store a batch of half messages: new transactions, idempotent retries, refusals.

    New transactions are inserted straight away; only an id that is already taken (a
    retried send, or one racing in from another process) costs a lookup.
    """
    now = clock.utcnow()
    new: list[NewTransaction] = []
    first_of: dict[tuple[str, str], SendCmd] = {}
    for cmd in cmds:
        key = (cmd.group, cmd.transaction_id)
        if key in first_of:
            continue
        first_of[key] = cmd
        new.append(NewTransaction(
            cmd.group, cmd.transaction_id, cmd.fingerprint, cmd.request.check_url,
            cmd.request.check_immunity_seconds, now + timedelta(seconds=cmd.first_check_delay),
            now, cmd.request.messages, cmd.message_ids, cmd.encoded))
    inserted = sends.store_sends(conn, new)
    # the rare path: a key not stored is either taken (a retry) or its group unregistered
    left = [key for key in first_of if key not in inserted]
    registered = groups.registered(conn, {g for g, _ in left})
    existing = transactions.find_txns(conn, [k for k in left if k[0] in registered])
    existing_messages = transactions.messages_of(conn, [r.id for r in existing.values()],
                                          columns=transactions.ID_COLUMNS)
    forgotten = sends.forgotten(conn, [k for k in left
                                       if k[0] in registered and k not in existing])

    out: list[SendResult | ApiError] = []
    answered: set[tuple[str, str]] = set()
    for cmd in cmds:
        key = (cmd.group, cmd.transaction_id)
        row = existing.get(key)
        if key in forgotten:
            out.append(transaction_id_conflict(
                cmd.transaction_id, "was resolved long ago and forgotten by retention; "
                "its id is never used again"))
        elif key not in inserted and row is None:  # unregistered when the batch was stored
            out.append(UnregisteredProducerGroup(
                f"producer group {cmd.group!r} has no check callback registration; "
                f"PUT /v1/producer-groups/{cmd.group} first"))
        elif row is not None:  # the id is taken: a retried send
            out.append(_retried_send(cmd, _Sent(row.fingerprint, row.check_url,
                                                row.check_immunity_seconds), row.created_at, [
                {"message_id": m.message_id, "topic": m.topic}
                for m in existing_messages[row.id]], State(row.state)))
        else:
            first = first_of[key]
            if key in answered:  # the same id twice in one batch: the second is a retry
                out.append(_retried_send(cmd, _sent(first), now,
                                         first.answer_messages(), State.PREPARED))
            else:
                answered.add(key)
                out.append(SendResult(_send_body(cmd.group, cmd.transaction_id, now,
                                                 cmd.answer_messages()), created=True))
    return out


class _Sent(NamedTuple):
    """What a retried send must repeat of the first: its messages (and acks, by their
    fingerprint) and the settings of its checks."""

    fingerprint: str
    check_url: str | None
    check_immunity_seconds: int


def _sent(cmd: SendCmd) -> _Sent:
    return _Sent(cmd.fingerprint, cmd.request.check_url, cmd.request.check_immunity_seconds)


def transaction_id_conflict(transaction_id: str, why: str) -> Conflict:
    """The one refusal of a send whose transaction id cannot be used (again)."""
    return Conflict(f"transaction {transaction_id!r} {why}",
                    code=ProblemCode.TRANSACTION_ID_CONFLICT)


def _retried_send(cmd: SendCmd, first: _Sent, created_at: datetime,
                  messages: list[dict[str, str]], state: State) -> SendResult | ApiError:
    """A send whose transaction id is taken: the same answer again (with the state it has
    now), or a conflict if it differs from the first send (a retry that silently kept the
    first's check settings would mislead its producer)."""
    if first.fingerprint != cmd.fingerprint:
        return transaction_id_conflict(cmd.transaction_id,
                                       "was already sent with different messages")
    if _sent(cmd) != first:
        return transaction_id_conflict(
            cmd.transaction_id, "was already sent with another check_url or "
            "check_immunity_seconds")
    return SendResult(_send_body(cmd.group, cmd.transaction_id, created_at, messages, state),
                      created=False)


def _send_body(group: str, transaction_id: str, created_at: datetime,
               messages: list[dict[str, str]], state: State = State.PREPARED
               ) -> dict[str, Any]:
    return {"transaction_id": transaction_id, "producer_group": group,
            "state": state.value, "created_at": created_at, "messages": messages}


def apply_finishes(conn: Connection, cmds: Sequence[FinishCmd]) -> list[FinishResult | ApiError]:
    """Resolve a batch of transactions in one database transaction.

    Row locks on the transactions (then on topic counters) are taken in a fixed order, so
    concurrent writers in other processes cannot deadlock us, and the state each command
    sees includes the effect of the commands before it in the same batch.
    """
    now = clock.utcnow()
    rows, messages = finishes.lock_txns(conn, [(c.group, c.transaction_id) for c in cmds])
    current: dict[int, State] = {r.id: State(r.state) for r in rows.values()}
    acks = subscriptions.FinishAcks(conn)
    refused: dict[int, ApiError] = {}  # by place in the batch: a commit whose acks are taken
    decided: list[tuple[FinishCmd, Any, Outcome | None, State | None]] = []
    for cmd in cmds:
        row = rows.get((cmd.group, cmd.transaction_id))
        if row is None:
            decided.append((cmd, None, None, None))
            continue
        state = current[row.id]
        verdict = states.decide(state, cmd.op)
        if verdict is Outcome.APPLY:
            refusal = acks.apply(row, cmd.op)
            if refusal is not None:
                refused[len(decided)] = refusal
                verdict = Outcome.CONFLICT
            else:
                current[row.id] = states.target(cmd.op)
        decided.append((cmd, row, verdict, state))

    applied = [(c, r) for c, r, o, _ in decided if o is Outcome.APPLY]
    released = acks.write()
    to_publish = [(c, r) for c, r in applied if c.op in (Op.COMMIT, Op.DISCARD)]
    counts, log_rows, placed = _publish(to_publish, messages, now)
    changes: dict[int, dict[str, Any]] = {}
    for c, r in applied:  # a later command on the same row starts from the earlier one's result
        changes[r.id] = _state_change(c, r, now, changes.get(r.id))
    first = finishes.record_finishes(conn, counts, log_rows, [
        {"txn_id": r.id, "op": c.op.value, "source": c.source,
         "check_times": c.check_times if c.check_times is not None else r.check_times,
         "created_at": now}
        for c, r in applied
    ], list(changes.values()), now)
    published: dict[tuple[int, Op], list[dict[str, Any]]] = {
        key: [{"message_id": m, "topic": t, "offset": first[t] + rel} for m, t, rel in entries]
        for key, entries in placed.items()}
    repeats = transactions.committed_offsets(
        conn, [r.id for c, r, o, _ in decided if o is Outcome.REPEAT and c.op is Op.COMMIT])

    out: list[FinishResult | ApiError] = []
    for i, (cmd, row, outcome, before) in enumerate(decided):
        if row is None or before is None:  # both None together: no such transaction
            out.append(NotFound(f"no transaction {cmd.transaction_id!r} in producer group "
                                f"{cmd.group!r}", code=ProblemCode.TRANSACTION_NOT_FOUND))
        elif i in refused:
            out.append(refused[i])
        elif outcome is Outcome.CONFLICT:
            out.append(Conflict(
                f"cannot {cmd.op.value.lower()} transaction {cmd.transaction_id!r}: "
                f"it is {before.value}",
                code=ProblemCode.INVALID_STATE_TRANSITION, state=before.value))
        else:
            body: dict[str, Any] = {"transaction_id": cmd.transaction_id,
                                    "state": states.target(cmd.op).value}
            if cmd.op is Op.COMMIT:
                offsets = published[(row.id, cmd.op)] if outcome is Outcome.APPLY else [
                    {"message_id": m.message_id, "topic": m.topic, "offset": m.queue_offset}
                    for m in repeats[row.id]]
                body["messages"] = offsets
            result = FinishResult(body, applied=outcome is Outcome.APPLY,
                                  message_count=row.message_count, created_at=row.created_at)
            if released and row.id in acks.released:
                result.extra["released_topics"] = released  # of the whole batch: a hint
            if tracing.TRACER is not None and outcome is Outcome.APPLY:
                result.extra[spans.STORED_TRACES] = spans.stored_traces(
                    [m.properties for m in messages.get(row.id, ())])
            out.append(result)
    return out


def _publish(to_publish: list[tuple[FinishCmd, Any]], messages: dict[int, list[Any]],
             now: datetime) -> tuple[dict[str, int], list[dict[str, Any]],
                                     dict[tuple[int, Op], list[tuple[str, str, int]]]]:
    """Lay out the committed messages (and discarded ones, on the discard topic).

    Each topic's messages of the batch take consecutive offsets, in order: a log row
    carries its place ``rel`` in its topic's range, and the storage layer reserves the
    ranges (``counts``) and gives back where each starts. Entries for the answers,
    (message id, topic, rel), are keyed by (transaction, op): one batch may discard a
    transaction and then commit it late, and each answer lists only its own.
    """
    counts: Tally[str] = Tally()
    log_rows: list[dict[str, Any]] = []
    placed: dict[tuple[int, Op], list[tuple[str, str, int]]] = {}
    for cmd, row in to_publish:
        entries = placed.setdefault((row.id, cmd.op), [])
        for m in messages[row.id]:
            topic = DISCARD_TOPIC if cmd.op is Op.DISCARD else m.topic
            rel = counts[topic]
            counts[topic] += 1
            properties = None
            if cmd.op is Op.DISCARD:
                props = orjson.loads(m.properties)
                props.update(REAL_TOPIC=m.topic, TRANSACTION_ID=row.transaction_id,
                             PRODUCER_GROUP=row.producer_group,
                             CHECK_TIMES=str(cmd.check_times or row.check_times))
                properties = orjson.dumps(props).decode()
            log_row: dict[str, Any] = {"topic": topic, "rel": rel, "half_message_id": m.id}
            if properties is not None:
                log_row["properties"] = properties
            if cmd.op is Op.COMMIT and (m.deliver_at is not None
                                        or m.deliver_after_ms is not None):
                log_row["deliver_at"] = deliver_at(m.deliver_after_ms, m.deliver_at, now)
            log_rows.append(log_row)
            entries.append((m.message_id, topic, rel))
    return dict(counts), log_rows, placed


def deliver_at(after_ms: int | None, at: datetime | None, committed_at: datetime
               ) -> datetime | None:
    """When subscriptions may deliver a message committed at ``committed_at``: a
    ``deliver_after_ms`` counts from the commit."""
    if at is not None:
        return at
    return None if after_ms is None else committed_at + timedelta(milliseconds=after_ms)


def _state_change(cmd: FinishCmd, row: Any, now: datetime,
                  earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    target = states.target(cmd.op)
    check_times = earlier["check_times"] if earlier else row.check_times
    if cmd.op is Op.DISCARD and cmd.check_times is not None:
        check_times = cmd.check_times
    elif cmd.op is Op.RESUME:
        check_times = 0
    return {"id": row.id, "state": target.value,
            "resolved_at": now if target in RESOLVED else None,
            "check_times": check_times,
            "next_check_at": now if cmd.op is Op.RESUME else row.next_check_at}


class Lifecycle:
    """The write side of txmsg for one process: two group-commit writers (sends, finishes).

    Two writers, not one: a batch of sends and a batch of finishes then run at the same
    time on two connections, which serves more send + commit pairs than one writer doing
    both (whose batches are larger but run one after the other).
    """

    def __init__(self, engine: Engine, settings: Settings, *, publish: bool = False) -> None:
        """``publish``: this process's commits wake the receives waiting in other processes
        too (PostgreSQL notifications, ``app.storage.notices``), not only its own."""
        self.engine = engine
        self.settings = settings
        # this process's commits wake the receives waiting on their topics
        self.signal = TopicSignal()
        self.publisher = notices.publisher(engine, settings) if publish else None
        if self.publisher is not None:
            self.signal.relay_to(self.publisher.publish)
        # what a send's check_url is judged by (built once: sends are the hot path)
        self.callback_policy = CallbackPolicy.from_settings(settings)
        self.send_writer: GroupCommitWriter[SendCmd] = GroupCommitWriter(
            engine, apply_sends, max_batch=settings.batch_max_size, name="txmsg-send-writer",
            one_statement=sends.sends_are_one_statement(engine),
            on_batch=metrics.BATCH_SIZE.labels("send").observe,
            on_depth=metrics.QUEUE_DEPTH.labels("send").set,
            timeout=settings.db_write_timeout_seconds)
        self.finish_writer: GroupCommitWriter[FinishCmd] = GroupCommitWriter(
            engine, apply_finishes, max_batch=settings.batch_max_size,
            name="txmsg-finish-writer", on_batch=metrics.BATCH_SIZE.labels("finish").observe,
            on_depth=metrics.QUEUE_DEPTH.labels("finish").set,
            timeout=settings.db_write_timeout_seconds)

    def send(self, group: str, request: TransactionIn,
             trace: TraceContext | None = None) -> SendResult:
        """Store ``request``'s half messages; ``trace``: the request's trace context."""
        if tracing.TRACER is not None:
            with spans.sending(group, request, trace) as span:
                return spans.sent(span, self._send(group, request))
        return self._send(group, request)

    def _send(self, group: str, request: TransactionIn) -> SendResult:
        cmd = self._send_cmd(group, request)
        if request.acks:
            return self._sent(request, self._send_holding(cmd))
        return self._sent(request, self.send_writer.submit(cmd))

    async def send_async(self, group: str, request: TransactionIn,
                         trace: TraceContext | None = None) -> SendResult:
        """``send`` for a coroutine (the ASGI front): same batches, no thread held."""
        if tracing.TRACER is not None:
            with spans.sending(group, request, trace) as span:
                return spans.sent(span, await self._send_async(group, request))
        return await self._send_async(group, request)

    async def _send_async(self, group: str, request: TransactionIn) -> SendResult:
        cmd = self._send_cmd(group, request)
        if request.acks:
            return self._sent(request, await asyncio.get_running_loop().run_in_executor(
                None, self._send_holding, cmd))
        return self._sent(request, await self.send_writer.submit_async(cmd))

    def _send_holding(self, cmd: SendCmd) -> SendResult:
        """A send that carries acks: stored with its holds in one database transaction of
        its own (a send without acks, the hot path, stays in the group-commit batches).
        A refused ack refuses the send: nothing is written."""
        with write_transaction(self.engine) as conn:
            out = apply_sends(conn, [cmd])[0]
            if isinstance(out, ApiError):
                raise out
            if out.created:
                row = transactions.get_txn(conn, cmd.group, cmd.transaction_id)
                assert row is not None  # inserted just now, in this transaction
                held = subscriptions.hold_acks(conn, row.id, cmd.request.ack_set())
                transactions.mark_held(conn, row.id, held)
            return out

    def _send_cmd(self, group: str, request: TransactionIn) -> SendCmd:
        delay = max(self.settings.transaction_timeout_seconds, request.check_immunity_seconds)
        *ids, server_id = new_message_ids(len(request.messages) + 1)
        transaction_id = request.transaction_id or server_id
        cmd = SendCmd(group, request, transaction_id, request.fingerprint(), delay, ids)
        if len(ids) < _BUILT_AHEAD:
            return cmd
        return replace(cmd, encoded=sends.encoded_messages(
            self.engine, group, transaction_id, request.messages, ids),
            listed=listed(ids, request.messages))

    @staticmethod
    def _sent(request: TransactionIn, result: SendResult) -> SendResult:
        if result.created:
            metrics.SENT.inc(len(request.messages))
        return result

    def finish(self, group: str, transaction_id: str, op: Op, *, source: str = "api",
               check_times: int | None = None,
               trace: TraceContext | None = None) -> FinishResult:
        """Commit, roll back, discard or resume one transaction (API and checker alike)."""
        cmd = FinishCmd(group, transaction_id, op, source, check_times)
        if tracing.TRACER is not None:
            with spans.finishing(group, transaction_id, op, trace) as span:
                return spans.finished(span, self._finished(op, self.finish_writer.submit(cmd)))
        return self._finished(op, self.finish_writer.submit(cmd))

    async def finish_async(self, group: str, transaction_id: str, op: Op,
                           trace: TraceContext | None = None) -> FinishResult:
        """``finish`` of an API request, for a coroutine (the ASGI front)."""
        cmd = FinishCmd(group, transaction_id, op)
        if tracing.TRACER is not None:
            with spans.finishing(group, transaction_id, op, trace) as span:
                return spans.finished(span, self._finished(
                    op, await self.finish_writer.submit_async(cmd)))
        return self._finished(op, await self.finish_writer.submit_async(cmd))

    def _finished(self, op: Op, result: FinishResult) -> FinishResult:
        if result.applied:
            _count(op, result)
            if op is Op.COMMIT:
                self.signal.notify({m["topic"] for m in result.body["messages"]})
            elif op is Op.DISCARD:
                self.signal.notify((DISCARD_TOPIC,))
            if result.extra.get("released_topics"):  # acks given back: deliverable now
                self.signal.notify(result.extra["released_topics"])
        return result

    def close(self) -> None:
        self.send_writer.close()
        self.finish_writer.close()
        if self.publisher is not None:  # after the writers: their last commits go out
            self.publisher.close()


def _count(op: Op, result: FinishResult) -> None:
    if op is Op.COMMIT:
        metrics.COMMITTED.inc(result.message_count)
    elif op is Op.ROLLBACK:
        metrics.ROLLED_BACK.inc(result.message_count)
    elif op is Op.DISCARD:
        metrics.DISCARDED.inc(result.message_count)
    if op in (Op.COMMIT, Op.ROLLBACK) and result.created_at is not None:
        metrics.FINISH_LATENCY.observe((clock.utcnow() - result.created_at).total_seconds())
