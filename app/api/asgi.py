"""The ASGI front of the API: send, commit and rollback on the event loop, the rest Flask.

A producer's send + commit pair is two requests, each of which waits for a group-commit
batch to be durable. Served as WSGI, every waiting request held a thread, and the worker
spent more than half of its CPU in the kernel, mostly switching among the 64 request
threads and the writers as they took turns on the one interpreter lock. Here a waiting
request is a coroutine: the writer wakes the event loop once per batch, not each
request's thread (the README's performance section has the figures).

The three routes are matched here and handled by the same functions the Flask routes
call (``parse_send``, ``send_answer``, ``check_finish``, the lifecycle), with the same
error rendering. Everything else, and whatever of those routes is not served exactly
as Flask would serve it (a body without a Content-Length, one over the limit, a
non-ASCII path, a root path), goes to the Flask app unchanged, behind a2wsgi's
WSGI-to-ASGI bridge with a pool of ``web_threads`` threads. ``TXMSG_WEB_HOT_ROUTES=false``
sends everything to Flask; the tests compare both ways answer for answer.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from a2wsgi import WSGIMiddleware
from flask import Flask
from werkzeug.exceptions import InternalServerError

from app.api.http import PROBLEM_MEDIA_TYPE, api_problem, dump_json, http_problem
from app.api.transactions import check_finish, parse_send, send_answer
from app.errors import ApiError
from app.storage.db import unavailable
from app.vocabulary import Op

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# the Flask rules' shapes: <group> and <transaction_id> are one path segment each
_ROUTE = re.compile(r"/v1/producer-groups/([^/]+)/transactions(?:/([^/]+)/(commit|rollback))?")
_OPS = {"commit": Op.COMMIT, "rollback": Op.ROLLBACK}
_JSON = b"application/json"
_PROBLEM = PROBLEM_MEDIA_TYPE.encode()


class Api:
    """The ASGI application ``txmsg serve`` runs: ``Api(create_app(settings))``."""

    def __init__(self, app: Flask) -> None:
        self._app = app
        self._state = app.extensions["txmsg"]
        self._hot = bool(self._state.settings.web_hot_routes)
        self._flask = WSGIMiddleware(_terminated_input(app),
                                     workers=self._state.settings.web_threads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        match = self._match(scope) if self._hot else None
        if match is None:
            # a2wsgi reads the body from a worker thread with run_coroutine_threadsafe,
            # which takes a coroutine; a server's receive may be another awaitable
            async def receive_coroutine() -> Message:
                return await receive()

            await self._flask(scope, receive_coroutine, send)
            return
        await self._serve(scope, match, receive, send)

    def _match(self, scope: Scope) -> re.Match[str] | None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            return None
        path = scope["path"]
        match = _ROUTE.fullmatch(path)
        if match is None or not path.isascii():
            return None
        if match.group(3) is None:  # a send: only a body Flask would read the same way
            length = _content_length(scope["headers"])
            limit = self._app.config["MAX_CONTENT_LENGTH"]
            if length is None or (limit is not None and length > limit):
                return None
        return match

    async def _serve(self, scope: Scope, match: re.Match[str], receive: Receive,
                     send: Send) -> None:
        group, transaction_id, op = match.groups()
        path = scope["path"]
        content_type = _JSON
        try:
            lifecycle = self._state.lifecycle
            if op is None:
                raw = await _read_body(receive)
                if raw is None:
                    return  # the client went away before its body was whole
                txn = parse_send(lifecycle, group, raw)
                body, status = send_answer(await lifecycle.send_async(group, txn))
            else:
                check_finish(group, transaction_id)
                body, status = (await lifecycle.finish_async(group, transaction_id,
                                                              _OPS[op])).body, 200
            data = dump_json(body)
        except ApiError as exc:
            status, data, content_type = exc.status, api_problem(exc, path), _PROBLEM
        except Exception as exc:
            error = unavailable(exc)
            if error is not None:
                status, data, content_type = error.status, api_problem(error, path), _PROBLEM
            elif self._propagates():
                raise
            else:  # as Flask does with an unhandled error: log it, answer 500
                self._app.logger.exception("Exception on %s [POST]", path)
                (status, data), content_type = http_problem(InternalServerError(), path), _PROBLEM
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type),
                                (b"content-length", b"%d" % len(data))]})
        await send({"type": "http.response.body", "body": data})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._state.close()  # the writers finish what they hold, then stop
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _propagates(self) -> bool:
        propagate = self._app.config["PROPAGATE_EXCEPTIONS"]
        return bool(self._app.testing or self._app.debug) if propagate is None else propagate


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The declared length of a body that is not chunked, if it is a plain number."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _terminated_input(app: Flask) -> Callable[..., Iterable[bytes]]:
    """The Flask app, told that its input ends where the request's body ends (a2wsgi
    reads ASGI body messages to the last one): without it, werkzeug reads a chunked body,
    which has no Content-Length, as empty."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["wsgi.input_terminated"] = True
        return app(environ, start_response)

    return wsgi
