"""The error family every layer raises and the API renders as RFC 9457 problem+json."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    status = 400
    code = "bad_request"
    title = "Bad request"

    def __init__(self, detail: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.extra = extra


class InvalidRequest(ApiError):
    status, code, title = 400, "invalid_request", "Invalid request"


class NotFound(ApiError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(ApiError):
    status, code, title = 409, "conflict", "State conflict"


class PayloadTooLarge(ApiError):
    status, code, title = 413, "payload_too_large", "Payload too large"


class UnregisteredProducerGroup(ApiError):
    status, code, title = 422, "unregistered_producer_group", "Unregistered producer group"


class DatabaseUnavailable(ApiError):
    status, code, title = 503, "database_unavailable", "Database unavailable"


def one_line(exc: BaseException) -> str:
    """An error in one short line, for logs: for a database error, the driver's first
    line, without the SQL statement and parameters SQLAlchemy appends."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0] if lines else ''}"[:200]
