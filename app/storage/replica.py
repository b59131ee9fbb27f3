"""Reads that may lag (TXMSG_READ_DATABASE_URL's standby), with the primary behind them.

A read goes to the replica while it answers; one it cannot answer (unreachable, or no
answer within its 1 s timeouts: ``app.storage.db.replica_settings``) goes to the
primary, and so do the reads of the next few seconds, so that a replica that is down
costs the readers one timeout now and then, not one each."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine, text
from sqlalchemy import exc as sa_exc

from app.errors import DatabaseUnavailable, one_line

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_SECONDS = 5.0  # a replica that failed is tried again after this long


class Reads:
    """Where reads go: the replica (None: none configured) unless it is down, else the
    primary."""

    def __init__(self, replica: Engine | None, primary: Engine,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.replica = replica if replica is not primary else None
        self.primary = primary
        self._clock = clock
        self._down_until = 0.0
        self._lock = threading.Lock()

    @property
    def engine(self) -> Engine:
        """The engine to read from now (the replica, unless it failed a moment ago)."""
        if self.replica is None or self._clock() < self._down_until:
            return self.primary
        return self.replica

    def run(self, read: Callable[[Engine], T],
            lagging: Callable[[T], bool] | None = None) -> T:
        """``read`` on the replica, or on the primary if the replica does not answer.
        ``lagging``: whether the replica's answer may only be behind the primary's (a row
        not there yet); the primary's then stands, unless the primary does not answer."""
        engine = self.engine
        if engine is self.primary:
            return read(engine)
        try:
            answer = read(engine)
        except DatabaseUnavailable as exc:
            self._failed(exc)
            return read(self.primary)
        if lagging is None or not lagging(answer):
            return answer
        try:
            return read(self.primary)
        except DatabaseUnavailable:
            return answer  # the primary is down: the replica's is the answer there is

    def replica_reachable(self) -> bool | None:
        """Whether the replica answers a query now (None: no replica); for ``/readyz``."""
        if self.replica is None:
            return None
        try:
            with self.replica.connect() as conn:
                conn.execute(text("SELECT 1"))
        except (DatabaseUnavailable, sa_exc.SQLAlchemyError) as exc:
            self._failed(exc)
            return False
        with self._lock:
            self._down_until = 0.0
        return True

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            first = self._clock() >= self._down_until
            self._down_until = self._clock() + RETRY_SECONDS
        if first:
            log.warning("the read replica does not answer (%s); reading from the primary "
                        "for %g s", one_line(exc), RETRY_SECONDS)
