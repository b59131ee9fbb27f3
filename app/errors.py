"""The error family every layer raises and the API renders as RFC 9457 problem+json."""

from __future__ import annotations

from typing import Any

from app.problems import ProblemCode


class ApiError(Exception):
    status = 400
    code: ProblemCode = ProblemCode.BAD_REQUEST
    title = "Bad request"
    headers: tuple[tuple[str, str], ...] = ()  # HTTP headers the answer carries

    def __init__(self, detail: str, *, code: ProblemCode | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.extra = extra


class InvalidRequest(ApiError):
    status, code, title = 400, ProblemCode.INVALID_REQUEST, "Invalid request"


class Unauthenticated(ApiError):
    """No token, or one that is unknown or revoked (RFC 6750: a challenge in the answer)."""

    status, code, title = 401, ProblemCode.UNAUTHENTICATED, "Unauthenticated"

    def __init__(self, detail: str, *, token_given: bool) -> None:
        super().__init__(detail)
        challenge = 'Bearer realm="txmsg"'
        if token_given:
            challenge += ', error="invalid_token"'
        self.headers = (("WWW-Authenticate", challenge),)


class Forbidden(ApiError):
    status, code, title = 403, ProblemCode.FORBIDDEN, "Forbidden"


class NotFound(ApiError):
    status, code, title = 404, ProblemCode.NOT_FOUND, "Not found"


class Conflict(ApiError):
    status, code, title = 409, ProblemCode.CONFLICT, "State conflict"


class PayloadTooLarge(ApiError):
    status, code, title = 413, ProblemCode.PAYLOAD_TOO_LARGE, "Payload too large"


class UnregisteredProducerGroup(ApiError):
    status, code = 422, ProblemCode.UNREGISTERED_PRODUCER_GROUP
    title = "Unregistered producer group"


class DatabaseUnavailable(ApiError):
    """Raised at the engine's edge (``app.storage.db``) for every way the database fails
    to answer; ``connection_invalidated``: the connection it failed on was lost."""

    status, code, title = 503, ProblemCode.DATABASE_UNAVAILABLE, "Database unavailable"
    connection_invalidated = False


def one_line(exc: BaseException) -> str:
    """An error in one short line, for logs: for a database error, the driver's first
    line, without the SQL statement and parameters SQLAlchemy appends (for an unavailable
    database, the driver's error it was raised for)."""
    if isinstance(exc, DatabaseUnavailable) and exc.__cause__ is not None:
        exc = exc.__cause__
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0] if lines else ''}"[:200]
