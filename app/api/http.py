"""The API's one renderer: JSON answers and RFC 9457 problem+json errors, for the ASGI
front's answers (``app.api.asgi``) and for the few Flask gives itself (a 405 on one of the
dashboard's paths); request bodies as JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from flask import Response, current_app, request
from werkzeug.exceptions import HTTPException

from app.errors import ApiError, InvalidRequest
from app.problems import ProblemCode

if TYPE_CHECKING:
    from app.state import AppState

PROBLEM_TYPE = "urn:txmsg:problem:"
PROBLEM_MEDIA_TYPE = "application/problem+json"
JSON_MEDIA_TYPE = "application/json"
_ORJSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC
Headers = tuple[tuple[str, str], ...]


def dump_json(body: Any) -> bytes:
    return orjson.dumps(body, option=_ORJSON_OPTIONS)


def parse_json(raw: bytes) -> Any:
    """A request body as JSON, whatever the Content-Type says."""
    if not raw:
        raise InvalidRequest("the request needs a JSON body", code=ProblemCode.INVALID_JSON)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}",
                             code=ProblemCode.INVALID_JSON) from None


def state() -> AppState:
    """The app's state, for what Flask serves (the dashboard)."""
    app_state: AppState = current_app.extensions["txmsg"]
    return app_state


def problem_document(status: int, code: str, title: str, detail: str, instance: str,
                     **extra: Any) -> bytes:
    """An RFC 9457 problem+json body (``PROBLEM_MEDIA_TYPE``)."""
    return orjson.dumps({"type": PROBLEM_TYPE + code, "title": title, "status": status,
                         "detail": detail, "code": code, "instance": instance, **extra})


def api_problem(exc: ApiError, instance: str) -> bytes:
    return problem_document(exc.status, exc.code, exc.title, exc.detail, instance, **exc.extra)


def http_problem(exc: HTTPException, instance: str) -> tuple[int, bytes]:
    """A werkzeug HTTP error (404 route, 405, 413, 500 ...) as problem+json."""
    status = exc.code or 500
    return status, problem_document(status, _HTTP_CODES.get(status, f"http_{status}"),
                                    exc.name, exc.description or exc.name, instance)


def rendered(error: ApiError | HTTPException, instance: str
             ) -> tuple[int, bytes, str, Headers]:
    """(status, body, media type, header fields) of an error's answer."""
    if isinstance(error, ApiError):
        return error.status, api_problem(error, instance), PROBLEM_MEDIA_TYPE, error.headers
    return (*http_problem(error, instance), PROBLEM_MEDIA_TYPE, ())


def flask_problem(exc: HTTPException) -> Response:
    """Flask's own HTTP errors (those of its routing, outside the dashboard's views) as
    problem+json, with their ``Allow``."""
    status, data, media_type, _ = rendered(exc, request.path)
    answer = Response(data, status=status, mimetype=media_type)
    allow = exc.get_response().headers.get("Allow") if status == 405 else None
    if allow:
        answer.headers["Allow"] = allow
    return answer


_HTTP_CODES = {404: ProblemCode.ROUTE_NOT_FOUND, 405: ProblemCode.METHOD_NOT_ALLOWED,
               413: ProblemCode.PAYLOAD_TOO_LARGE, 400: ProblemCode.BAD_REQUEST,
               415: ProblemCode.UNSUPPORTED_MEDIA_TYPE, 500: ProblemCode.INTERNAL_ERROR,
               408: ProblemCode.REQUEST_TIMEOUT, 414: ProblemCode.URI_TOO_LONG,
               431: ProblemCode.REQUEST_HEADER_FIELDS_TOO_LARGE}
