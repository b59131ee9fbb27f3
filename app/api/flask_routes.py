"""Flask's URL map, derived from the route table (``app.api.routes``).

Flask serves what the ASGI front leaves to it (the dashboard, and everything with
``TXMSG_WEB_HOT_ROUTES=false``), everything under a WSGI server (``app.web.app_from_env``)
and the tests' Flask client. Each route's view is one generic adapter: it builds the
same ``Call`` from ``flask.request`` as the front builds from the ASGI scope, runs the
route's handler on the request's thread, and renders its answer, or its error, with the
one renderer (``app.api.http``). The view carries its route's access declaration, which
``app.api.access.install`` checks before it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from app.api.access import current_principal
from app.api.call import Answer, Call, Raw
from app.api.http import JSON_MEDIA_TYPE, dump_json, rendered, state
from app.api.routes import ROUTES, Route
from app.errors import ApiError


def install(app: Flask) -> None:
    """Every route of the table, and the problem+json renderer, on the Flask app."""
    app.register_error_handler(ApiError, _error)
    app.register_error_handler(HTTPException, _error)
    for route in ROUTES:
        app.add_url_rule(route.rule, endpoint=route.name, view_func=_view(route),
                         methods=[route.method])


def _view(route: Route) -> Callable[..., Response]:
    handler = route.for_thread()
    reads_body = route.body is not None

    def view(**params: str) -> Response:
        call = Call(params, request_body() if reads_body else b"", current_principal(),
                    state(), [(k.lower().encode("latin-1"), v.encode("latin-1"))
                              for k, v in request.headers.items()], _query=request.args)
        return response(handler(call))

    view.__name__ = view.__qualname__ = route.name
    view.__doc__ = route.summary
    view.access = route.access  # type: ignore[attr-defined]
    view.carries_messages = route.carries_messages  # type: ignore[attr-defined]
    return view


def request_body() -> bytes:
    """The whole request body; 413 for a streamed one longer than MAX_CONTENT_LENGTH
    (werkzeug stops reading such a body at the limit and hands over what it has)."""
    raw = request.get_data(cache=False)
    limit = request.max_content_length
    if (limit is not None and len(raw) >= limit and request.content_length is None
            and request.environ["wsgi.input"].read(1)):
        raise RequestEntityTooLarge()
    return raw


def response(answer: Answer) -> Response:
    status, body = answer
    if body is None:  # a 204: no body, so no Content-Type either
        empty = Response(status=status)
        del empty.headers["Content-Type"]
        return empty
    if isinstance(body, Raw):
        return Response(body.data, status=status, content_type=body.media_type)
    return Response(dump_json(body), status=status, mimetype=JSON_MEDIA_TYPE)


def _error(exc: Any) -> Response:
    status, data, media_type, headers = rendered(exc, request.path)
    answer = Response(data, status=status, mimetype=media_type, headers=list(headers))
    if status == 405 and isinstance(exc, HTTPException):
        allow = exc.get_response().headers.get("Allow")
        if allow:
            answer.headers["Allow"] = allow
    return answer
