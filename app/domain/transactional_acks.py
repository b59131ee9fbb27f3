"""Transactional acks: the offsets a send acknowledges, held by its transaction until
it resolves; what its commit, rollback, discard or resume does to them."""

from __future__ import annotations

from sqlalchemy import Connection

from app.domain import clock
from app.domain.subscription_settings import found
from app.errors import Conflict
from app.problems import ProblemCode
from app.storage import ordering, transactions
from app.storage import transactional_acks as store
from app.storage.schema import AnyRow
from app.vocabulary import Op


def _refusal(row: AnyRow | None, txn_id: int, topic: str, name: str, offset: int
             ) -> Conflict | None:
    """Why transaction ``txn_id`` cannot hold this offset (its row, None when there is
    none: acknowledged, or never delivered), or None."""
    if row is None or row.deliveries == 0:
        return Conflict(f"offset {offset} of subscription {name!r} on {topic!r} is not "
                        "delivered and unacknowledged", code=ProblemCode.ACK_NOT_PENDING,
                        topic=topic, subscription=name, offset=offset)
    if row.held_by is not None and row.held_by != txn_id:
        return Conflict(f"offset {offset} of subscription {name!r} on {topic!r} is held "
                        "by another unresolved transaction", code=ProblemCode.ACK_CONFLICT,
                        topic=topic, subscription=name, offset=offset)
    return None


def hold_acks(conn: Connection, txn_id: int, acks: dict[tuple[str, str], list[int]]) -> int:
    """Hold these offsets for a new transaction (in its send's database transaction), and
    keep them as its acks, or refuse: 404 for an unknown subscription, 409
    ``ack_not_pending`` for an offset not delivered or already acknowledged, 409
    ``ack_conflict`` for one another unresolved transaction holds. How many offsets are
    held."""
    held = 0
    for (topic, name), offsets in acks.items():  # sorted: locks in a fixed order
        sub = found(conn, topic, name)
        rows = store.states_at(conn, sub.id, offsets)
        for offset in offsets:
            refusal = _refusal(rows.get(offset), txn_id, topic, name, offset)
            if refusal is not None:
                raise refusal
        store.hold(conn, sub.id, offsets, txn_id)
        store.record_acks(conn, txn_id, sub.id, offsets)
        held += len(offsets)
    return held


class FinishAcks:
    """What one finish batch does to the acks of its transactions, command by command, in
    the batch's database transaction.

    A transaction that holds its acks: its commit acknowledges them, its rollback or
    discard releases them (commits and rollbacks together after the batch's decisions,
    in two statements; a discard at once, since a later command of the batch may take
    them again). One that holds none (``held_acks`` 0: a discard released them) takes
    them again: its commit acknowledges them if each is still delivered and
    unacknowledged and held by no other transaction, else it is refused (409
    ``ack_not_pending`` / ``ack_conflict``) and nothing changes; its resume holds them
    again if it can (all or none), else leaves them free (its commit will try again)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.holding: dict[int, bool] = {}
        self.committed: list[int] = []
        self.rolled_back: list[int] = []
        self.released: list[int] = []  # transactions whose holds this batch released
        self.resolved: list[int] = []
        self.topics: set[str] = set()
        self.freed: list[AnyRow] = []  # (subscription_id, ordering_key) acknowledged

    def apply(self, row: AnyRow, op: Op) -> Conflict | None:
        """Record what ``op`` (to be applied to transaction ``row``) does to its acks; the
        refusal of a commit that cannot take them again (then nothing was written)."""
        if row.held_acks is None:
            return None
        holding = self.holding.setdefault(row.id, row.held_acks > 0)
        if op is Op.COMMIT and not holding:
            taken = self._take(row.id)
            if isinstance(taken, Conflict):
                return taken
            for sub_id, offsets in taken.items():
                self.freed += store.drop_at(self.conn, sub_id, offsets)
        elif op is Op.COMMIT:
            self.committed.append(row.id)
        elif op is Op.ROLLBACK and holding:
            self.rolled_back.append(row.id)
            self.released.append(row.id)
        elif op is Op.DISCARD and holding:
            self.topics.update(store.holders(self.conn, [row.id]))
            store.settle(self.conn, [row.id], clock.utcnow(), commit=False)
            transactions.mark_held(self.conn, row.id, 0)
            self.released.append(row.id)
            self.holding[row.id] = False
        elif op is Op.RESUME and not holding:
            taken = self._take(row.id)
            if not isinstance(taken, Conflict):
                for sub_id, offsets in taken.items():
                    store.hold(self.conn, sub_id, offsets, row.id)
                transactions.mark_held(self.conn, row.id, sum(map(len, taken.values())))
                self.holding[row.id] = True
        if op in (Op.COMMIT, Op.ROLLBACK):
            self.resolved.append(row.id)
        return None

    def _take(self, txn_id: int) -> dict[int, list[int]] | Conflict:
        """The transaction's acks by subscription, their rows locked, if it can hold each
        of them now; else why not."""
        wanted: dict[int, list[int]] = {}
        names: dict[int, tuple[str, str]] = {}
        for r in store.recorded_acks(self.conn, txn_id):
            wanted.setdefault(r.subscription_id, []).append(r.queue_offset)
            names[r.subscription_id] = (r.topic, r.name)
        for sub_id, offsets in wanted.items():  # by subscription and offset: locks in order
            rows = store.states_at(self.conn, sub_id, offsets)
            for offset in offsets:
                refusal = _refusal(rows.get(offset), txn_id, *names[sub_id], offset)
                if refusal is not None:
                    return refusal
        return wanted

    def write(self) -> set[str]:
        """After the batch's decisions, before it publishes: the commits' and rollbacks'
        acks settled. Only the held offset rows are touched (no other writer locks a held
        row), not the subscription rows: the cursors move at the subscriptions' next
        receive or ack. The topics where offsets were released (their waiting receives
        may look again at once)."""
        if self.rolled_back:
            self.topics.update(store.holders(self.conn, self.rolled_back))
            store.settle(self.conn, self.rolled_back, clock.utcnow(), commit=False)
        if self.committed:
            self.freed += store.settle(self.conn, self.committed, clock.utcnow(), commit=True)
        store.forget_acks(self.conn, self.resolved)
        self._promote()
        return self.topics

    def _promote(self) -> None:
        """On key_shared subscriptions, the next message of each key acknowledged here is
        deliverable (``app.storage.ordering``): in the batch's database transaction."""
        if not self.freed:
            return
        keys: dict[int, list[str]] = {}
        for r in self.freed:
            keys.setdefault(r.subscription_id, []).append(r.ordering_key)
        topics = store.topics_of(self.conn, keys)
        now = clock.utcnow()
        for sub_id in sorted(keys):
            ordering.take_turns(self.conn, sub_id, keys[sub_id])
            if ordering.promote(self.conn, sub_id, topics[sub_id], keys[sub_id], now):
                self.topics.add(topics[sub_id])
