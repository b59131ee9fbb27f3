"""History for the phases that need one, written through txmsg's own write path.

A phase describes the transactions it needs (``Txn``: messages, when sent, how and when
resolved, the checks made meanwhile); ``write`` stores them with the functions the
service's group-commit writers and its checker call (``app.domain.lifecycle.apply_sends``
and ``apply_finishes``, ``app.storage.checks``), in-process on a migrated database, a
chunk of transactions to a database transaction. Times in the past are the domain's
clock set back (``clock_at``), so rows are written with the time a phase needs and
nothing here names a column of txmsg's tables: a schema change reaches the bench through
the service's code, or breaks it loudly.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine

from app.config import Settings
from app.domain import clock
from app.domain.lifecycle import FinishCmd, SendCmd, apply_finishes, apply_sends
from app.domain.messages import MessageIn, TransactionIn
from app.domain.names import new_message_ids
from app.errors import ApiError
from app.storage import checks, groups, transactions
from app.storage.db import make_engine, write_transaction
from app.vocabulary import Op

CHUNK = 1000  # transactions to a database transaction
WRITERS = 2  # database transactions at once
OWNER = "bench-seed"  # the checker that the checks of a ``Txn`` are recorded as


@dataclass(frozen=True)
class Check:
    """One check callback's outcome, as the checker logs it."""

    result: str
    at: datetime
    url: str | None = None
    detail: str | None = None
    duration_ms: float | None = None


@dataclass(frozen=True)
class Txn:
    """A transaction to store: sent at ``sent_at`` (None: now), checked ``checks``, then
    resolved by ``op`` at ``resolved_at`` (``op`` None: left PREPARED)."""

    transaction_id: str
    messages: Sequence[MessageIn]
    sent_at: datetime | None = None
    first_check_delay: float = 3600.0
    op: Op | None = Op.COMMIT
    resolved_at: datetime | None = None
    source: str = "api"
    checks: Sequence[Check] = field(default_factory=tuple)


def text(topic: str, body: str, **fields: object) -> MessageIn:
    """A message with a text body, validated as a send's are."""
    return MessageIn.model_validate({"topic": topic, "body": body, **fields})


@contextmanager
def clock_at(when: datetime | None) -> Iterator[None]:
    """The domain's clock reads ``when`` meanwhile (None: the real time)."""
    if when is None:
        yield
        return
    real = clock.utcnow
    clock.utcnow = lambda: when
    try:
        yield
    finally:
        clock.utcnow = real


@contextmanager
def engine_of(url: str) -> Iterator[Engine]:
    """The service's engine on ``url`` (a migrated database), disposed on exit."""
    engine = make_engine(Settings(database_url=url))
    try:
        yield engine
    finally:
        engine.dispose()


def register(engine: Engine, group: str, check_url: str, timeout_ms: int = 3000,
             at: datetime | None = None) -> None:
    """Register ``group``'s check callback (or change its URL)."""
    with clock_at(at), write_transaction(engine) as conn:
        groups.upsert(conn, group, [check_url], timeout_ms, clock.utcnow())


def write(engine: Engine, group: str, txns: Iterable[Txn], chunk: int = CHUNK,
          writers: int = WRITERS) -> int:
    """Store ``txns`` for the registered ``group``, ``chunk`` to a database transaction, on
    ``writers`` connections at once (as the service's writers run beside each other: one
    builds its chunk while another's waits for the database); how many were stored."""
    it = iter(txns)
    taking = threading.Lock()
    stored: list[int] = []
    failed: list[BaseException] = []

    def work() -> None:
        while not failed:
            with taking:
                batch = list(itertools.islice(it, chunk))
            if not batch:
                return
            try:
                with write_transaction(engine) as conn:
                    _send(conn, group, batch)
                    _check(conn, group, [t for t in batch if t.checks])
                    _finish(conn, group, [t for t in batch if t.op is not None])
            except BaseException as exc:
                failed.append(exc)
                raise
            stored.append(len(batch))

    threads = [threading.Thread(target=work, name=f"bench-seed-{i}") for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    return sum(stored)


def _by_time(txns: Sequence[Txn], when: str) -> list[tuple[datetime | None, list[Txn]]]:
    """``txns`` in runs of one time (``sent_at`` or ``resolved_at``), in order of time."""
    def key(t: Txn) -> datetime:
        return getattr(t, when) or datetime.max.replace(tzinfo=UTC)
    return [(getattr(g[0], when), g) for _, grouped in itertools.groupby(sorted(txns, key=key),
                                                                         key=key)
            for g in [list(grouped)]]


def _send(conn: Connection, group: str, txns: Sequence[Txn]) -> None:
    for at, run in _by_time(txns, "sent_at"):
        cmds = []
        for t in run:
            request = TransactionIn.model_construct(
                messages=list(t.messages), transaction_id=t.transaction_id, acks=None,
                check_immunity_seconds=0, check_url=None)
            cmds.append(SendCmd(group, request, t.transaction_id, request.fingerprint(),
                                t.first_check_delay, new_message_ids(len(t.messages))))
        with clock_at(at):
            _raise_refusals(apply_sends(conn, cmds))


def _check(conn: Connection, group: str, txns: Sequence[Txn]) -> None:
    """The checks of ``txns`` as the checker records them: leased, counted, logged."""
    if not txns:
        return
    ids = {k: r.id for k, r in transactions.find_txns(
        conn, [(group, t.transaction_id) for t in txns]).items()}
    for t in txns:
        txn_id = ids[(group, t.transaction_id)]
        checks.take_leases(conn, OWNER, {txn_id: t.checks[-1].at + timedelta(minutes=1)})
        for number, c in enumerate(t.checks, start=1):
            if not checks.record_check(conn, txn_id=txn_id, owner=OWNER, check_times=number,
                                       result=c.result, url=c.url, detail=c.detail, now=c.at,
                                       next_check_at=None, duration_ms=c.duration_ms):
                raise RuntimeError(f"check {number} of {t.transaction_id!r} not recorded")
        checks.release(conn, txn_id, OWNER)


def _finish(conn: Connection, group: str, txns: Sequence[Txn]) -> None:
    for at, run in _by_time(txns, "resolved_at"):
        cmds = [FinishCmd(group, t.transaction_id, t.op, t.source,
                          len(t.checks) if t.op is Op.DISCARD else None)
                for t in run if t.op is not None]
        with clock_at(at):
            _raise_refusals(apply_finishes(conn, cmds))


def _raise_refusals(results: Sequence[object]) -> None:
    refused = [r for r in results if isinstance(r, ApiError)]
    if refused:
        raise RuntimeError(f"{len(refused)} refused while seeding, the first: {refused[0]}")
