"""Request parsing and response rendering shared by the blueprints; problem+json errors."""

from __future__ import annotations

import re
from typing import Any

import orjson
from flask import Flask, Response, current_app, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from app.domain.limits import MAX_INT64
from app.errors import ApiError, InvalidRequest

PROBLEM_TYPE = "urn:txmsg:problem:"
PROBLEM_MEDIA_TYPE = "application/problem+json"
_ORJSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC
# plain decimal digits only (int() would also take "1_0", " 7" or other scripts' digits)
_INT_RE = re.compile(r"-?[0-9]{1,19}")


def dump_json(body: Any) -> bytes:
    return orjson.dumps(body, option=_ORJSON_OPTIONS)


def json_response(body: Any, status: int = 200) -> Response:
    return Response(dump_json(body), status=status, mimetype="application/json")


def parse_json(raw: bytes) -> Any:
    """A request body as JSON, whatever the Content-Type says."""
    if not raw:
        raise InvalidRequest("the request needs a JSON body", code="invalid_json")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from None


def request_body() -> bytes:
    """The whole request body; 413 for a streamed one longer than MAX_CONTENT_LENGTH
    (werkzeug stops reading such a body at the limit and hands over what it has)."""
    raw = request.get_data(cache=False)
    limit = request.max_content_length
    if (limit is not None and len(raw) >= limit and request.content_length is None
            and request.environ["wsgi.input"].read(1)):
        raise RequestEntityTooLarge()
    return raw


def json_body() -> Any:
    return parse_json(request_body())


def no_content() -> Response:
    """A 204: no body, so no Content-Type either."""
    response = Response(status=204)
    del response.headers["Content-Type"]
    return response


def int_arg(name: str, default: int, lo: int, hi: int = MAX_INT64) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    value = int(raw) if _INT_RE.fullmatch(raw) else None
    if value is None or value < lo or value > hi:
        bounds = f"{lo}..{hi}" if hi != MAX_INT64 else f">= {lo}"
        raise InvalidRequest(f"query parameter {name} must be an integer {bounds}, got {raw!r}",
                             code="invalid_query_parameter", parameter=name)
    return value


def limit_arg() -> int:
    return int_arg("limit", 100, 1, 1000)


def state() -> Any:
    return current_app.extensions["txmsg"]


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


def problem(status: int, code: str, title: str, detail: str, **extra: Any) -> Response:
    return Response(problem_document(status, code, title, detail, request.path, **extra),
                    status=status, mimetype=PROBLEM_MEDIA_TYPE)


_HTTP_CODES = {404: "route_not_found", 405: "method_not_allowed", 413: "payload_too_large",
               400: "bad_request", 415: "unsupported_media_type", 500: "internal_error",
               408: "request_timeout", 414: "uri_too_long",
               431: "request_header_fields_too_large"}


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return Response(api_problem(exc, request.path), status=exc.status,
                        mimetype=PROBLEM_MEDIA_TYPE, headers=exc.headers)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status, body = http_problem(exc, request.path)
        response = Response(body, status=status, mimetype=PROBLEM_MEDIA_TYPE)
        if status == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response
