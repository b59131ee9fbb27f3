"""The hot routes, send and commit/rollback, dispatched as plain WSGI in front of Flask.

A producer's send + commit pair is two requests, and under load much of the web worker's
time went to Flask's per-request machinery (request and app contexts, URL map binding,
Request and Response objects), all of it holding the one interpreter lock that the
group-commit writers wait for. Measured on Granian with the store stubbed out, the app
cost 0.40 ms of CPU per pair and a bare WSGI answer 0.09 ms; in the benchmark, serving
these routes ahead of Flask took the service from about 0.68 to 0.42 ms of CPU per pair
and (b) from about 1,250 to 1,600 pairs/s.

``HotRoutes`` matches those three routes itself and calls the very handlers the
Flask routes call (``send_transaction``, ``finish_transaction``), with the same error
rendering. Anything it does not serve exactly like Flask (another method or path, a
chunked body, one over the limit, a non-ASCII path, a script root) goes to Flask
untouched, before a byte of the body is read.

Turned off with ``TXMSG_WEB_HOT_ROUTES=false``; the tests compare both ways answer for
answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from werkzeug.exceptions import ClientDisconnected, HTTPException, InternalServerError
from werkzeug.http import HTTP_STATUS_CODES

from app.api.http import PROBLEM_MEDIA_TYPE, api_problem, dump_json, http_problem
from app.api.transactions import finish_transaction, send_transaction
from app.domain.states import Op
from app.errors import ApiError

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

# the Flask rules' shapes: <group> and <transaction_id> are one path segment each
_ROUTE = re.compile(r"/v1/producer-groups/([^/]+)/transactions(?:/([^/]+)/(commit|rollback))?")
_OPS = {"commit": Op.COMMIT, "rollback": Op.ROLLBACK}
_STATUS = {code: f"{code} {text.upper()}" for code, text in HTTP_STATUS_CODES.items()}


class HotRoutes:
    """WSGI middleware: ``app.wsgi_app = HotRoutes(app, app.wsgi_app)``."""

    def __init__(self, app: Flask, fallback: WSGIApp) -> None:
        self._app = app
        self._fallback = fallback

    def __call__(self, environ: dict[str, Any], start_response: StartResponse
                 ) -> Iterable[bytes]:
        match = self._match(environ)
        if match is None:
            return self._fallback(environ, start_response)
        group, transaction_id, op = match.groups()
        path = environ["PATH_INFO"]
        content_type = "application/json"
        try:
            lifecycle = self._app.extensions["txmsg"].lifecycle
            if op is None:
                body, status = send_transaction(lifecycle, group, _read_body(environ))
            else:
                body, status = finish_transaction(lifecycle, group, transaction_id,
                                                  _OPS[op]), 200
            data = dump_json(body)
        except ApiError as exc:
            status, data, content_type = exc.status, api_problem(exc, path), PROBLEM_MEDIA_TYPE
        except HTTPException as exc:
            (status, data), content_type = http_problem(exc, path), PROBLEM_MEDIA_TYPE
        except Exception:
            if self._propagates():
                raise
            # as Flask does with an unhandled error: log it, answer 500
            self._app.logger.exception("Exception on %s [POST]", path)
            (status, data), content_type = (http_problem(InternalServerError(), path),
                                            PROBLEM_MEDIA_TYPE)
        start_response(_STATUS[status], [("Content-Type", content_type),
                                         ("Content-Length", str(len(data)))])
        return [data]

    def _match(self, environ: dict[str, Any]) -> re.Match[str] | None:
        if environ.get("REQUEST_METHOD") != "POST" or environ.get("SCRIPT_NAME"):
            return None
        path = environ.get("PATH_INFO", "")
        match = _ROUTE.fullmatch(path)
        if match is None or not path.isascii():
            return None
        if match.group(3) is None:  # a send: only a body Flask would read the same way
            length = environ.get("CONTENT_LENGTH")
            if environ.get("HTTP_TRANSFER_ENCODING") or (
                    not length and environ.get("wsgi.input_terminated")):
                return None  # a body read to its end (chunked): werkzeug's way
            length = length or "0"  # none, from a server that does not terminate: empty
            limit = self._app.config["MAX_CONTENT_LENGTH"]
            if not length.isdigit() or (limit is not None and int(length) > limit):
                return None
        return match

    def _propagates(self) -> bool:
        propagate = self._app.config["PROPAGATE_EXCEPTIONS"]
        return bool(self._app.testing or self._app.debug) if propagate is None else propagate


def _read_body(environ: dict[str, Any]) -> bytes:
    """Exactly Content-Length bytes, as werkzeug reads them (a short body is a 400)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    stream = environ["wsgi.input"]
    data = stream.read(length) if length else b""
    while len(data) < length:
        more = stream.read(length - len(data))
        if not more:
            raise ClientDisconnected()
        data += more
    return data
