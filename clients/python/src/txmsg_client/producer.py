"""The producer: one producer group's calls to the service, and the messages it sends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import requests

from txmsg_client import _calls as calls
from txmsg_client import _local
from txmsg_client._http import Transport
from txmsg_client._wire import Message
from txmsg_client.errors import AlreadyCommitted, TxmsgError
from txmsg_client.resolution import Resolution

if TYPE_CHECKING:
    from txmsg_client.barrier import Barrier

log = logging.getLogger(__name__)

DEFAULT_RETRY_SECONDS = 30.0


@dataclass
class TransactionResult:
    """What ``send_in_transaction`` did: the local transaction's resolution and the state now."""

    transaction_id: str
    resolution: Resolution
    state: str  # COMMITTED, ROLLED_BACK, or PREPARED (left to the check)
    messages: list[dict[str, Any]]
    end_error: Exception | None = field(default=None, repr=False)


@dataclass
class LocalTransaction:
    """A ``local_transaction`` under way: ``connection`` is the database transaction of the
    block; ``state`` is COMMITTED once the block committed and the service knows it,
    PREPARED while the check has yet to commit it (``end_error`` says why)."""

    transaction_id: str
    messages: list[dict[str, Any]]
    connection: Any = field(default=None, repr=False)
    state: str = "PREPARED"
    end_error: Exception | None = field(default=None, repr=False)


class Producer:
    """One producer group's client of a txmsg service; ``token``: a bearer token with the
    scope ``produce:<group>``, for a service with access control on. ``session``: a
    ``requests.Session`` of the caller's (``close`` leaves it open), else one of its own.

    ``send`` (with its transaction id: the client makes one when none is given),
    ``commit``, ``rollback`` and ``register`` are safe to repeat: a connection error or a
    503 is tried again, with a growing wait, for up to ``retry_seconds`` (0: never)."""

    def __init__(self, base_url: str, group: str, *, timeout: float = 10.0,
                 session: requests.Session | None = None, token: str | None = None,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS) -> None:
        self._transport = Transport(base_url, token, timeout, session, retry_seconds)
        self.base_url = self._transport.base_url
        self.group = group
        self.timeout = timeout

    def register(self, check_urls: Sequence[str], check_timeout_ms: int = 3000) -> dict[str, Any]:
        """Register (or replace) the URLs the service asks about unresolved transactions.

        The answer's ``signing_secret`` verifies the checks (``CheckerServer``'s
        ``signing_secret``); it stays the same when the group registers again.
        """
        return self._transport.do(calls.register(self.group, check_urls, check_timeout_ms))

    def registration(self) -> dict[str, Any]:
        """The group's registration, with its ``signing_secret``."""
        return self._transport.do(calls.registration(self.group))

    def rotate_signing_secret(self) -> dict[str, Any]:
        """A new ``signing_secret``; checks are signed with the previous one too until
        ``previous_secret_expires_at``, time to move the callback endpoints to the new one."""
        return self._transport.do(calls.rotate_signing_secret(self.group))

    def send(self, messages: Message | Sequence[Message], *, transaction_id: str | None = None,
             check_url: str | None = None,
             check_immunity_seconds: int | None = None,
             acks: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Store half messages (one message or several, one transaction): PREPARED.

        Sending the same ``transaction_id`` again with the same messages is a safe retry.
        ``acks`` (``[{"topic", "subscription", "offsets"}]``): messages received from
        subscriptions that the transaction's commit acknowledges, and its rollback
        releases (``Consumer.run`` with a producer builds them).
        """
        return self._transport.do(calls.send(self.group, messages, transaction_id, check_url,
                                             check_immunity_seconds, acks))

    def commit(self, transaction_id: str) -> dict[str, Any]:
        """Make the messages visible; returns their offsets. Safe to repeat."""
        return self._transport.do(calls.finish(self.group, transaction_id, "commit"))

    def rollback(self, transaction_id: str) -> dict[str, Any]:
        """Drop the messages for good. Safe to repeat."""
        return self._transport.do(calls.finish(self.group, transaction_id, "rollback"))

    def get(self, transaction_id: str) -> dict[str, Any]:
        """The transaction: state, check count, messages."""
        return self._transport.do(calls.transaction(self.group, transaction_id))

    def read(self, topic: str, from_offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """A page of a topic's committed messages, from ``from_offset`` (``next_offset`` next)."""
        return self._transport.do(calls.read(topic, from_offset, limit))

    def resume_check(self, transaction_id: str) -> dict[str, Any]:
        """Put a DISCARDED transaction back to PREPARED (checked again from 1)."""
        return self._transport.do(calls.finish(self.group, transaction_id, "resume-check"))

    def send_in_transaction(
        self, messages: Message | Sequence[Message],
        local_transaction: Callable[[dict[str, Any]], Resolution | str], *,
        transaction_id: str | None = None, check_url: str | None = None,
        check_immunity_seconds: int | None = None,
    ) -> TransactionResult:
        """Send half messages, run the local transaction, then commit, roll back or leave
        the outcome to the check (UNKNOWN).

        ``local_transaction`` gets the send answer (with ``transaction_id``). If it raises,
        the transaction is left to the check and the exception propagates. If the commit
        or rollback cannot reach the service, the check resolves it later: the result's
        state is then PREPARED and ``end_error`` says why.
        """
        sent = self.send(messages, transaction_id=transaction_id, check_url=check_url,
                         check_immunity_seconds=check_immunity_seconds)
        txid = sent["transaction_id"]
        resolution = Resolution(local_transaction(sent))
        result = TransactionResult(txid, resolution, "PREPARED", sent["messages"])
        if resolution is Resolution.UNKNOWN:
            return result
        try:
            answer = self.commit(txid) if resolution is Resolution.COMMIT else self.rollback(txid)
        except (requests.RequestException, TxmsgError) as exc:
            if _local.is_refusal(exc):
                raise
            log.warning("could not %s transaction %s, the check will: %s",
                        resolution.value.lower(), txid, exc)
            result.end_error = exc
            return result
        result.state = answer["state"]
        result.messages = answer.get("messages", result.messages)
        return result

    @contextmanager
    def local_transaction(
        self, barrier: Barrier, messages: Message | Sequence[Message], *,
        transaction_id: str | None = None, check_url: str | None = None,
        check_immunity_seconds: int | None = None,
    ) -> Iterator[LocalTransaction]:
        """Send half messages, run the block in a database transaction of ``barrier``'s
        engine whose first statement writes the barrier row, commit it, then commit the
        messages; ``barrier.checker`` answers the checks.

        The block runs only when the send answers a PREPARED transaction: an id used again
        after it was resolved raises ``NotPrepared`` (``AlreadyCommitted`` when committed);
        a retry with other settings or messages raises the service's 409. An exception in
        the block rolls back the database transaction, writes the barrier's rollback marker,
        rolls back the messages and is raised again. Once the database transaction has
        committed, a commit that cannot reach the service leaves ``state`` PREPARED (the
        check commits it); one the service refuses (409) is raised.
        """
        sent = self.send(messages, transaction_id=transaction_id, check_url=check_url,
                         check_immunity_seconds=check_immunity_seconds)
        local = LocalTransaction(sent["transaction_id"], sent["messages"])
        _local.require_prepared(sent)
        database = barrier.begin(self.group, local.transaction_id)
        try:
            local.connection = database.__enter__()
        except AlreadyCommitted:
            self._commit(local)
            raise
        except BaseException:
            self._settle(barrier, local)
            raise
        try:
            yield local
        except BaseException as exc:
            try:
                database.__exit__(type(exc), exc, exc.__traceback__)
            finally:
                self._settle(barrier, local)
            raise
        try:
            database.__exit__(None, None, None)
        except BaseException:
            self._settle(barrier, local)
            raise
        self._commit(local)

    def _settle(self, barrier: Barrier, local: LocalTransaction) -> None:
        """The local work did not commit here: finish the messages as the barrier says, the
        check's own answer (another local transaction of this id may have committed)."""
        try:
            resolution = barrier.resolve(self.group, local.transaction_id)
        except Exception as exc:  # noqa: BLE001 - the caller's error is the one raised
            _local.unsettled(local.transaction_id, exc)
            return
        _local.settled(local.transaction_id, resolution)
        try:
            if resolution is Resolution.ROLLBACK:
                self.rollback(local.transaction_id)
            elif resolution is Resolution.COMMIT:
                self._commit(local)
        except (requests.RequestException, TxmsgError) as exc:
            log.warning("could not settle transaction %s, the check will: %s",
                        local.transaction_id, exc)

    def _commit(self, local: LocalTransaction) -> None:
        """Commit after the local work committed: left to the check when the service cannot
        be reached, raised when it refuses."""
        try:
            answer = self.commit(local.transaction_id)
        except (requests.RequestException, TxmsgError) as exc:
            if _local.is_refusal(exc):
                raise
            log.warning("could not commit transaction %s, the check will: %s",
                        local.transaction_id, exc)
            local.end_error = exc
            return
        local.state = answer["state"]
        local.messages = answer.get("messages", local.messages)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
