"""``Producer`` for asyncio: the same calls as coroutines, on an ``httpx.AsyncClient``."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Self

import httpx

from txmsg_client import _calls as calls
from txmsg_client import _local
from txmsg_client._wire import Message
from txmsg_client.aio._http import TRANSPORT_ERRORS, AsyncTransport
from txmsg_client.errors import AlreadyCommitted, TxmsgError
from txmsg_client.producer import DEFAULT_RETRY_SECONDS, LocalTransaction, TransactionResult
from txmsg_client.resolution import Resolution

if TYPE_CHECKING:
    from txmsg_client.aio.barrier import AsyncBarrier

log = logging.getLogger(__name__)

LocalWork = Callable[[dict[str, Any]], Resolution | str | Awaitable[Resolution | str]]


class AsyncProducer:
    """One producer group's asyncio client of a txmsg service (see ``Producer``).

    ``client``: an ``httpx.AsyncClient`` of the caller's (``aclose`` leaves it open), else
    one of its own; use ``async with``, or ``await aclose()``.
    """

    def __init__(self, base_url: str, group: str, *, timeout: float = 10.0,
                 client: httpx.AsyncClient | None = None, token: str | None = None,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS) -> None:
        self._transport = AsyncTransport(base_url, token, timeout, client, retry_seconds)
        self.base_url = self._transport.base_url
        self.group = group
        self.timeout = timeout

    async def register(self, check_urls: Sequence[str],
                       check_timeout_ms: int = 3000) -> dict[str, Any]:
        """Register (or replace) the group's check URLs; the answer has ``signing_secret``."""
        return await self._transport.do(calls.register(self.group, check_urls,
                                                       check_timeout_ms))

    async def registration(self) -> dict[str, Any]:
        return await self._transport.do(calls.registration(self.group))

    async def rotate_signing_secret(self) -> dict[str, Any]:
        return await self._transport.do(calls.rotate_signing_secret(self.group))

    async def send(self, messages: Message | Sequence[Message], *,
                   transaction_id: str | None = None, check_url: str | None = None,
                   check_immunity_seconds: int | None = None,
                   acks: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Store half messages: PREPARED (see ``Producer.send``)."""
        return await self._transport.do(calls.send(self.group, messages, transaction_id,
                                                   check_url, check_immunity_seconds, acks))

    async def commit(self, transaction_id: str) -> dict[str, Any]:
        return await self._transport.do(calls.finish(self.group, transaction_id, "commit"))

    async def rollback(self, transaction_id: str) -> dict[str, Any]:
        return await self._transport.do(calls.finish(self.group, transaction_id, "rollback"))

    async def get(self, transaction_id: str) -> dict[str, Any]:
        return await self._transport.do(calls.transaction(self.group, transaction_id))

    async def read(self, topic: str, from_offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return await self._transport.do(calls.read(topic, from_offset, limit))

    async def resume_check(self, transaction_id: str) -> dict[str, Any]:
        return await self._transport.do(calls.finish(self.group, transaction_id,
                                                     "resume-check"))

    async def send_in_transaction(
        self, messages: Message | Sequence[Message], local_transaction: LocalWork, *,
        transaction_id: str | None = None, check_url: str | None = None,
        check_immunity_seconds: int | None = None,
    ) -> TransactionResult:
        """``Producer.send_in_transaction``; ``local_transaction`` may be a coroutine
        function."""
        sent = await self.send(messages, transaction_id=transaction_id, check_url=check_url,
                               check_immunity_seconds=check_immunity_seconds)
        txid = sent["transaction_id"]
        outcome = local_transaction(sent)
        resolution = Resolution(await outcome if inspect.isawaitable(outcome) else outcome)
        result = TransactionResult(txid, resolution, "PREPARED", sent["messages"])
        if resolution is Resolution.UNKNOWN:
            return result
        try:
            answer = await (self.commit(txid) if resolution is Resolution.COMMIT
                            else self.rollback(txid))
        except (*TRANSPORT_ERRORS, TxmsgError) as exc:
            if _local.is_refusal(exc):
                raise
            log.warning("could not %s transaction %s, the check will: %s",
                        resolution.value.lower(), txid, exc)
            result.end_error = exc
            return result
        result.state = answer["state"]
        result.messages = answer.get("messages", result.messages)
        return result

    @asynccontextmanager
    async def local_transaction(
        self, barrier: AsyncBarrier, messages: Message | Sequence[Message], *,
        transaction_id: str | None = None, check_url: str | None = None,
        check_immunity_seconds: int | None = None,
    ) -> AsyncIterator[LocalTransaction]:
        """``Producer.local_transaction`` on an ``AsyncBarrier``: ``async with``, and
        ``local.connection`` is an ``AsyncConnection``."""
        sent = await self.send(messages, transaction_id=transaction_id, check_url=check_url,
                               check_immunity_seconds=check_immunity_seconds)
        local = LocalTransaction(sent["transaction_id"], sent["messages"])
        _local.require_prepared(sent)
        database = barrier.begin(self.group, local.transaction_id)
        try:
            local.connection = await database.__aenter__()
        except AlreadyCommitted:
            await self._commit(local)
            raise
        except BaseException:
            await self._settle(barrier, local)
            raise
        try:
            yield local
        except BaseException as exc:
            try:
                await database.__aexit__(type(exc), exc, exc.__traceback__)
            finally:
                await self._settle(barrier, local)
            raise
        try:
            await database.__aexit__(None, None, None)
        except BaseException:
            await self._settle(barrier, local)
            raise
        await self._commit(local)

    async def _settle(self, barrier: AsyncBarrier, local: LocalTransaction) -> None:
        """``Producer._settle``: finish the messages as the barrier says."""
        try:
            resolution = await barrier.resolve(self.group, local.transaction_id)
        except Exception as exc:  # noqa: BLE001 - the caller's error is the one raised
            _local.unsettled(local.transaction_id, exc)
            return
        _local.settled(local.transaction_id, resolution)
        try:
            if resolution is Resolution.ROLLBACK:
                await self.rollback(local.transaction_id)
            elif resolution is Resolution.COMMIT:
                await self._commit(local)
        except (*TRANSPORT_ERRORS, TxmsgError) as exc:
            log.warning("could not settle transaction %s, the check will: %s",
                        local.transaction_id, exc)

    async def _commit(self, local: LocalTransaction) -> None:
        """``Producer._commit``: left to the check when unreachable, raised when refused."""
        try:
            answer = await self.commit(local.transaction_id)
        except (*TRANSPORT_ERRORS, TxmsgError) as exc:
            if _local.is_refusal(exc):
                raise
            log.warning("could not commit transaction %s, the check will: %s",
                        local.transaction_id, exc)
            local.end_error = exc
            return
        local.state = answer["state"]
        local.messages = answer.get("messages", local.messages)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
