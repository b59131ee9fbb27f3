"""Checks: which transactions are due, what their producers are asked, what an answer does.

The timing rules (first check after max(transaction timeout, check immunity), then at
most once per check interval, discard after the last check) are encoded in
``txn.next_check_at`` and the check count; this module holds the arithmetic. A checker
claims due transactions with a database lease (see ``app.storage.checks``), which is
what makes checks correct across processes, not there being one checker. Answers go
through ``Lifecycle.finish``, the API's own code path.

The checker (``checker.service``) schedules these steps and makes the HTTP calls:
``Checks.claim``, then per claim ``Checks.delivery`` (the body and what signs it), the
call, ``Checks.record``, and ``Checks.done`` once the claim is over.

Groups share a checker fairly (``Shares``): each has at most ``checker_group_concurrency``
checks in flight in one checker, and a claim passes over groups at that cap, so a group
whose callbacks hang holds a few workers, never all of them, and other groups' due
checks go first. A database error while a claim is held is retried for a few seconds
(``checker_db_retry_seconds``); if it persists the lease is given back, due at once,
rather than held until it expires.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from app import metrics
from app.config import Settings
from app.domain import clock, signing
from app.domain.lifecycle import Lifecycle
from app.domain.limits import CHECK_PAYLOAD_BYTES
from app.domain.message_shapes import CheckMessage, in_check
from app.domain.messages import ProducerGroupIn
from app.errors import ApiError, DatabaseUnavailable, one_line
from app.storage import checks, groups, transactions
from app.storage.db import make_engine, write_transaction
from app.storage.schema import AnyRow
from app.vocabulary import Op, Resolution, State

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

# when the group's registration is gone but the transaction named its own check_url
DEFAULT_TIMEOUT_MS: int = ProducerGroupIn.model_fields["check_timeout_ms"].default
# asking one URL takes at most: connect (t), wait for the answer (t), finish reading it (t)
ATTEMPT_TIMEOUTS = 3
# what a check's database work may raise: retried, then the lease is given back
DB_ERRORS = (sa_exc.SQLAlchemyError, DatabaseUnavailable)
# first pause between two tries of a check's database work, doubled up to the last
RETRY_FIRST_DELAY, RETRY_MAX_DELAY = 0.05, 1.0

OP_OF = {Resolution.COMMIT: Op.COMMIT, Resolution.ROLLBACK: Op.ROLLBACK}
_DONE = {Op.COMMIT: "committed", Op.ROLLBACK: "rolled back", Op.DISCARD: "discarded"}


@dataclass(frozen=True)
class Claim:
    """A due transaction leased to this checker."""

    txn_id: int
    group: str
    transaction_id: str
    check_times: int  # checks already counted
    created_at: datetime
    urls: list[str]  # whom to ask, in order
    timeout: float  # seconds, for each step of asking one URL
    keys: tuple[bytes, ...] = field(repr=False)  # the group's signing keys in force

    @property
    def name(self) -> str:
        return f"{self.group}/{self.transaction_id}"

    @property
    def number(self) -> int:
        """The number of the check this claim delivers."""
        return self.check_times + 1


@dataclass(frozen=True)
class Delivery:
    """What to send for one check: the callback body and what signs it."""

    body: dict[str, Any]
    signer: signing.Signer


def callback_urls(txn_check_url: str | None, group_urls: list[str]) -> list[str]:
    """The transaction's own check_url first, then the group's, each once."""
    urls = [txn_check_url] if txn_check_url else []
    return list(dict.fromkeys([*urls, *group_urls]))


def timeout_seconds(check_timeout_ms: int | None) -> float:
    return (check_timeout_ms if check_timeout_ms is not None else DEFAULT_TIMEOUT_MS) / 1000


def lease_until(settings: Settings, now: datetime, urls: int, timeout: float) -> datetime:
    """A claim outlasts asking every URL (so no other checker can take it over midway),
    plus ``checker_lease_seconds`` of margin for the database work around it."""
    return now + timedelta(seconds=settings.checker_lease_seconds
                           + urls * ATTEMPT_TIMEOUTS * timeout)


def next_check(settings: Settings, now: datetime) -> datetime:
    return now + timedelta(seconds=settings.check_interval_seconds)


def exhausted(settings: Settings, check_times: int) -> bool:
    """No check left: discard (also after a crash between the last check and its discard)."""
    return check_times >= settings.check_max_times


class Shares:
    """Checks in flight per producer group in one checker, at most ``per_group`` each."""

    def __init__(self, per_group: int) -> None:
        self.per_group = per_group
        self._in_flight: Counter[str] = Counter()
        self._lock = threading.Lock()

    def full(self) -> set[str]:
        """The groups a claim passes over."""
        with self._lock:
            return {g for g, n in self._in_flight.items() if n >= self.per_group}

    def admit(self, rows: Iterable[R], group: Callable[[R], str]) -> tuple[list[R], bool]:
        """The rows, in order, that their group has room for (counted as in flight), and
        whether any were passed over (there may be more due in other groups)."""
        taken, passed = [], False
        with self._lock:
            for row in rows:
                if self._in_flight[group(row)] < self.per_group:
                    self._in_flight[group(row)] += 1
                    taken.append(row)
                else:
                    passed = True
        return taken, passed

    def done(self, group: str) -> None:
        with self._lock:
            self._in_flight[group] -= 1
            if self._in_flight[group] <= 0:
                del self._in_flight[group]

    def in_flight(self) -> dict[str, int]:
        with self._lock:
            return dict(self._in_flight)


def _keys(conn: Connection, row: AnyRow, now: datetime,
          made: dict[str, AnyRow]) -> tuple[bytes, ...]:
    """The signing keys in force for a due transaction (``lock_due``'s row)."""
    secret: AnyRow = row
    if row.secret is None:
        # a group whose registration was deleted before secrets existed (every registration
        # makes one): it gets one now, which a new registration of the group will show
        if row.producer_group not in made:
            made[row.producer_group] = groups.ensure_secret(
                conn, row.producer_group, signing.new_secret(), now)
        secret = made[row.producer_group]
    return signing.keys_in_force(secret.secret, secret.previous_secret,
                                 secret.previous_expires_at, now)


class Checks:
    """The checks of one checker: ``owner`` names its leases in the database.

    Each method runs its own database transactions; a lost database raises one of
    ``DB_ERRORS``.
    """

    def __init__(self, settings: Settings, owner: str, engine: Engine | None = None) -> None:
        self.settings = settings
        self.owner = owner
        self._owns_engine = engine is None
        self.engine = engine or make_engine(settings)
        # its commits wake the receives waiting in the web processes
        self.lifecycle = Lifecycle(self.engine, settings, publish=True)
        self.shares = Shares(min(settings.checker_group_concurrency,
                                 settings.checker_concurrency))

    def close(self) -> None:
        self.lifecycle.close()
        if self._owns_engine:
            self.engine.dispose()

    def claim(self, limit: int) -> tuple[list[Claim], bool]:
        """Lease up to ``limit`` due transactions to this checker, oldest due first, each
        group's up to its share; and whether due transactions were passed over because
        their group's share is full (claim again: other groups may have some due).
        Each claim counts in its group's share until ``done``."""
        now = clock.utcnow()
        with self.engine.connect() as conn:
            if not checks.any_due(conn, now):
                return [], False
        claims: list[Claim] = []
        try:
            with write_transaction(self.engine) as conn:
                leases: dict[int, datetime] = {}
                made: dict[str, AnyRow] = {}
                rows = checks.lock_due(conn, now, limit, skip_groups=self.shares.full())
                taken, passed = self.shares.admit(rows, lambda r: r.producer_group)
                for row in taken:
                    urls = callback_urls(row.check_url, checks.group_urls(row))
                    timeout = timeout_seconds(row.check_timeout_ms)
                    claims.append(Claim(row.id, row.producer_group, row.transaction_id,
                                        row.check_times, row.created_at, urls, timeout,
                                        _keys(conn, row, now, made)))
                    leases[row.id] = lease_until(self.settings, now, len(urls), timeout)
                checks.take_leases(conn, self.owner, leases)
        except BaseException:
            for claim in claims:
                self.shares.done(claim.group)
            raise
        return claims, passed

    def done(self, claim: Claim) -> None:
        """The claim is over (checked, recorded, or given back): its share is free."""
        self.shares.done(claim.group)

    def delivery(self, claim: Claim) -> Delivery | None:
        """What to send for check number ``claim.number``, or None when there is nothing
        to ask: the last check was counted but the process died before the discard (which
        is done now), or the transaction is no longer ours to check."""
        if exhausted(self.settings, claim.check_times):
            self._finish(claim, Op.DISCARD, claim.check_times)
            return None

        def read() -> tuple[Any, list[Any] | None]:
            """The transaction's lease state, and its messages if it is still ours."""
            with self.engine.connect() as conn:
                row = checks.lease_state(conn, claim.txn_id)
                if (row is None or row.state != State.PREPARED or row.lease_owner != self.owner
                        or row.check_times != claim.check_times):
                    return row, None
                return row, transactions.messages_of(conn, [claim.txn_id])[claim.txn_id]

        try:
            row, messages = self._retrying(read)
        except DB_ERRORS as exc:
            self._give_back(claim, f"cannot read it for check #{claim.number}", exc)
            return None
        if messages is None:
            log.info("not checking %s: it is %s now", claim.name,
                     row.state if row is not None else "gone")
            if row is not None and row.lease_owner == self.owner:
                self.release(claim)
            return None
        body = {
            "producer_group": claim.group, "transaction_id": claim.transaction_id,
            "check_times": claim.number, "created_at": claim.created_at,
            "messages": check_messages(messages),
        }
        webhook_id = signing.webhook_id(claim.txn_id, claim.created_at, row.round_id or 0,
                                        claim.number)
        return Delivery(body, signing.Signer(webhook_id, claim.keys))

    def record(self, claim: Claim, *, result: str, resolution: Resolution, url: str | None,
               detail: str | None, duration_ms: float | None = None) -> bool:
        """Count check number ``claim.number`` with the producer's answer (``result`` as
        the check log and metrics name it, ``duration_ms`` what asking took), then commit
        or roll back as the producer
        decided, or discard after the last check. False if the check was not counted:
        the lease was lost to another checker."""
        number = claim.number
        last = number >= self.settings.check_max_times
        decided = resolution is not Resolution.UNKNOWN
        tries = 0

        def write() -> bool:
            nonlocal tries
            tries += 1
            now = clock.utcnow()
            with write_transaction(self.engine) as conn:
                if checks.record_check(
                        conn, txn_id=claim.txn_id, owner=self.owner, check_times=number,
                        result=result, url=url, detail=detail, now=now,
                        duration_ms=duration_ms,
                        # keep the lease while we resolve or discard it, so no one checks
                        # it meanwhile
                        next_check_at=None if decided or last else next_check(self.settings,
                                                                               now)):
                    return True
                # a try whose commit succeeded but whose answer was lost already counted it
                row = checks.lease_state(conn, claim.txn_id)
                return tries > 1 and row is not None and row.check_times == number

        try:
            recorded = self._retrying(write)
        except DB_ERRORS as exc:
            self._give_back(claim, f"cannot record check #{number}", exc)
            return False
        if not recorded:
            log.info("check #%d of %s not counted: lease lost to another checker", number,
                     claim.name)
            return False
        metrics.CHECKS.labels(result).inc()
        if decided:
            self._finish(claim, OP_OF[resolution], number)
        elif last:
            self._finish(claim, Op.DISCARD, number)
        return True

    def release(self, claim: Claim) -> None:
        """Drop our lease (if we still hold it); the due time is left as it is."""
        with write_transaction(self.engine) as conn:
            checks.release(conn, claim.txn_id, self.owner)

    def _give_back(self, claim: Claim, what: str, exc: BaseException) -> None:
        """After the database failed us for a while: drop the lease, due at once, so the
        transaction is checked again as soon as the database is back, not once the lease
        expires (the same check number, as after a lost lease)."""
        try:
            self._retrying(lambda: self._release_due(claim))
        except DB_ERRORS as again:
            log.warning("%s of %s: %s; its lease runs out by itself (%s)", what, claim.name,
                        one_line(exc), one_line(again))
        else:
            log.warning("%s of %s: %s; due again now", what, claim.name, one_line(exc))

    def _release_due(self, claim: Claim) -> None:
        with write_transaction(self.engine) as conn:
            checks.release(conn, claim.txn_id, self.owner, due_at=clock.utcnow())

    def _retrying(self, work: Callable[[], T]) -> T:
        """``work()``, tried again with a growing pause while the database fails, for at
        most ``checker_db_retry_seconds`` (a dropped connection or a failover); then its
        last error."""
        deadline = time.monotonic() + self.settings.checker_db_retry_seconds
        delay = RETRY_FIRST_DELAY
        while True:
            try:
                return work()
            except DB_ERRORS:
                if time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, RETRY_MAX_DELAY)

    def _finish(self, claim: Claim, op: Op, number: int) -> None:
        try:
            result = self._retrying(lambda: self.lifecycle.finish(
                claim.group, claim.transaction_id, op, source="check",
                check_times=number if op is Op.DISCARD else None))
        except DB_ERRORS as exc:
            self._give_back(claim, f"cannot {op.value.lower()} it after check #{number}", exc)
            return
        except ApiError as exc:  # resolved meanwhile through the API
            log.info("%s of %s after check #%d not applied: %s", op.value.lower(), claim.name,
                     number, exc.detail)
            self.release(claim)
        else:
            # a discard is the one an operator looks for (nobody answered): a warning, with
            # the fields a JSON log is searched by, as the check's own line has
            log.log(logging.WARNING if op is Op.DISCARD else logging.INFO,
                    "%s %s after check #%d", _DONE[op], claim.name, number,
                    extra={"transaction": claim.transaction_id, "group": claim.group,
                           "check": number, "op": op.value})
            if not result.applied:  # already done through the API (whose write cleared it)
                self.release(claim)


def check_messages(messages: Iterable[AnyRow]) -> list[CheckMessage]:
    """A check's messages, their bodies included while the payload stays within
    ``CHECK_PAYLOAD_BYTES`` (the SDK's check endpoints refuse a body over 1 MiB): past it, a
    message comes without its body, marked ``"body_omitted": true`` with its size in
    ``"body_bytes"`` (a check is answered from the transaction's id; RocketMQ's listener
    may read the body, so the first messages keep theirs)."""
    out: list[CheckMessage] = []
    used = 0
    for m in messages:
        entry = in_check(m)
        size = len(orjson.dumps(entry))
        if used + size > CHECK_PAYLOAD_BYTES:
            entry = in_check(m, with_body=False)
            size = len(orjson.dumps(entry))
        used += size
        out.append(entry)
    return out
