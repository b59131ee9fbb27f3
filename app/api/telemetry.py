"""What every request leaves behind: an id, a duration by route, an access log line.

The id is the request's ``X-Request-Id`` when it is sane (at most 128 characters of
letters, digits and ``._:-``; anything else could forge or flood log lines), else a new
one; every answer carries it back in ``X-Request-Id``, and every log line written while
the request is served carries it.

The ASGI front (``app.api.asgi``) sees every request first: it chooses its id and start
time, and records every request once when it is answered, those it hands to Flask (the
dashboard) too. It hands the id to Flask in the ASGI scope (a2wsgi passes the scope on as
``environ["asgi.scope"]``), for the log lines of Flask's thread.

Behind a reverse proxy (``TXMSG_TRUSTED_PROXIES``), a request whose direct peer is in
those networks has its ``X-Forwarded-For`` and ``X-Forwarded-Proto`` honoured (werkzeug's
``ProxyFix``, one hop): its client address is the proxy's client, its scheme the one the
proxy was reached by (so the dashboard's cookie is ``Secure`` behind TLS). From any other
peer they are ignored, as everywhere when the setting is empty. Every access line names
its client.

Metric labels are the route pattern (``/v1/topics/<topic>/messages``), never the raw
path, and a method outside the known ones is ``OTHER``: the series stay bounded whatever
clients send.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from app.logs import REQUEST_ID
from app.metrics import HTTP_DURATION

HEADER = "X-Request-Id"
# where the front leaves (request id, start time), in the scope (Flask reads it there)
SCOPE_KEY = "txmsg.request"
UNMATCHED = "<unmatched>"  # the route of a request that matched none (404, 405, refusals)
# answered often and only to probes: logged at DEBUG
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_MAX_LOGGED_PATH = 512
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

access_log = logging.getLogger("txmsg.access")
# (route, method, status) -> its histogram; bounded as the labels are
_histograms: dict[tuple[str, str, int], Any] = {}


def request_id(incoming: str | None) -> str:
    """The client's id when sane, else a new one (128 random bits, hex)."""
    if incoming is not None and _SANE.fullmatch(incoming):
        return incoming
    return secrets.token_hex(16)


def record(request_id: str, method: str, route: str, path: str, status: int,
           started: float, *, hot: bool = False, client: str | None = None) -> None:
    """Observe the request's duration under its route, and log its access line: WARNING
    for a 5xx, DEBUG for probes and for the successes of the ``hot`` routes (those the
    route table marks ``quiet``, on the ASGI front: send, commit, rollback, receive, ack;
    an INFO line each would cost more CPU than the rest of their telemetry many times
    over, see docs/operations.md), INFO otherwise."""
    seconds = time.perf_counter() - started
    method = method if method in _METHODS else "OTHER"
    key = (route, method, status)
    histogram = _histograms.get(key)
    if histogram is None:  # labels() costs as much again as observe(): keep the children
        histogram = _histograms[key] = HTTP_DURATION.labels(route, method, str(status))
    histogram.observe(seconds)
    if status >= 500:
        level = logging.WARNING
    elif route in PROBES or (hot and status < 400):
        level = logging.DEBUG
    else:
        level = logging.INFO
    if access_log.isEnabledFor(level):
        ms = round(seconds * 1000, 3)
        path = path[:_MAX_LOGGED_PATH]
        extra = {"request_id": request_id, "method": method, "route": route, "path": path,
                 "status": status, "duration_ms": ms}
        if client is None:
            access_log.log(level, "%s %s %d %.1f ms", method, path, status, ms, extra=extra)
        else:
            access_log.log(level, "%s %s %d %.1f ms from %s", method, path, status, ms,
                           client, extra={**extra, "client": client})


def install(app: Flask, trusted_proxies: Sequence[IPNetwork] = ()) -> None:
    """Give the Flask app's requests their id in their thread's log lines, and their client
    and scheme from the trusted proxies' headers."""
    wsgi_app = app.wsgi_app
    if trusted_proxies:
        wsgi_app = _BehindProxies(wsgi_app, trusted_proxies)
    app.wsgi_app = _Identified(wsgi_app)  # type: ignore[method-assign]


class _BehindProxies:
    """WSGI middleware: ProxyFix for a request whose direct peer is a trusted proxy."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]],
                 networks: Sequence[IPNetwork]) -> None:
        self._app = wsgi_app
        self._proxied = ProxyFix(wsgi_app, x_for=1, x_proto=1)
        self._networks = tuple(networks)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if trusted_peer(environ.get("REMOTE_ADDR"), self._networks):
            return self._proxied(environ, start_response)
        return self._app(environ, start_response)


def trusted_peer(address: str | None, networks: Sequence[IPNetwork]) -> bool:
    """Whether ``address`` (a peer's, IPv4-mapped or not) is in one of ``networks``."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:  # none, or a Unix socket's
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in networks)


def asgi_client(scope: Any, networks: Sequence[IPNetwork]) -> str | None:
    """An ASGI request's client, as ``_BehindProxies`` makes Flask's: the direct peer, or,
    for a trusted proxy, the last address of its ``X-Forwarded-For``."""
    peer = scope.get("client")
    address: str | None = peer[0] if peer else None
    if networks and trusted_peer(address, networks):
        forwarded = [value.decode("latin-1") for name, value in scope["headers"]
                     if name == b"x-forwarded-for"]
        last = ",".join(forwarded).split(",")[-1].strip()
        if last:
            return last
    return address


class _Identified:
    """WSGI middleware: the request's id, as the front chose it, in the logging context of
    the thread serving it."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]]) -> None:
        self._app = wsgi_app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        scope = environ.get("asgi.scope")
        known = scope.get(SCOPE_KEY) if scope is not None else None
        token = REQUEST_ID.set(known[0] if known is not None
                               else request_id(environ.get("HTTP_X_REQUEST_ID")))
        try:
            return self._app(environ, start_response)
        finally:
            REQUEST_ID.reset(token)
