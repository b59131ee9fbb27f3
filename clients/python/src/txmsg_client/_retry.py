"""When a call that is safe to repeat (a send with its transaction id, a commit, a
rollback, a registration) is tried again, without I/O: after a connection error or a 503,
with a growing, jittered wait, until its deadline (``retry_seconds``)."""

from __future__ import annotations

import random
import time

from txmsg_client.errors import TxmsgError

FIRST_WAIT = 0.1
LONGEST_WAIT = 2.0


def retryable(exc: BaseException, transport_errors: tuple[type[BaseException], ...]) -> bool:
    """The service unreachable (or too slow), or unavailable for now (503)."""
    if isinstance(exc, TxmsgError):
        return exc.status == 503
    return isinstance(exc, transport_errors)


class Waits:
    """The waits of one call's retries: ``after(exc)`` is how long to wait before the next
    try, or None to raise."""

    def __init__(self, retry_seconds: float, transport_errors: tuple[type[BaseException], ...],
                 ) -> None:
        self._now = time.monotonic
        self.deadline = self._now() + retry_seconds
        self.transport_errors = transport_errors
        self.attempt = 0

    def after(self, exc: BaseException) -> float | None:
        left = self.deadline - self._now()
        if left <= 0 or not retryable(exc, self.transport_errors):
            return None
        wait = min(LONGEST_WAIT, FIRST_WAIT * 2 ** self.attempt)
        self.attempt += 1
        return float(min(left, wait * random.uniform(0.5, 1.0)))
