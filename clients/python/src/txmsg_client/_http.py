"""One HTTP call to the service: JSON in, JSON out, problem+json answers raised."""

from __future__ import annotations

from typing import Any

import requests

from txmsg_client.errors import error_from


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def call(session: requests.Session, method: str, url: str, headers: dict[str, str],
         timeout: float, body: Any = None) -> dict[str, Any]:
    response = session.request(method, url, json=body, headers=headers, timeout=timeout)
    if response.status_code >= 400:
        raise error_from(response)
    return response.json() if response.content else {}
