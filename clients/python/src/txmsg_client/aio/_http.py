"""The asyncio driver of the service's calls (``httpx.AsyncClient``), as ``_http`` is the
blocking one: the same requests, headers and errors."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from txmsg_client import tracing
from txmsg_client._calls import Request
from txmsg_client._http import auth_headers
from txmsg_client._retry import Waits
from txmsg_client.errors import TxmsgError, error_from

log = logging.getLogger("txmsg_client")

TRANSPORT_ERRORS = (httpx.TransportError,)


class AsyncTransport:
    """Calls to one service on an ``httpx.AsyncClient`` (the caller's, kept open by
    ``aclose``, else one of its own)."""

    def __init__(self, base_url: str, token: str | None, timeout: float,
                 client: httpx.AsyncClient | None = None, retry_seconds: float = 0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.client = client or httpx.AsyncClient()
        self._own = client is None
        self._headers = auth_headers(token)

    async def do(self, request: Request) -> dict[str, Any]:
        waits = Waits(self.retry_seconds, TRANSPORT_ERRORS) if request.idempotent else None
        while True:
            try:
                return await self._once(request)
            except (*TRANSPORT_ERRORS, TxmsgError) as exc:
                wait = waits.after(exc) if waits is not None else None
                if wait is None:
                    raise
                log.info("%s %s: %s, again in %.2f s", request.method, request.path, exc, wait)
                await asyncio.sleep(wait)

    async def _once(self, request: Request) -> dict[str, Any]:
        response = await self.client.request(
            request.method, self.base_url + request.path, json=request.body,
            headers=tracing.headers(self._headers),
            timeout=self.timeout + request.wait_ms / 1000)
        if response.status_code >= 400:
            raise error_from(response)
        return response.json() if response.content else {}

    async def aclose(self) -> None:
        if self._own:
            await self.client.aclose()
