"""The asyncio driver of the service's calls (``httpx.AsyncClient``), as ``_http`` is the
blocking one: the same requests, headers and errors."""

from __future__ import annotations

from typing import Any

import httpx

from txmsg_client import tracing
from txmsg_client._calls import Request
from txmsg_client._http import auth_headers
from txmsg_client.errors import error_from

TRANSPORT_ERRORS = (httpx.TransportError,)


class AsyncTransport:
    """Calls to one service on an ``httpx.AsyncClient`` (the caller's, kept open by
    ``aclose``, else one of its own)."""

    def __init__(self, base_url: str, token: str | None, timeout: float,
                 client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.client = client or httpx.AsyncClient()
        self._own = client is None
        self._headers = auth_headers(token)

    async def do(self, request: Request) -> dict[str, Any]:
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
