"""The check callback endpoint as an ASGI app, to mount in FastAPI, Starlette or any ASGI
server; signatures verified as by the WSGI ``checker_app``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from txmsg_client._checks import (
    MAX_CHECK_BYTES,
    Answer,
    SigningSecrets,
    Verifier,
    admission,
    answer,
    checker_failed,
    read_check,
    too_large,
)
from txmsg_client.resolution import Resolution, TransactionChecker

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class AsyncTransactionChecker(Protocol):
    """A ``TransactionChecker`` whose ``check`` is a coroutine."""

    async def check(self, transaction: dict[str, Any]) -> Resolution: ...


class AsgiCheckerApp:
    """An ASGI app serving ``checker`` as the check callback: POST → ``{"resolution": ...}``
    (401 for a signature that does not verify, 400 for a body that is not a JSON object,
    500 when the checker raises). A plain ``TransactionChecker`` runs in a worker thread,
    so that its database waits do not stop the event loop."""

    def __init__(self, checker: TransactionChecker | AsyncTransactionChecker,
                 signing_secret: SigningSecrets = None, *,
                 max_body_bytes: int = MAX_CHECK_BYTES) -> None:
        self.checker = checker
        self._verifier = Verifier(signing_secret)
        self.max_body_bytes = max_body_bytes  # past it: 413, the checker is not asked

    @property
    def signing_secret(self) -> tuple[str, ...]:
        return self._verifier.secrets

    @signing_secret.setter
    def signing_secret(self, secrets: SigningSecrets) -> None:
        self._verifier = Verifier(secrets)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"the check callback serves HTTP, not {scope['type']}")
        check = await self._read(scope, receive)
        if isinstance(check, dict):
            check = await self._answer(check)
        status, content_type, payload = check
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type.encode()),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    async def _read(self, scope: Scope, receive: Receive) -> dict[str, Any] | Answer:
        """The check's transaction, or the refusal to answer with: from the request's head
        alone when it suffices (the body then never received)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        peer = scope.get("client")
        refused = admission(scope["method"], headers, self._verifier, self.max_body_bytes, peer)
        if refused is not None:
            return refused
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            return too_large(self.max_body_bytes)
        return read_check(body, headers, peer, self._verifier)

    async def _answer(self, transaction: dict[str, Any]) -> Answer:
        try:
            if inspect.iscoroutinefunction(self.checker.check):
                resolution = await self.checker.check(transaction)
            else:
                resolution = await asyncio.to_thread(self.checker.check, transaction)
            return answer(resolution)
        except Exception as exc:  # noqa: BLE001 - the producer's code: logged, answered 500
            return checker_failed(transaction, exc)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request's body, or None once it passes ``limit`` bytes (read no further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not event.get("more_body"):
            return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def asgi_checker_app(checker: TransactionChecker | AsyncTransactionChecker,
                     signing_secret: SigningSecrets = None, *,
                     max_body_bytes: int = MAX_CHECK_BYTES) -> AsgiCheckerApp:
    """``checker`` (``check`` plain or a coroutine) as an ASGI check callback app."""
    return AsgiCheckerApp(checker, signing_secret, max_body_bytes=max_body_bytes)
