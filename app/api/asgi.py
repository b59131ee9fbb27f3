"""The ASGI front of the API, its only one: every route of the route table, served here.

Each request is matched once, by a router compiled from ``app.api.routes.ROUTES`` at
start-up (``app.api.router``); its route says the rest. With access control on, a route
that is not open authenticates the request's bearer token and checks its scope, which
depends on the path only, before anything of its body is read (401 without a valid
token, 403 without the scope: no client can make this process hold a body it may not
send). The body is then read here, on the event loop, before a thread is taken: whole
within ``request_body_timeout_seconds`` (else 408) and at most its route's limit
(``app.api.bodies``), chunked or not (else 413; a declared Content-Length over it is
refused before anything is read); 400 for one cut short. Then the route's handler runs
on a ``Call`` (``app.api.call``):

- the writer-backed ones (send, commit, rollback) and a long-polling receive are
  coroutines on the event loop. A producer's send + commit pair is two requests, each of
  which waits for a group-commit batch to be durable: served as WSGI, every waiting
  request held a thread, and the worker spent more than half of its CPU switching among
  them; here the writer wakes the event loop once per batch. A receive's looks at the
  database take a thread of their own pool; between looks it waits on its topic's
  signal (``app.api.longpoll``), holding no thread and no connection.
- the others run on a pool of ``web_threads`` threads (``/readyz`` on threads of its
  own, so that it never waits behind a busy pool).

A HEAD request is served as its GET without the body. What matches no route is answered
here too (404; 405 with ``Allow`` for a route's path, 200 with it to OPTIONS), except
what the Flask app's URL map takes: the dashboard (``/ui/``), its redirects and its 405s,
handed to Flask behind a2wsgi's WSGI-to-ASGI bridge; a request to one of its views is
authenticated and its scope checked here before its body is read all the same.

Every answer, or error, is rendered by the one renderer (``app.api.http``) and recorded
once, here (``app.api.telemetry``, the route's pattern as its label), Flask's too.

Request targets and heads over this front's limits, which are below the server's, are
refused here as problem+json (Granian's own refusals carry no body).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from a2wsgi import WSGIMiddleware
from a2wsgi.asgi_typing import HTTPScope, Receive, ReceiveEvent, Scope, Send
from flask import Flask
from werkzeug.exceptions import (
    HTTPException,
    InternalServerError,
    MethodNotAllowed,
    NotFound,
    RequestEntityTooLarge,
    RequestHeaderFieldsTooLarge,
    RequestTimeout,
    RequestURITooLarge,
)
from werkzeug.routing import RequestRedirect

from app import tracing
from app.api import telemetry
from app.api.access import authorize, bearer_token, route_access, unauthenticated
from app.api.bodies import body_limit
from app.api.call import Call, Raw
from app.api.http import JSON_MEDIA_TYPE, Headers, dump_json, rendered
from app.api.longpoll import Waits
from app.api.router import Router
from app.api.routes import ROUTES, Route
from app.domain.access import UNRESTRICTED, Principal
from app.errors import ApiError, InvalidRequest
from app.logs import REQUEST_ID
from app.problems import ProblemCode

if TYPE_CHECKING:
    from app.state import AppState

# below Granian's own limits (about 64 KiB of target, 400 KiB of head), which answer
# with an empty body
MAX_TARGET_BYTES = 8 * 1024
MAX_HEAD_BYTES = 32 * 1024
# /readyz's threads, apart from the pool the other routes share
_PROBE_THREADS = 2
_JSON = JSON_MEDIA_TYPE.encode()


class Api:
    """The ASGI application ``txmsg serve`` runs: ``Api(create_app(settings))``."""

    def __init__(self, app: Flask) -> None:
        self._app = app
        self._state: AppState = app.extensions["txmsg"]
        settings = self._state.settings
        self._body_timeout = settings.request_body_timeout_seconds
        self._config = app.config
        self._flask = WSGIMiddleware(_terminated_input(app), workers=settings.web_threads)
        self._guard = self._state.guard
        self._proxies = settings.trusted_proxies
        self._router = Router(ROUTES)
        self._flask_routes = _FlaskRoutes(app)
        self._threads = ThreadPoolExecutor(max_workers=settings.web_threads,
                                           thread_name_prefix="txmsg-web")
        self._probe_threads = ThreadPoolExecutor(max_workers=_PROBE_THREADS,
                                                 thread_name_prefix="txmsg-probe")
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
        request_id = telemetry.request_id(head.request_id)
        REQUEST_ID.set(request_id)  # this task's log lines, and its handler's thread's
        # for this front's answers, and for Flask's (a2wsgi hands it the scope)
        cast("dict[str, Any]", scope)[telemetry.SCOPE_KEY] = (request_id, started)
        if head.size > MAX_HEAD_BYTES:
            await self._refuse(send, scope, RequestHeaderFieldsTooLarge(
                f"the request's header fields exceed {MAX_HEAD_BYTES} bytes"))
            return
        if len(scope.get("raw_path") or path) + len(scope["query_string"]) > MAX_TARGET_BYTES:
            await self._refuse(send, scope, RequestURITooLarge(
                f"the request's path and query exceed {MAX_TARGET_BYTES} bytes"))
            return
        root = scope.get("root_path") or ""
        if root and path.startswith(root):  # mounted under a prefix
            path = path[len(root):]
        method = scope["method"]
        matched = self._router.match("GET" if method == "HEAD" else method, path)
        if matched is not None:
            await self._serve(*matched, scope, receive, send, head)
        elif self._flask_routes.takes(path, method):
            await self._to_flask(path, scope, receive, send, head)
        else:
            await self._unrouted(path, scope, send)

    async def _serve(self, route: Route, params: dict[str, str], scope: HTTPScope,
                     receive: Receive, send: Send, head: _Head) -> None:
        """Authenticate and authorize, read the body, run the handler, answer."""
        headers: Headers = ()
        media_type = _JSON
        unread = True  # the request's body, while an answer could leave it unread
        try:
            principal = UNRESTRICTED
            if self._guard.enabled and not route.access.open:
                principal = await self._authenticate(scope)
                authorize(route.access, principal, params)
            raw = await self._read_body(receive, head, body_limit(route, self._config["MAX_CONTENT_LENGTH"]),
                                        scope["http_version"])
            unread = False
            call = Call(params, raw, principal, self._state, scope["headers"],
                        scope["query_string"], self._offload, self.waits.wait, route.query)
            if route.on_loop:
                status, body = await route.handler(call)
            else:
                pool = self._probe_threads if route.own_threads else self._threads
                status, body = await _in_thread(pool, route.handler, call)
            if isinstance(body, Raw):
                data, media_type = body.data, body.media_type.encode()
            else:
                data = b"" if body is None else dump_json(body)
        except (ApiError, HTTPException) as exc:
            status, data, problem_type, headers = rendered(exc, scope["path"])
            media_type = problem_type.encode()
            if unread:
                headers = _closing(headers, head, scope["http_version"])
        except Exception as exc:
            if self._propagates():
                raise
            # as Flask does with an unhandled error: log it, answer 500
            self._app.logger.exception("Exception on %s [%s]", scope["path"], scope["method"],
                                       exc_info=exc)
            status, data, problem_type, headers = rendered(InternalServerError(),
                                                           scope["path"])
            media_type = problem_type.encode()
        await _answer(send, scope, status, data, None if status == 204 else media_type,
                      route.rule, quiet=route.quiet, headers=headers,
                      client=telemetry.asgi_client(scope, self._proxies))

    async def _offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await _in_thread(self._receivers, fn, *args)

    async def _unrouted(self, path: str, scope: HTTPScope, send: Send) -> None:
        """A request no route takes: 404; for a route's path with another method, 405
        with the methods it has (an OPTIONS request: 200 with them)."""
        methods = self._router.methods(path)
        if not methods:
            await self._refuse(send, scope, NotFound())
            return
        allowed = sorted({*methods, "OPTIONS", *(("HEAD",) if "GET" in methods else ())})
        allow = (("Allow", ", ".join(allowed)),)
        if scope["method"] == "OPTIONS":
            await _answer(send, scope, 200, b"", None, telemetry.UNMATCHED, headers=allow,
                          client=telemetry.asgi_client(scope, self._proxies))
            return
        await self._refuse(send, scope, MethodNotAllowed(allowed), headers=allow)

    async def _to_flask(self, path: str, scope: HTTPScope, receive: Receive, send: Send,
                        head: _Head) -> None:
        """The dashboard's answer, by Flask (or Flask's redirect or 405 for one of its
        paths). A request to one of its views that is not open is authenticated and
        authorized first, and its body read within the view's limit; the answer is
        recorded here, as this front's own."""
        view, rule, params = self._flask_routes.match(path, scope["method"])
        raw = b""
        if view is not None:
            try:
                access = route_access(view)
                if self._guard.enabled and not access.open:
                    authorize(access, await self._authenticate(scope), params)
                raw = await self._read_body(receive, head, body_limit(view, self._config["MAX_CONTENT_LENGTH"]),
                                            scope["http_version"])
            except (ApiError, HTTPException) as exc:
                await self._refuse(send, scope, exc, rule)
                return
        request_id, started = cast("dict[str, Any]", scope)[telemetry.SCOPE_KEY]
        status = 500

        async def recorded(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self._flask(scope, _replay(raw), recorded)
        finally:
            telemetry.record(request_id, scope["method"], rule, scope["path"], status,
                             started, client=telemetry.asgi_client(scope, self._proxies))

    async def _read_body(self, receive: Receive, head: _Head, limit: int | None,
                         http_version: str) -> bytes:
        """The whole body, at most ``limit`` bytes; else 408, 413, or 400 for a body cut
        short (a client gone, or chunked framing the server could not decode)."""
        if not head.streamed and (head.length == 0 or (
                head.length is None and http_version in ("1.1", "1.0"))):
            return b""  # HTTP/1 framing: no body
        if limit is not None and not head.streamed and (head.length or 0) > limit:
            raise RequestEntityTooLarge()
        try:
            async with asyncio.timeout(self._body_timeout):
                return await _read_all(receive, limit)
        except TimeoutError:
            raise RequestTimeout(f"the request body did not arrive within "
                                 f"{self._body_timeout:g} s") from None

    async def _refuse(self, send: Send, scope: HTTPScope, exc: HTTPException | ApiError,
                      route: str = telemetry.UNMATCHED, headers: Headers = ()) -> None:
        """An answer before the request's body was read (then the connection closes)."""
        status, data, media_type, own = rendered(exc, scope["path"])
        headers = _closing((*own, *headers), _head(scope["headers"]), scope["http_version"])
        await _answer(send, scope, status, data, media_type.encode(), route, headers=headers,
                      client=telemetry.asgi_client(scope, self._proxies))

    async def _authenticate(self, scope: HTTPScope) -> Principal:
        """Who the request's bearer token is (else 401); the database is read (off the
        event loop) only for a token not verified in the last few seconds."""
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
                self.stop_threads()
                tracing.shutdown()  # the spans still buffered are exported
                await send({"type": "lifespan.shutdown.complete"})
                return

    def stop_threads(self) -> None:
        """Let this front's threads go (the app's state is its owner's to close)."""
        for pool in (self._receivers, self._threads, self._probe_threads):
            pool.shutdown(wait=False, cancel_futures=True)

    def _propagates(self) -> bool:
        propagate = self._app.config["PROPAGATE_EXCEPTIONS"]
        return bool(self._app.testing or self._app.debug) if propagate is None else propagate


async def _in_thread(pool: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a thread of ``pool``, with this task's context (its request id)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(pool, context.run, fn, *args)


class _FlaskRoutes:
    """The Flask app's URL map (the dashboard's), matched here as Flask will match it, to
    know whether a request is Flask's and its view (its access and body limit) before its
    body is read."""

    def __init__(self, app: Flask) -> None:
        self._adapter = app.url_map.bind("localhost")
        self._views = app.view_functions

    def takes(self, path: str, method: str) -> bool:
        """Whether Flask answers: a view of its, or its redirect or 405 for one of its
        paths."""
        try:
            self._adapter.match(path or "/", method)
        except RequestRedirect:
            return True
        except HTTPException as exc:  # NotFound, MethodNotAllowed
            return isinstance(exc, MethodNotAllowed)
        return True

    def match(self, path: str, method: str
              ) -> tuple[Callable[..., Any] | None, str, Mapping[str, Any]]:
        """The view, rule and path parameters of the request's route; (None, UNMATCHED,
        {}) for none (Flask answers a redirect or 405)."""
        try:
            rule, params = self._adapter.match(path or "/", method, return_rule=True)
        except (HTTPException, RequestRedirect):
            return None, telemetry.UNMATCHED, {}
        return self._views[rule.endpoint], rule.rule, params


async def _answer(send: Send, scope: HTTPScope, status: int, data: bytes,
                  content_type: bytes | None, route: str, *, quiet: bool = False,
                  headers: Headers = (), client: str | None = None) -> None:
    """Send an answer of this front's own, with the request's id, and record it."""
    request_id, started = cast("dict[str, Any]", scope)[telemetry.SCOPE_KEY]
    fields = [(b"content-length", b"%d" % len(data)), (b"x-request-id", request_id.encode()),
              *((k.lower().encode(), v.encode()) for k, v in headers)]
    if content_type is not None:
        fields.insert(0, (b"content-type", content_type))
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body",
                "body": b"" if scope["method"] == "HEAD" else data})
    telemetry.record(request_id, scope["method"], route, scope["path"], status, started,
                     hot=quiet, client=client)


_BEYOND_ANY_LIMIT = 1 << 64


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
            # past 19 digits a length is beyond any limit (and int() refuses 4,300)
            length = (int(value) if len(value) <= 19 else _BEYOND_ANY_LIMIT
                      ) if value.isdigit() else None
        elif name == b"transfer-encoding":
            streamed = True
        elif name == b"x-request-id" and request_id is None:
            request_id = value.decode("latin-1")
    return _Head(length if lengths == 1 else None, streamed, size, request_id)


def _closing(headers: Headers, head: _Head, http_version: str) -> Headers:
    """An answer's header fields, telling an HTTP/1 client to close the connection when
    its request has a body left unread: Granian closes it then, and a client that reused
    it would meet a closed connection instead of its next answer."""
    if http_version in ("1.0", "1.1") and (head.streamed or (head.length or 0) > 0):
        return (*headers, ("Connection", "close"))
    return headers


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_all(receive: Receive, limit: int | None) -> bytes:
    """The body's messages up to the last one; refused once over ``limit`` or cut short."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("the request body ended before it was whole (the client "
                                 "went away, or its chunked framing is malformed)",
                                 code=ProblemCode.INCOMPLETE_BODY)
        chunk = message.get("body", b"") if message["type"] == "http.request" else b""
        size += len(chunk)
        if limit is not None and size > limit:
            raise RequestEntityTooLarge()
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
