"""The transaction state machine: the one place that says which operation may follow which.

PREPARED --COMMIT--> COMMITTED        PREPARED --ROLLBACK--> ROLLED_BACK
PREPARED --DISCARD-> DISCARDED        (the checker, after the last unanswered check)
DISCARDED --COMMIT/ROLLBACK--> resolved late; DISCARDED --RESUME--> PREPARED (checked again)
Repeating the operation that produced the current state is idempotent.
"""

from __future__ import annotations

from enum import StrEnum

from app.vocabulary import Op, State

__all__ = ["Outcome", "decide", "offered", "target"]


class Outcome(StrEnum):
    APPLY = "APPLY"          # write the op row and move to the target state
    REPEAT = "REPEAT"        # already done: answer as the first time, write nothing
    CONFLICT = "CONFLICT"    # refused: 409


_TARGET = {
    Op.COMMIT: State.COMMITTED,
    Op.ROLLBACK: State.ROLLED_BACK,
    Op.DISCARD: State.DISCARDED,
    Op.RESUME: State.PREPARED,
}
_ALLOWED_FROM = {
    Op.COMMIT: {State.PREPARED, State.DISCARDED},
    Op.ROLLBACK: {State.PREPARED, State.DISCARDED},
    Op.DISCARD: {State.PREPARED},
    Op.RESUME: {State.DISCARDED},
}
_REPEATABLE = {Op.COMMIT, Op.ROLLBACK}


def target(op: Op) -> State:
    return _TARGET[op]


def offered(state: State, op: Op) -> bool:
    """Whether ``op`` would change a transaction in ``state`` (what a page offers to do)."""
    return state in _ALLOWED_FROM[op]


def decide(state: State, op: Op) -> Outcome:
    if offered(state, op):
        return Outcome.APPLY
    if op in _REPEATABLE and state == _TARGET[op]:
        return Outcome.REPEAT
    return Outcome.CONFLICT
