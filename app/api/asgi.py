"""The ASGI front of the API: send, commit and rollback on the event loop, the rest Flask.

A producer's send + commit pair is two requests, each of which waits for a group-commit
batch to be durable. Served as WSGI, every waiting request held a thread, and the worker
spent more than half of its CPU in the kernel, mostly switching among the 64 request
threads and the writers as they took turns on the one interpreter lock. Here a waiting
request is a coroutine: the writer wakes the event loop once per batch, not each
request's thread (docs/performance.md has the figures).

A receive (``POST /v1/topics/{topic}/subscriptions/{subscription}/receive``, long-polling
with ``wait_ms``) and an ack (``.../ack``) are served here too; an ack's work takes a
thread of the receives' pool. A receive: each look at the database takes a thread of its
own small pool for as long as the look lasts, and between looks the request is a
coroutine waiting on the topic's signal (``app.domain.wakeups``), set by commits (this
process's, and other processes' through PostgreSQL notifications), or by a probe per
subscription (delayed messages, leases that run out; ``app.api.longpoll``). A thousand
idle long polls hold no thread and no connection.

These routes are matched here and handled by the same functions the Flask routes call
(``parse_send``, ``send_answer``, ``check_finish``, ``parse_ack``, the lifecycle), with the same
error rendering. Everything else, and whatever of those routes is not served exactly
as Flask would serve it (a non-ASCII path, a root path), goes to the Flask app
unchanged, behind a2wsgi's WSGI-to-ASGI bridge with a pool of ``web_threads`` threads.
``TXMSG_WEB_HOT_ROUTES=false`` sends everything to Flask; the tests compare both ways
answer for answer.

Every request body is read here, on the event loop, before a thread is taken: whole
within ``request_body_timeout_seconds`` (else 408) and at most its route's limit
(``app.api.bodies``), chunked or not (else 413; a declared Content-Length over it is
refused before anything is read). A thread that waited on a slow client's body held one
of the pool's threads the whole time; 70 clients sending a byte every 2 s stalled every
Flask route. With access control on, a request to a route that is not open is
authenticated first: without a valid token it is answered 401 and its body is never
read, so no client without a token can make this process hold a body. Each route's
limit and access come from the Flask URL map and the views' declarations, read once at
start-up (``_FlaskRoutes``); a request no route matches is handed to Flask (404, 405 or a
redirect) without its body being read. ``/healthz`` is answered here and ``/readyz`` has threads of its own, so
neither waits behind a busy pool. Request targets and heads over this front's limits,
which are below the server's, are refused here as problem+json (Granian's own refusals
carry no body).

Each request gets its id and start time here (``app.api.telemetry``); what this front
answers itself it records itself, with the Flask rule's pattern as the route.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, cast

from a2wsgi import WSGIMiddleware
from a2wsgi.asgi_typing import HTTPScope, Receive, ReceiveEvent, Scope, Send
from flask import Flask
from werkzeug.exceptions import (
    HTTPException,
    InternalServerError,
    RequestEntityTooLarge,
    RequestHeaderFieldsTooLarge,
    RequestTimeout,
    RequestURITooLarge,
)

from app import tracing
from app.api import subscriptions, telemetry, transactions
from app.api.access import (
    Access,
    access_of,
    authorize,
    bearer_token,
    route_access,
    unauthenticated,
)
from app.api.bodies import body_limit
from app.api.http import PROBLEM_MEDIA_TYPE, api_problem, dump_json, http_problem
from app.api.longpoll import Waits
from app.api.subscriptions import ack_once, check_names, parse_ack, parse_receive, receive_once
from app.api.tracing import request_trace
from app.api.transactions import check_ack_scopes, check_finish, parse_send, send_answer
from app.domain.access import UNRESTRICTED, Principal
from app.errors import ApiError, InvalidRequest
from app.vocabulary import Op

# the Flask rules' shapes: <group> and <transaction_id> are one path segment each
_ROUTE = re.compile(r"/v1/producer-groups/([^/]+)/transactions(?:/([^/]+)/(commit|rollback))?")
_OPS = {"commit": Op.COMMIT, "rollback": Op.ROLLBACK}
# the Flask rules of those routes, as the metrics and logs name them
_SEND_RULE = "/v1/producer-groups/<group>/transactions"
_RULES = {None: _SEND_RULE, "commit": f"{_SEND_RULE}/<transaction_id>/commit",
          "rollback": f"{_SEND_RULE}/<transaction_id>/rollback"}
# the Flask view each hot route stands in for: its access declaration is the one checked
HOT_ROUTES: dict[str | None, Callable[..., Any]] = {
    None: transactions.send, "commit": transactions.commit, "rollback": transactions.rollback}
_ACCESS: dict[str | None, Access] = {op: access for op, view in HOT_ROUTES.items()
                                     if (access := access_of(view)) is not None}
assert len(_ACCESS) == len(HOT_ROUTES), "every hot route's view declares its access"
_CONSUME = re.compile(r"/v1/topics/([^/]+)/subscriptions/([^/]+)/(receive|ack)")
_CONSUME_RULES = {action: f"/v1/topics/<topic>/subscriptions/<subscription>/{action}"
                  for action in ("receive", "ack")}
CONSUME_ROUTES: dict[str, Callable[..., Any]] = {
    "receive": subscriptions.receive, "ack": subscriptions.ack}
_CONSUME_ACCESS: dict[str, Access] = {action: access for action, view in CONSUME_ROUTES.items()
                                      if (access := access_of(view)) is not None}
assert len(_CONSUME_ACCESS) == len(CONSUME_ROUTES), "every consume view declares its access"
_JSON = b"application/json"
_PROBLEM = PROBLEM_MEDIA_TYPE.encode()
_HEALTHY = dump_json({"status": "ok"})  # what the Flask view answers
# below Granian's own limits (about 64 KiB of target, 400 KiB of head), which answer
# with an empty body
MAX_TARGET_BYTES = 8 * 1024
MAX_HEAD_BYTES = 32 * 1024
# /readyz's threads, apart from the pool the other Flask routes share
_PROBE_THREADS = 2


class Api:
    """The ASGI application ``txmsg serve`` runs: ``Api(create_app(settings))``."""

    def __init__(self, app: Flask) -> None:
        self._app = app
        self._state = app.extensions["txmsg"]
        settings = self._state.settings
        self._hot = bool(settings.web_hot_routes)
        self._body_timeout = settings.request_body_timeout_seconds
        wsgi = _terminated_input(app)
        self._flask = WSGIMiddleware(wsgi, workers=settings.web_threads)
        self._probes = WSGIMiddleware(wsgi, workers=_PROBE_THREADS)
        self._guard = self._state.guard
        self._routes = _FlaskRoutes(app)
        # the looks of long-polling receives at the database (not their waits)
        self._receivers = ThreadPoolExecutor(max_workers=settings.web_threads,
                                             thread_name_prefix="txmsg-receive")
        self.waits = Waits(self._state.engine, self._state.signal, self._receivers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            else:  # a websocket: a2wsgi closes it
                await self._flask(scope, _coroutine(receive), send)
            return
        started = time.perf_counter()
        path = scope["path"]
        head = _head(scope["headers"])
        # for this front's answers, and for Flask's (a2wsgi hands it the scope)
        cast("dict[str, Any]", scope)[telemetry.SCOPE_KEY] = (
            telemetry.request_id(head.request_id), started)
        if path == "/healthz" and scope["method"] == "GET":
            await _answer(send, scope, 200, _HEALTHY, _JSON, "/healthz")
            return
        if head.size > MAX_HEAD_BYTES:
            await self._refuse(send, scope, RequestHeaderFieldsTooLarge(
                f"the request's header fields exceed {MAX_HEAD_BYTES} bytes"))
            return
        if len(scope.get("raw_path") or path) + len(scope["query_string"]) > MAX_TARGET_BYTES:
            await self._refuse(send, scope, RequestURITooLarge(
                f"the request's path and query exceed {MAX_TARGET_BYTES} bytes"))
            return
        match = self._match(scope, _ROUTE) if self._hot else None
        consuming = self._match(scope, _CONSUME) if self._hot and match is None else None
        view: Callable[..., Any] | None
        if match is not None:
            view, route = HOT_ROUTES[match.group(3)], _RULES[match.group(3)]
        elif consuming is not None:
            view, route = CONSUME_ROUTES[consuming.group(3)], _CONSUME_RULES[consuming.group(3)]
        else:
            view, route = self._routes.match(scope)
        principal = UNRESTRICTED
        if view is not None and self._guard.enabled and not route_access(view).open:
            try:
                principal = await self._authenticate(scope)
            except ApiError as exc:  # before the body is read: none of it is held
                await self._refuse(send, scope, exc, route)
                return
        if match is not None and match.group(3) is not None:  # commit, rollback: no body
            await self._serve(scope, match, b"", send, principal)
            return
        raw: bytes | None = b""  # no route: Flask answers without reading the body
        if view is not None:
            raw = await self._read_body(scope, receive, send, head, route,
                                        body_limit(view, self._app.config["MAX_CONTENT_LENGTH"]))
        if raw is None:
            return
        if match is not None:
            await self._serve(scope, match, raw, send, principal)
        elif consuming is not None:
            await self._serve_consume(scope, consuming, raw, send, principal)
        else:
            pool = self._probes if path == "/readyz" else self._flask
            await pool(scope, _replay(raw), send)

    @staticmethod
    def _match(scope: HTTPScope, route: re.Pattern[str]) -> re.Match[str] | None:
        """``route``'s match of a POST this front serves exactly as Flask would."""
        if scope["method"] != "POST" or scope.get("root_path"):
            return None
        path = scope["path"]
        match = route.fullmatch(path)
        if match is None or not path.isascii():
            return None
        return match

    async def _read_body(self, scope: HTTPScope, receive: Receive, send: Send, head: _Head,
                         route: str, limit: int | None) -> bytes | None:
        """The whole body, at most ``limit`` bytes; or None once refused (408, 413, or
        400 for a body cut short: a client gone, or chunked framing the server could not
        decode)."""
        if not head.streamed and (head.length == 0 or (
                head.length is None and scope["http_version"] in ("1.1", "1.0"))):
            return b""  # HTTP/1 framing: no body
        refusal: HTTPException | ApiError
        if limit is not None and not head.streamed and (head.length or 0) > limit:
            refusal = RequestEntityTooLarge()
        else:
            try:
                async with asyncio.timeout(self._body_timeout):
                    raw = await _read_all(receive, limit)
            except TimeoutError:
                refusal = RequestTimeout(f"the request body did not arrive within "
                                         f"{self._body_timeout:g} s")
            else:
                if isinstance(raw, bytes):
                    return raw
                refusal = raw
        await self._refuse(send, scope, refusal, route)
        return None

    async def _refuse(self, send: Send, scope: HTTPScope, exc: HTTPException | ApiError,
                      route: str = telemetry.UNMATCHED) -> None:
        path = scope["path"]
        if isinstance(exc, ApiError):
            await _answer(send, scope, exc.status, api_problem(exc, path), _PROBLEM, route,
                          headers=exc.headers)
        else:
            await _answer(send, scope, *http_problem(exc, path), _PROBLEM, route)

    async def _serve(self, scope: HTTPScope, match: re.Match[str], raw: bytes,
                     send: Send, principal: Principal) -> None:
        group, transaction_id, op = match.groups()
        content_type = _JSON
        headers: tuple[tuple[str, str], ...] = ()
        try:
            if self._guard.enabled:
                authorize(_ACCESS[op], principal, {"group": group})
            lifecycle = self._state.lifecycle
            trace = request_trace(scope["headers"])
            if op is None:
                txn = parse_send(lifecycle, group, raw, trace)
                if txn.acks:
                    check_ack_scopes(principal, txn)
                body, status = send_answer(await lifecycle.send_async(group, txn, trace))
            else:
                check_finish(group, transaction_id)
                body, status = (await lifecycle.finish_async(group, transaction_id, _OPS[op],
                                                              trace)).body, 200
            data = dump_json(body)
        except ApiError as exc:
            status, data, content_type, headers = exc.status, api_problem(
                exc, scope["path"]), _PROBLEM, exc.headers
        except Exception as exc:
            failure = self._failure(scope, exc)
            if failure is None:
                raise
            status, data, content_type, headers = failure
        await _answer(send, scope, status, data, content_type, _RULES[op], hot=True,
                      headers=headers)

    def _failure(self, scope: HTTPScope, exc: Exception
                 ) -> tuple[int, bytes, bytes, tuple[tuple[str, str], ...]] | None:
        """The answer to a request that failed other than with an ApiError (a bug: the
        database's failures are ApiErrors from the engine's edge), as Flask would give it;
        None: let ``exc`` propagate."""
        path = scope["path"]
        if self._propagates():
            return None
        # as Flask does with an unhandled error: log it, answer 500
        self._app.logger.exception("Exception on %s [POST]", path, exc_info=exc, extra={
            "request_id": _identity(scope)[0]})
        status, data = http_problem(InternalServerError(), path)
        return status, data, _PROBLEM, ()

    async def _serve_consume(self, scope: HTTPScope, match: re.Match[str], raw: bytes,
                             send: Send, principal: Principal) -> None:
        """A receive (waiting on the event loop between its looks) or an ack."""
        topic, name, action = match.groups()
        content_type = _JSON
        headers: tuple[tuple[str, str], ...] = ()
        try:
            if self._guard.enabled:
                authorize(_CONSUME_ACCESS[action], principal, {"topic": topic})
            check_names(topic, name)
            if action == "receive":
                body = await self._long_poll(topic, name, parse_receive(raw))
            else:
                body = await asyncio.get_running_loop().run_in_executor(
                    self._receivers, ack_once, self._state, topic, name, parse_ack(raw),
                    request_trace(scope["headers"]))
            status, data = 200, dump_json(body)
        except ApiError as exc:
            status, data, content_type, headers = exc.status, api_problem(
                exc, scope["path"]), _PROBLEM, exc.headers
        except Exception as exc:
            failure = self._failure(scope, exc)
            if failure is None:
                raise
            status, data, content_type, headers = failure
        await _answer(send, scope, status, data, content_type, _CONSUME_RULES[action],
                      hot=True, headers=headers)

    async def _long_poll(self, topic: str, name: str, request: Any) -> dict[str, Any]:
        """Look; while nothing is deliverable and time is left, wait for the topic's
        signal (``app.api.longpoll``) and look again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.wait_ms / 1000
        signal = self._state.signal
        while True:
            seen = signal.version(topic)
            received = await loop.run_in_executor(self._receivers, receive_once, self._state,
                                                  topic, name, request)
            left = deadline - loop.time()
            if received.messages or left <= 0:
                return {"messages": received.messages}
            await self.waits.wait(topic, name, seen, left)

    async def _authenticate(self, scope: HTTPScope) -> Principal:
        """Who the request's bearer token is, as ``app.api.access.install`` finds it for a
        Flask route (else 401); the database is read (off the event loop) only for a token
        not verified in the last few seconds. What it may do is checked where the route
        is served: ``authorize`` here for the hot routes, Flask's check for the others."""
        token = bearer_token(_header(scope["headers"], b"authorization"))
        principal: Principal | None = self._guard.cached(token) if token is not None else None
        if principal is None and token is not None:
            principal = await asyncio.get_running_loop().run_in_executor(
                None, self._guard.verify, token)
        if principal is None:
            raise unauthenticated(token)
        return principal

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._state.close()  # the writers finish what they hold, then stop
                self._receivers.shutdown(wait=False, cancel_futures=True)
                tracing.shutdown()  # the spans still buffered are exported
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _propagates(self) -> bool:
        propagate = self._app.config["PROPAGATE_EXCEPTIONS"]
        return bool(self._app.testing or self._app.debug) if propagate is None else propagate


class _FlaskRoutes:
    """The Flask app's URL map, matched here as Flask will match it, to know a request's
    route (its view's access and body limit) before its body is read."""

    def __init__(self, app: Flask) -> None:
        self._adapter = app.url_map.bind("localhost")
        self._views = {rule.endpoint: app.view_functions[rule.endpoint]
                       for rule in app.url_map.iter_rules()}

    def match(self, scope: HTTPScope) -> tuple[Callable[..., Any] | None, str]:
        """The view and rule of the request's route; (None, UNMATCHED) for none (Flask
        answers 404, 405 or a redirect)."""
        path, root = scope["path"], scope.get("root_path") or ""
        if root and path.startswith(root):  # as a2wsgi makes PATH_INFO
            path = path[len(root):]
        try:
            rule, _ = self._adapter.match(path or "/", scope["method"], return_rule=True)
        except HTTPException:  # NotFound, MethodNotAllowed, RequestRedirect
            return None, telemetry.UNMATCHED
        return self._views[rule.endpoint], rule.rule


def _identity(scope: HTTPScope) -> tuple[str, float]:
    """The request's (id, start time), as ``__call__`` stamped them."""
    identity: tuple[str, float] = cast("dict[str, Any]", scope)[telemetry.SCOPE_KEY]
    return identity


async def _answer(send: Send, scope: HTTPScope, status: int, data: bytes,
                  content_type: bytes, route: str, *, hot: bool = False,
                  headers: tuple[tuple[str, str], ...] = ()) -> None:
    """Send an answer of this front's own, with the request's id, and record it."""
    request_id, started = _identity(scope)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", b"%d" % len(data)),
                            (b"x-request-id", request_id.encode()),
                            *((k.lower().encode(), v.encode()) for k, v in headers)]})
    await send({"type": "http.response.body", "body": data})
    telemetry.record(request_id, scope["method"], route, scope["path"], status, started,
                     hot=hot)


class _Head(NamedTuple):
    length: int | None  # the declared Content-Length, if one plain number
    streamed: bool  # a Transfer-Encoding
    size: int  # of the header fields, in bytes
    request_id: str | None  # the first X-Request-Id


def _head(headers: Iterable[tuple[bytes, bytes]]) -> _Head:
    length, lengths, streamed, size, request_id = None, 0, False, 0, None
    for name, value in headers:
        size += len(name) + len(value) + 4  # ": " and CRLF
        if name == b"content-length":
            lengths += 1
            length = int(value) if value.isdigit() else None
        elif name == b"transfer-encoding":
            streamed = True
        elif name == b"x-request-id" and request_id is None:
            request_id = value.decode("latin-1")
    return _Head(length if lengths == 1 else None, streamed, size, request_id)


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_all(receive: Receive, limit: int | None) -> bytes | HTTPException | ApiError:
    """The body's messages up to the last one; a refusal once over ``limit`` or cut short."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return InvalidRequest("the request body ended before it was whole (the client "
                                  "went away, or its chunked framing is malformed)",
                                  code="incomplete_body")
        chunk = message.get("body", b"") if message["type"] == "http.request" else b""
        size += len(chunk)
        if limit is not None and size > limit:
            return RequestEntityTooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Callable[[], Awaitable[ReceiveEvent]]:
    """A receive that hands over a body already read whole. a2wsgi reads the body from a
    worker thread with run_coroutine_threadsafe, which takes a coroutine function."""

    async def receive() -> ReceiveEvent:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _coroutine(receive: Receive) -> Callable[[], Awaitable[ReceiveEvent]]:
    async def receive_coroutine() -> ReceiveEvent:  # a server's receive may be another awaitable
        return await receive()

    return receive_coroutine


def _terminated_input(app: Flask) -> Callable[..., Iterable[bytes]]:
    """The Flask app, told that its input ends where the request's body ends (a2wsgi
    reads ASGI body messages to the last one): without it, werkzeug reads a chunked body,
    which has no Content-Length, as empty."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["wsgi.input_terminated"] = True
        return app(environ, start_response)

    return wsgi
