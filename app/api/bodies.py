"""How large a request body each route takes, declared in the route table
(``Route.carries_messages``, ``app.api.routes``; the dashboard's views take a small one).

A route whose body carries messages (a send) takes up to ``MAX_CONTENT_LENGTH``
(``send_limit``); every other route at most ``SMALL_BODY_BYTES``, so that no route that
only takes a few offsets or settings can be made to hold a send's worth of memory. Over
the limit → 413 (``payload_too_large``), declared or chunked. The ASGI front reads each
body itself with its route's limit (``app.api.asgi``), before Flask sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.config import Settings

SMALL_BODY_BYTES = 1024 * 1024
_SEND_FLOOR_BYTES = 64 * 1024 * 1024


def send_limit(settings: Settings) -> int:
    """The largest send body: its messages' bodies as JSON text or base64 (up to twice
    TXMSG_MAX_BODY_BYTES for one body), and at least 64 MiB for a send of many."""
    return max(_SEND_FLOOR_BYTES, 2 * settings.max_body_bytes)


def body_limit(route: Callable[..., Any] | object, ceiling: int | None) -> int | None:
    """The most bytes of body a route (or its Flask view) takes, given the app's
    ``MAX_CONTENT_LENGTH`` (``ceiling``; None: no limit)."""
    if getattr(route, "carries_messages", False):
        return ceiling
    return SMALL_BODY_BYTES if ceiling is None else min(SMALL_BODY_BYTES, ceiling)
