"""One HTTP call to the service on an ``httpx.AsyncClient``: JSON in, JSON out, problem+json
answers raised (as ``txmsg_client._http`` does with requests)."""

from __future__ import annotations

from typing import Any

import httpx

from txmsg_client.errors import error_from

# what a call may raise besides TxmsgError: the service unreachable, or too slow
TRANSPORT_ERRORS = (httpx.TransportError,)


async def call(client: httpx.AsyncClient, method: str, url: str, headers: dict[str, str],
               timeout: float, body: Any = None) -> dict[str, Any]:
    response = await client.request(method, url, json=body, headers=headers, timeout=timeout)
    if response.status_code >= 400:
        raise error_from(response)
    return response.json() if response.content else {}
