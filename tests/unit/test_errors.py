"""The error family, and errors as one short log line."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy import exc as sa_exc

from app.errors import (
    ApiError,
    Conflict,
    DatabaseUnavailable,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Unauthenticated,
    UnregisteredProducerGroup,
    one_line,
)


@pytest.mark.parametrize(("cls", "status", "code"), [
    (ApiError, 400, "bad_request"),
    (InvalidRequest, 400, "invalid_request"),
    (Forbidden, 403, "forbidden"),
    (NotFound, 404, "not_found"),
    (Conflict, 409, "conflict"),
    (PayloadTooLarge, 413, "payload_too_large"),
    (UnregisteredProducerGroup, 422, "unregistered_producer_group"),
    (DatabaseUnavailable, 503, "database_unavailable"),
])
def test_each_error_has_its_status_and_default_code(cls: type[ApiError], status: int,
                                                    code: str) -> None:
    error = cls("why")
    assert (error.status, error.code, error.detail, str(error)) == (status, code, "why", "why")
    assert error.headers == () and error.extra == {}


def test_a_code_and_extras_given_belong_to_that_error_only() -> None:
    specific = NotFound("no topic", code="topic_not_found", topic="t")
    assert (specific.code, specific.extra) == ("topic_not_found", {"topic": "t"})
    assert NotFound("x").code == "not_found" and NotFound.code == "not_found"


def test_unauthenticated_challenges() -> None:
    assert Unauthenticated("x", token_given=False).headers == (
        ("WWW-Authenticate", 'Bearer realm="txmsg"'),)
    assert Unauthenticated("x", token_given=True).headers == (
        ("WWW-Authenticate", 'Bearer realm="txmsg", error="invalid_token"'),)
    assert Unauthenticated("x", token_given=True).status == 401


def test_one_line_of_a_plain_error() -> None:
    assert one_line(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert one_line(RuntimeError()) == "RuntimeError: "
    assert len(one_line(ValueError("x" * 500))) == 200


def test_one_line_of_a_database_error_is_the_drivers_without_the_statement() -> None:
    engine = create_engine("sqlite://")
    with pytest.raises(sa_exc.OperationalError) as caught, engine.connect() as conn:
        conn.execute(text("SELECT secret_column FROM nowhere WHERE x = :p"), {"p": "param"})
    engine.dispose()
    line = one_line(caught.value)
    assert line == "OperationalError: no such table: nowhere"
    assert "SELECT" not in line and "param" not in line


def test_one_line_of_an_unavailable_database_is_its_cause() -> None:
    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as cause:
            raise DatabaseUnavailable("the database does not answer") from cause
    except DatabaseUnavailable as exc:
        assert one_line(exc) == "OperationalError: database is locked"
    assert one_line(DatabaseUnavailable("down")) == "DatabaseUnavailable: down"
