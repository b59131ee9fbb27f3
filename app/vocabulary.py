"""The words of the transaction state machine, below every layer so that all can import them.

Storage, domain, API, OpenAPI and checker spell a state, an operation or a check
resolution only through these enums; SQL text that must name a state builds it from them.
The rules that connect the words (which operation may follow which) live in
``app.domain.states``.
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
