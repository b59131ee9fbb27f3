"""The transaction state machine, whole: every state against every operation."""

from __future__ import annotations

import pytest

from app.domain.states import Outcome, decide, offered, target
from app.vocabulary import Op, State

A, R, C = Outcome.APPLY, Outcome.REPEAT, Outcome.CONFLICT
# rows: the state now; columns: COMMIT, ROLLBACK, DISCARD, RESUME
TABLE = {
    State.PREPARED: (A, A, A, C),
    State.COMMITTED: (R, C, C, C),
    State.ROLLED_BACK: (C, R, C, C),
    State.DISCARDED: (A, A, C, A),
}
OPS = (Op.COMMIT, Op.ROLLBACK, Op.DISCARD, Op.RESUME)


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("op", OPS)
def test_every_state_against_every_operation(state: State, op: Op) -> None:
    expected = TABLE[state][OPS.index(op)]
    assert decide(state, op) is expected
    assert offered(state, op) is (expected is A)


def test_targets() -> None:
    assert [target(op) for op in OPS] == [State.COMMITTED, State.ROLLED_BACK, State.DISCARDED,
                                         State.PREPARED]


def test_every_state_is_in_the_table() -> None:
    assert set(TABLE) == set(State)
