"""The words of the transaction state machine, below every layer so that all can import them.

Storage, domain, API, OpenAPI and checker spell a state, an operation or a check
resolution only through these enums; SQL text that must name a state builds it from them.
The rules that connect the words (which operation may follow which) live in
``app.domain.states``. The check results are here too: the metrics name every one of them
from the first scrape, and the checker, which sets them, sits above ``app``.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"


# the states a producer's decision ends in (COMMIT or ROLLBACK, through the API or a check)
RESOLVED = frozenset({State.COMMITTED, State.ROLLED_BACK})


class Op(StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    DISCARD = "DISCARD"
    RESUME = "RESUME"


class Resolution(StrEnum):
    """A producer's answer to a check."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class CheckResult(StrEnum):
    """The ``result`` of one check (``check_log``, ``txmsg_checks_total``): the producer's
    resolution when a URL answered 2xx with one, else what went wrong (``checker.callback``
    says when each applies)."""

    COMMIT = Resolution.COMMIT.value
    ROLLBACK = Resolution.ROLLBACK.value
    UNKNOWN = Resolution.UNKNOWN.value
    BAD_RESPONSE = "BAD_RESPONSE"
    HTTP_ERROR = "HTTP_ERROR"
    TIMEOUT = "TIMEOUT"
    REFUSED = "REFUSED"
    BLOCKED = "BLOCKED"
    NO_CALLBACK = "NO_CALLBACK"
