"""Checks: which transactions are due, what their producers are asked, what an answer does.

The timing rules (first check after max(transaction timeout, check immunity), then at
most once per check interval, discard after the last check) are encoded in
``txn.next_check_at`` and the check count; this module holds the arithmetic. A checker
claims due transactions with a database lease (see ``app.storage.checks``), which is
what makes checks correct across processes, not there being one checker. Answers go
through ``Lifecycle.finish``, the API's own code path.

The checker (``checker.service``) schedules these steps and makes the HTTP calls:
``Checks.claim``, then per claim ``Checks.payload``, the call, ``Checks.record``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from app import metrics
from app.config import Settings
from app.domain.lifecycle import Lifecycle, utcnow
from app.domain.messages import ProducerGroupIn
from app.domain.reads import body_fields, message_meta
from app.errors import ApiError, DatabaseUnavailable
from app.storage import checks, reads
from app.storage.db import make_engine, write_transaction
from app.vocabulary import Op, Resolution, State

log = logging.getLogger(__name__)

# when the group's registration is gone but the transaction named its own check_url
DEFAULT_TIMEOUT_MS: int = ProducerGroupIn.model_fields["check_timeout_ms"].default
# asking one URL takes at most: connect (t), wait for the answer (t), finish reading it (t)
ATTEMPT_TIMEOUTS = 3
# what a check's database work may raise: the transaction stays leased, and is checked
# again once the lease has expired
DB_ERRORS = (sa_exc.SQLAlchemyError, DatabaseUnavailable)

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

    @property
    def name(self) -> str:
        return f"{self.group}/{self.transaction_id}"

    @property
    def number(self) -> int:
        """The number of the check this claim delivers."""
        return self.check_times + 1


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
        self.lifecycle = Lifecycle(self.engine, settings)

    def close(self) -> None:
        self.lifecycle.close()
        if self._owns_engine:
            self.engine.dispose()

    def claim(self, limit: int) -> list[Claim]:
        """Lease up to ``limit`` due transactions to this checker, oldest due first."""
        now = utcnow()
        with self.engine.connect() as conn:
            if not checks.any_due(conn, now):
                return []
        with write_transaction(self.engine) as conn:
            claims, leases = [], {}
            for row in checks.lock_due(conn, now, limit):
                urls = callback_urls(row.check_url, checks.group_urls(row))
                timeout = timeout_seconds(row.check_timeout_ms)
                claims.append(Claim(row.id, row.producer_group, row.transaction_id,
                                    row.check_times, row.created_at, urls, timeout))
                leases[row.id] = lease_until(self.settings, now, len(urls), timeout)
            checks.take_leases(conn, self.owner, leases)
        return claims

    def payload(self, claim: Claim) -> dict[str, Any] | None:
        """The callback body of check number ``claim.number``, or None when there is
        nothing to ask: the last check was counted but the process died before the
        discard (which is done now), or the transaction is no longer ours to check."""
        if exhausted(self.settings, claim.check_times):
            self._finish(claim, Op.DISCARD, claim.check_times)
            return None
        with self.engine.connect() as conn:
            row = checks.lease_state(conn, claim.txn_id)
            if (row is None or row.state != State.PREPARED or row.lease_owner != self.owner
                    or row.check_times != claim.check_times):
                mine = row is not None and row.lease_owner == self.owner
                log.info("not checking %s: it is %s now", claim.name,
                         row.state if row is not None else "gone")
                if mine:
                    self.release(claim)
                return None
            messages = reads.messages_of(conn, [claim.txn_id])[claim.txn_id]
        return {
            "producer_group": claim.group, "transaction_id": claim.transaction_id,
            "check_times": claim.number, "created_at": claim.created_at,
            "messages": [{"message_id": m.message_id, "topic": m.topic, **message_meta(m),
                          **body_fields(m.body, m.body_is_text)} for m in messages],
        }

    def record(self, claim: Claim, *, result: str, resolution: Resolution, url: str | None,
               detail: str | None) -> bool:
        """Count check number ``claim.number`` with the producer's answer (``result`` as
        the check log and metrics name it), then commit or roll back as the producer
        decided, or discard after the last check. False if the check was not counted:
        the lease was lost to another checker."""
        number = claim.number
        last = number >= self.settings.check_max_times
        decided = resolution is not Resolution.UNKNOWN
        now = utcnow()
        with write_transaction(self.engine) as conn:
            recorded = checks.record_check(
                conn, txn_id=claim.txn_id, owner=self.owner, check_times=number,
                result=result, url=url, detail=detail, now=now,
                # keep the lease while we resolve or discard it, so no one checks it meanwhile
                next_check_at=None if decided or last else next_check(self.settings, now))
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

    def _finish(self, claim: Claim, op: Op, number: int) -> None:
        try:
            result = self.lifecycle.finish(claim.group, claim.transaction_id, op,
                                           source="check",
                                           check_times=number if op is Op.DISCARD else None)
        except DB_ERRORS as exc:  # still leased: checked again once the lease expires
            log.warning("cannot %s %s after check #%d: %s", op.value.lower(), claim.name,
                        number, exc)
            return
        except ApiError as exc:  # resolved meanwhile through the API
            log.info("%s of %s after check #%d not applied: %s", op.value.lower(), claim.name,
                     number, exc.detail)
            self.release(claim)
        else:
            log.info("%s %s after check #%d", _DONE[op], claim.name, number)
            if not result.applied:  # already done through the API (whose write cleared it)
                self.release(claim)
