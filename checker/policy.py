"""The check policy: whom to ask, for how long a claim holds, what an answer leads to.

The timing rules themselves (first check after max(transaction timeout, check
immunity), then at most once per check interval, discard after the last check) are
encoded in ``txn.next_check_at`` and the check count; this module holds the arithmetic.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from app.config import Settings
from app.domain.messages import ProducerGroupIn
from app.domain.states import Op
from app.vocabulary import Resolution

# when the group's registration is gone but the transaction named its own check_url
DEFAULT_TIMEOUT_MS: int = ProducerGroupIn.model_fields["check_timeout_ms"].default
# one URL takes at most: connect (t), wait for the answer (t), finish reading it (t)
ATTEMPT_TIMEOUTS = 3

OP_OF = {Resolution.COMMIT: Op.COMMIT, Resolution.ROLLBACK: Op.ROLLBACK}


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
