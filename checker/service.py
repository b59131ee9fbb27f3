"""The check service: schedules checks and asks producers over HTTP.

An APScheduler job polls every ``checker_poll_seconds`` (at most 1 s, so a transaction
is checked within a second of becoming due whatever the check interval). Each poll
claims, with a database lease, no more due transactions than the bounded pool has free
workers (``checker_concurrency``, at most ``checker_batch_size`` per claim), so memory
depends on those settings, not on the backlog, and one slow callback holds one worker;
a producer group holds at most its share of them (``app.domain.checks.Shares``).
While the database is unavailable the poll says so in one line, then at most once per
``checker_outage_log_seconds``, and once more when it is back.
What is due, what is asked and what an answer does are the domain's
(``app.domain.checks``); this module only runs them and makes the calls.

A second job, on its own thread, runs retention (``app.domain.retention``) every
``retention_interval_seconds``; several checkers share that work through the database.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from apscheduler.executors.pool import ThreadPoolExecutor as JobExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Engine

from app import metrics, tracing
from app.config import Settings
from app.domain import clock, spans
from app.domain.callback_policy import CallbackPolicy
from app.domain.checks import DB_ERRORS, Checks, Claim, Delivery
from app.domain.retention import Retention
from app.errors import one_line
from app.logs import safe_url
from checker import callback
from checker.callback import Answer

log = logging.getLogger(__name__)

POLL_JOB_ID = "txmsg-checker-poll"
RETENTION_JOB_ID = "txmsg-retention"
_EXECUTOR = "txmsg-checker"
_RETENTION_EXECUTOR = "txmsg-retention"


def poll_job(service: CheckService) -> None:
    """The scheduled job (module level, registered under POLL_JOB_ID)."""
    service.poll()


def retention_job(service: CheckService) -> None:
    """The scheduled retention run (module level, registered under RETENTION_JOB_ID)."""
    service.expire()


class CheckService:
    """``start()``/``shutdown()`` alongside the API (``txmsg serve``), or ``run_forever()``."""

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        self.owner = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.checks = Checks(settings, self.owner, engine)
        self.retention = Retention(self.checks.engine, settings)
        self._policy = CallbackPolicy.from_settings(settings)
        self._pool = ThreadPoolExecutor(settings.checker_concurrency,
                                        thread_name_prefix="txmsg-check")
        self._busy = 0
        self._slots = threading.Condition()
        self._stopping = threading.Event()
        self._local = threading.local()
        self._outage = OutageLog(settings.checker_outage_log_seconds)
        self._scheduler = BackgroundScheduler(
            timezone="UTC",
            executors={_EXECUTOR: JobExecutor(1), _RETENTION_EXECUTOR: JobExecutor(1)},
            job_defaults={"misfire_grace_time": None})
        # every run would log "Running job ..." at INFO
        for executor in (_EXECUTOR, _RETENTION_EXECUTOR):
            logging.getLogger(f"apscheduler.executors.{executor}").setLevel(logging.WARNING)

    # -- running -------------------------------------------------------------------------

    def start(self) -> None:
        """Start polling in background threads."""
        self._scheduler.add_job(
            poll_job, "interval", args=(self,), seconds=self.settings.checker_poll_seconds,
            id=POLL_JOB_ID, name=POLL_JOB_ID, executor=_EXECUTOR, replace_existing=True,
            max_instances=1, coalesce=True, next_run_time=clock.utcnow())
        self._scheduler.add_job(
            retention_job, "interval", args=(self,),
            seconds=self.settings.retention_interval_seconds, id=RETENTION_JOB_ID,
            name=RETENTION_JOB_ID, executor=_RETENTION_EXECUTOR, replace_existing=True,
            max_instances=1, coalesce=True, next_run_time=clock.utcnow())
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
        self.checks.close()
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

    def expire(self) -> None:
        """One retention run; stops between two batches when the service shuts down."""
        try:
            self.retention.run(self._stopping)
        except DB_ERRORS as exc:  # the next run takes over where this one stopped
            log.warning("retention run stopped: %s", exc)

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
                claims, passed = self.checks.claim(wanted)
            except DB_ERRORS as exc:
                self._outage.failed(exc)
                return
            self._outage.recovered()
            for claim in claims:
                with self._slots:
                    self._busy += 1
                self._pool.submit(self._run, claim)
            # passed over a group at its share: other groups may have more due
            if (len(claims) < wanted and not passed) or time.monotonic() >= deadline:
                return

    def _run(self, claim: Claim) -> None:
        try:
            self.check(claim)
        except Exception:  # the lease expires and another poll retries it
            log.exception("check of %s failed", claim.name)
        finally:
            self.checks.done(claim)
            with self._slots:
                self._busy -= 1
                self._slots.notify_all()

    # -- one check -----------------------------------------------------------------------

    def check(self, claim: Claim) -> None:
        """Deliver check number ``claim.number`` of a claimed transaction and record it."""
        delivery = self.checks.delivery(claim)
        if delivery is None:
            return
        if tracing.TRACER is not None:  # the commit or rollback it leads to: a child span
            with spans.checking(claim.group, claim.transaction_id, claim.number,
                                delivery.body["messages"]) as span:
                answer = self._ask(claim, delivery)
                spans.checked(span, answer.result.value, answer.resolution.value)
            return
        self._ask(claim, delivery)

    def _ask(self, claim: Claim, delivery: Delivery) -> Answer:
        """Ask the producer, and record its answer."""
        started = time.perf_counter()
        answer = self._caller().ask(claim.urls, delivery.body, claim.timeout, delivery.signer)
        seconds = time.perf_counter() - started
        self._log(claim, answer, seconds)
        self.checks.record(claim, result=answer.result.value, resolution=answer.resolution,
                           url=answer.url, detail=answer.detail,
                           duration_ms=round(seconds * 1000, 3))
        return answer

    def _caller(self) -> callback.Caller:
        caller = getattr(self._local, "caller", None)
        if caller is None:
            caller = self._local.caller = callback.Caller(self._policy)
        return caller

    def _log(self, claim: Claim, answer: Answer, seconds: float) -> None:
        """The check's log line and duration metric (the result is counted once recorded)."""
        metrics.CHECK_DURATION.labels(answer.result.value).observe(seconds)
        level = logging.INFO if answer.result in _PLAIN_RESULTS else logging.WARNING
        url, ms = safe_url(answer.url), round(seconds * 1000, 3)
        log.log(level, "check #%d of %s: %s from %s in %.1f ms%s", claim.number, claim.name,
                answer.result.value, url or "-", ms,
                f" ({answer.detail})" if answer.detail else "",
                extra={"transaction": claim.transaction_id, "group": claim.group, "url": url,
                       "check": claim.number, "result": answer.result.value,
                       "duration_ms": ms})


class OutageLog:
    """One warning when the database becomes unavailable, then at most one per ``every``
    seconds while it stays so, and one line when it is back (a poll every 0.5 s would
    otherwise log each failure, with its SQL)."""

    def __init__(self, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self._clock = clock
        self._since: float | None = None
        self._said = 0.0

    def failed(self, exc: BaseException) -> None:
        now = self._clock()
        if self._since is None:
            self._since = self._said = now
            log.warning("database unavailable, checks paused: %s", one_line(exc))
        elif now - self._said >= self.every:
            self._said = now
            log.warning("database still unavailable after %.0f s, checks paused: %s",
                        now - self._since, one_line(exc))

    def recovered(self) -> None:
        if self._since is not None:
            log.info("database available again after %.1f s, checks resumed",
                     self._clock() - self._since)
            self._since = None


_PLAIN_RESULTS = {callback.Result.COMMIT, callback.Result.ROLLBACK, callback.Result.UNKNOWN}
