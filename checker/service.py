"""The check service: finds due transactions, asks their producers, applies the answers.

An APScheduler job polls every ``checker_poll_seconds`` (at most 1 s, so a transaction
is checked within a second of becoming due whatever the check interval). Each poll
claims, with a database lease, no more due transactions than the bounded pool has free
workers (``checker_concurrency``, at most ``checker_batch_size`` per claim), so memory
depends on those settings, not on the backlog, and one slow callback holds one worker.
Answers go through ``Lifecycle.finish``, the API's own code path. Correctness across
processes comes from the leases (see ``app.storage.checks``), not from running one
checker.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from app import metrics
from app.config import Settings
from app.domain.lifecycle import Lifecycle, utcnow
from app.domain.reads import body_fields, message_meta
from app.domain.states import Op, State
from app.errors import ApiError, DatabaseUnavailable
from app.storage import checks, txns
from app.storage.db import make_engine, write_transaction
from app.vocabulary import Resolution
from checker import callback, policy
from checker.callback import Answer

log = logging.getLogger(__name__)

POLL_JOB_ID = "txmsg-checker-poll"
_EXECUTOR = "txmsg-checker"
_DB_ERRORS = (sa_exc.SQLAlchemyError, DatabaseUnavailable)


@dataclass(frozen=True)
class Claim:
    """A due transaction leased to this checker."""

    txn_id: int
    group: str
    transaction_id: str
    check_times: int  # checks already counted
    created_at: datetime
    urls: list[str]
    timeout: float

    @property
    def name(self) -> str:
        return f"{self.group}/{self.transaction_id}"


def poll_job(service: CheckService) -> None:
    """The scheduled job (module level, registered under POLL_JOB_ID)."""
    service.poll()


class CheckService:
    """``start()``/``shutdown()`` alongside the API (``txmsg serve``), or ``run_forever()``."""

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        self._owns_engine = engine is None
        self.engine = engine or make_engine(settings)
        self.owner = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lifecycle = Lifecycle(self.engine, settings)
        self._pool = ThreadPoolExecutor(settings.checker_concurrency,
                                        thread_name_prefix="txmsg-check")
        self._busy = 0
        self._slots = threading.Condition()
        self._stopping = threading.Event()
        self._local = threading.local()
        self._scheduler = BackgroundScheduler(
            timezone="UTC", executors={_EXECUTOR: JobExecutor(1)},
            job_defaults={"misfire_grace_time": None})
        # every poll would log "Running job ..." at INFO
        logging.getLogger(f"apscheduler.executors.{_EXECUTOR}").setLevel(logging.WARNING)

    # -- running -------------------------------------------------------------------------

    def start(self) -> None:
        """Start polling in background threads."""
        self._scheduler.add_job(
            poll_job, "interval", args=(self,), seconds=self.settings.checker_poll_seconds,
            id=POLL_JOB_ID, name=POLL_JOB_ID, executor=_EXECUTOR, replace_existing=True,
            max_instances=1, coalesce=True, next_run_time=utcnow())
        self._scheduler.start()
        log.info("check service %s started (poll %.2gs, %d workers)", self.owner,
                 self.settings.checker_poll_seconds, self.settings.checker_concurrency)

    def shutdown(self) -> None:
        """Stop polling, let the checks in flight finish (and be recorded), release resources."""
        self._stopping.set()
        with self._slots:
            self._slots.notify_all()
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.lifecycle.close()
        if self._owns_engine:
            self.engine.dispose()
        log.info("check service %s stopped", self.owner)

    def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down cleanly (``txmsg checker``)."""
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        self.start()
        try:
            while not stop.wait(1.0):
                pass
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- claiming ------------------------------------------------------------------------

    def poll(self) -> None:
        """Claim due transactions while workers are free; keep going while there is a
        backlog, for most of one poll period (the next poll takes over)."""
        deadline = time.monotonic() + 0.8 * self.settings.checker_poll_seconds
        while not self._stopping.is_set():
            with self._slots:
                free = self.settings.checker_concurrency - self._busy
                if free == 0:
                    self._slots.wait(max(0.0, deadline - time.monotonic()))
                    if time.monotonic() >= deadline:
                        return
                    continue
            wanted = min(free, self.settings.checker_batch_size)
            try:
                claims = self._claim(wanted)
            except _DB_ERRORS as exc:
                log.warning("cannot claim due transactions: %s", exc)
                return
            for claim in claims:
                with self._slots:
                    self._busy += 1
                self._pool.submit(self._run, claim)
            if len(claims) < wanted or time.monotonic() >= deadline:
                return

    def _claim(self, limit: int) -> list[Claim]:
        now = utcnow()
        with self.engine.connect() as conn:
            if not checks.any_due(conn, now):
                return []
        with write_transaction(self.engine) as conn:
            claims, leases = [], {}
            for row in checks.lock_due(conn, now, limit):
                urls = policy.callback_urls(row.check_url, checks.group_urls(row))
                timeout = policy.timeout_seconds(row.check_timeout_ms)
                claims.append(Claim(row.id, row.producer_group, row.transaction_id,
                                    row.check_times, row.created_at, urls, timeout))
                leases[row.id] = policy.lease_until(self.settings, now, len(urls), timeout)
            checks.take_leases(conn, self.owner, leases)
        return claims

    def _run(self, claim: Claim) -> None:
        try:
            self.check(claim)
        except Exception:  # the lease expires and another poll retries it
            log.exception("check of %s failed", claim.name)
        finally:
            with self._slots:
                self._busy -= 1
                self._slots.notify_all()

    # -- one check -----------------------------------------------------------------------

    def check(self, claim: Claim) -> None:
        """Deliver check number ``check_times + 1`` of a claimed transaction and apply it."""
        if policy.exhausted(self.settings, claim.check_times):
            # the last check was counted but the process died before the discard
            self._finish(claim, Op.DISCARD, claim.check_times)
            return
        number = claim.check_times + 1
        payload = self._payload(claim, number)
        if payload is None:
            return
        answer = callback.ask(self._session(), claim.urls, payload, claim.timeout)
        last = number >= self.settings.check_max_times
        decided = answer.resolution is not Resolution.UNKNOWN
        now = utcnow()
        with write_transaction(self.engine) as conn:
            recorded = checks.record_check(
                conn, txn_id=claim.txn_id, owner=self.owner, check_times=number,
                result=answer.result.value, url=answer.url, detail=answer.detail, now=now,
                # keep the lease while we resolve or discard it, so no one checks it meanwhile
                next_check_at=None if decided or last else policy.next_check(self.settings, now))
        self._log(claim, number, answer, recorded)
        if not recorded:
            return
        metrics.CHECKS.labels(answer.result.value).inc()
        if decided:
            self._finish(claim, policy.OP_OF[answer.resolution], number)
        elif last:
            self._finish(claim, Op.DISCARD, number)

    def _payload(self, claim: Claim, number: int) -> bytes | None:
        """The callback body, or None if the transaction is no longer ours to check."""
        with self.engine.connect() as conn:
            row = checks.lease_state(conn, claim.txn_id)
            if (row is None or row.state != State.PREPARED or row.lease_owner != self.owner
                    or row.check_times != claim.check_times):
                mine = row is not None and row.lease_owner == self.owner
                log.info("not checking %s: it is %s now", claim.name,
                         row.state if row is not None else "gone")
                if mine:
                    self._release(claim)
                return None
            messages = txns.messages_of(conn, [claim.txn_id])[claim.txn_id]
        body: dict[str, Any] = {
            "producer_group": claim.group, "transaction_id": claim.transaction_id,
            "check_times": number, "created_at": claim.created_at,
            "messages": [{"message_id": m.message_id, "topic": m.topic, **message_meta(m),
                          **body_fields(m.body, m.body_is_text)} for m in messages],
        }
        return orjson.dumps(body, option=orjson.OPT_UTC_Z)

    def _finish(self, claim: Claim, op: Op, number: int) -> None:
        try:
            result = self.lifecycle.finish(claim.group, claim.transaction_id, op,
                                           source="check",
                                           check_times=number if op is Op.DISCARD else None)
        except _DB_ERRORS as exc:  # still leased: checked again once the lease expires
            log.warning("cannot %s %s after check #%d: %s", op.value.lower(), claim.name,
                        number, exc)
            return
        except ApiError as exc:  # resolved meanwhile through the API
            log.info("%s of %s after check #%d not applied: %s", op.value.lower(), claim.name,
                     number, exc.detail)
            self._release(claim)
        else:
            log.info("%s %s after check #%d", _DONE[op], claim.name, number)
            if not result.applied:  # already done through the API (whose write cleared it)
                self._release(claim)

    def _release(self, claim: Claim) -> None:
        with write_transaction(self.engine) as conn:
            checks.release(conn, claim.txn_id, self.owner)

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = callback.new_session()
        return session

    def _log(self, claim: Claim, number: int, answer: Answer, recorded: bool) -> None:
        level = logging.INFO if answer.result in _PLAIN_RESULTS else logging.WARNING
        log.log(level, "check #%d of %s: %s from %s%s%s", number, claim.name,
                answer.result.value, answer.url or "-",
                f" ({answer.detail})" if answer.detail else "",
                "" if recorded else " - not counted: lease lost to another checker")


_DONE = {Op.COMMIT: "committed", Op.ROLLBACK: "rolled back", Op.DISCARD: "discarded"}
_PLAIN_RESULTS = {callback.Result.COMMIT, callback.Result.ROLLBACK, callback.Result.UNKNOWN}
