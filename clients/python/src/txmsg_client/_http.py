"""The blocking driver of the service's calls (``requests``): a ``_calls.Request`` in, its
JSON answer out, problem+json answers raised as ``TxmsgError``."""

from __future__ import annotations

import logging
import time
from typing import Any

import requests

from txmsg_client import tracing
from txmsg_client._calls import Request
from txmsg_client._retry import Waits
from txmsg_client.errors import TxmsgError, error_from

log = logging.getLogger("txmsg_client")

# what a call may raise besides TxmsgError: the service unreachable, or too slow
TRANSPORT_ERRORS = (requests.RequestException,)


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class Transport:
    """Calls to one service on a ``requests.Session`` (the caller's, kept open by
    ``close``, else one of its own), with the token and the current trace context; one
    that is safe to repeat is tried again for ``retry_seconds`` (``_retry``)."""

    def __init__(self, base_url: str, token: str | None, timeout: float,
                 session: requests.Session | None = None, retry_seconds: float = 0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.session = session or requests.Session()
        self._own = session is None
        self._headers = auth_headers(token)

    def do(self, request: Request) -> dict[str, Any]:
        waits = Waits(self.retry_seconds, TRANSPORT_ERRORS) if request.idempotent else None
        while True:
            try:
                return self._once(request)
            except (*TRANSPORT_ERRORS, TxmsgError) as exc:
                wait = waits.after(exc) if waits is not None else None
                if wait is None:
                    raise
                log.info("%s %s: %s, again in %.2f s", request.method, request.path, exc, wait)
                time.sleep(wait)

    def _once(self, request: Request) -> dict[str, Any]:
        response = self.session.request(
            request.method, self.base_url + request.path, json=request.body,
            headers=tracing.headers(self._headers),
            timeout=self.timeout + request.wait_ms / 1000)
        if response.status_code >= 400:
            raise error_from(response)
        return response.json() if response.content else {}

    def close(self) -> None:
        if self._own:
            self.session.close()
