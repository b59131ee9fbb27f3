"""The API's renderer: problem+json documents for our errors and werkzeug's, JSON both ways."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from werkzeug.exceptions import ImATeapot, MethodNotAllowed, NotFound, RequestEntityTooLarge

from app.api.http import (
    PROBLEM_MEDIA_TYPE,
    PROBLEM_TYPE,
    dump_json,
    parse_json,
    problem_document,
    rendered,
)
from app.errors import Conflict, InvalidRequest, Unauthenticated


def test_utc_datetimes_are_written_with_z_and_naive_ones_taken_as_utc() -> None:
    assert dump_json({"at": datetime(2024, 5, 1, tzinfo=UTC)}) == b'{"at":"2024-05-01T00:00:00Z"}'
    assert dump_json(datetime(2024, 5, 1, 12, 0)) == b'"2024-05-01T12:00:00Z"'
    paris = timezone(timedelta(hours=2))  # another offset is kept as it is
    assert dump_json(datetime(2024, 5, 1, 14, tzinfo=paris)) == b'"2024-05-01T14:00:00+02:00"'


def test_a_body_is_json_whatever_its_media_type() -> None:
    assert parse_json(b'{"a": [1, null]}') == {"a": [1, None]}
    assert parse_json(b"7") == 7


@pytest.mark.parametrize("raw", [b"", b"{", b"{'a': 1}", b"\xff", b"NaN"])
def test_what_is_not_json_is_invalid_json(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_json(raw)
    assert caught.value.code == "invalid_json"
    assert caught.value.status == 400


def test_a_problem_document_has_the_rfc_9457_members_and_the_extras() -> None:
    doc = orjson.loads(problem_document(409, "conflict", "State conflict", "no", "/v1/x",
                                        offset=3))
    assert doc == {"type": PROBLEM_TYPE + "conflict", "title": "State conflict", "status": 409,
                   "detail": "no", "code": "conflict", "instance": "/v1/x", "offset": 3}


def test_an_api_error_renders_its_status_code_extras_and_headers() -> None:
    error = Conflict("offset 3 is held", code="ack_conflict", offset=3)
    status, body, media_type, headers = rendered(error, "/v1/topics/t")
    assert (status, media_type, headers) == (409, PROBLEM_MEDIA_TYPE, ())
    doc = orjson.loads(body)
    assert doc["type"] == "urn:txmsg:problem:ack_conflict" and doc["code"] == "ack_conflict"
    assert doc["offset"] == 3 and doc["instance"] == "/v1/topics/t"
    assert doc["detail"] == "offset 3 is held" and doc["title"] == "State conflict"


def test_an_unauthenticated_answer_carries_its_challenge() -> None:
    _, _, _, headers = rendered(Unauthenticated("who?", token_given=True), "/")
    assert headers == (("WWW-Authenticate", 'Bearer realm="txmsg", error="invalid_token"'),)
    _, _, _, headers = rendered(Unauthenticated("who?", token_given=False), "/")
    assert headers == (("WWW-Authenticate", 'Bearer realm="txmsg"'),)


@pytest.mark.parametrize(("error", "status", "code"), [
    (NotFound(), 404, "route_not_found"),
    (MethodNotAllowed(["GET"]), 405, "method_not_allowed"),
    (RequestEntityTooLarge(), 413, "payload_too_large"),
    (ImATeapot(), 418, "http_418"),  # one without a code of ours
])
def test_werkzeug_errors_render_as_problems(error: Exception, status: int, code: str) -> None:
    got_status, body, media_type, headers = rendered(error, "/nowhere")  # type: ignore[arg-type]
    doc = orjson.loads(body)
    assert (got_status, media_type, headers) == (status, PROBLEM_MEDIA_TYPE, ())
    assert (doc["status"], doc["code"], doc["instance"]) == (status, code, "/nowhere")
    assert doc["type"] == PROBLEM_TYPE + code and doc["detail"]
