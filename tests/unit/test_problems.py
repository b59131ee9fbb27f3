"""The problem codes (app/problems.py): every code the service answers is a member of
``ProblemCode``; each route of the table declares members, and no module of app, checker
or spark_outbox spells a code as a string literal of its own."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from app.api.http import problem_document
from app.api.routes import ROUTES, Noted, Problems
from app.errors import ApiError, InvalidRequest
from app.problems import ProblemCode

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "app" / "problems.py"
PACKAGES = ("app", "checker", "spark_outbox")

_CODES = frozenset(ProblemCode)
_QUOTED = re.compile(r"""(?<![A-Za-z0-9_])[rbuf]?(["'])([a-z][a-z0-9]*(?:_[a-z0-9]+)*)\1""")
# a string literal where a code is given: to an ApiError, a pydantic custom error, a readiness
_GIVEN = re.compile(r"""(?:\bcode\s*=\s*|_custom\(\s*|PydanticCustomError\(\s*)f?["']""")


def code_literals(source: str) -> list[str]:
    """The lines of ``source`` that spell a problem code as a string literal: a known code
    anywhere in quotes, or any string given where a code goes."""
    return [line.strip() for line in source.splitlines()
            if _GIVEN.search(line)
            or any(m.group(2) in _CODES for m in _QUOTED.finditer(line))]


def undeclared(problems: Problems) -> list[object]:
    """The codes of a route's ``problems`` that are not ``ProblemCode`` members."""
    codes = [entry.code if isinstance(entry, Noted) else entry
             for entries in problems.values() for entry in entries]
    return [code for code in codes if type(code) is not ProblemCode]


def test_no_module_spells_a_code() -> None:
    offenders = {str(path.relative_to(ROOT)): found
                 for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                 if path != HOME and (found := code_literals(path.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize("line", [
    '    raise InvalidRequest("bad", code="invalid_topic")',
    '    raise NotFound(f"no such thing {x!r}", code="brand_new_not_found")',
    "        raise Conflict('no', code = 'some_conflict', state=state)",
    '    status, code, title = 404, "not_found", "Not found"',
    '    code = "bad_request"',
    '            raise _custom("invalid_tag", "tag must not contain NUL characters")',
    '            raise _custom("fresh_code", "why")',
    '            raise PydanticCustomError("invalid_scope", "unknown scope")',
    '        return Readiness(None, head, "database_unavailable", "why")',
    '    if ready.code == "schema_not_at_head":',
    '_HTTP_CODES = {404: "route_not_found", 405: "method_not_allowed"}',
    '    "missing": "missing_field",',
])
def test_the_rule_finds_a_planted_literal(line: str) -> None:
    assert code_literals(f'"""A module."""\n\n\ndef f():\n{line}\n') == [line.strip()]


@pytest.mark.parametrize("line", [
    '    raise InvalidRequest("bad", code=ProblemCode.INVALID_TOPIC)',
    '    raise _custom(ProblemCode.INVALID_TAG, "tag must not contain NUL characters")',
    '    status, code, title = 404, ProblemCode.NOT_FOUND, "Not found"',
    '    log.info("the topic is invalid_topic-like", extra={"topic": topic})',
    '    if row.state == "PREPARED":',
    '    return {"status": "ready", "revision": revision}',
    '    status_code = 400',
])
def test_the_rule_passes_what_is_no_code(line: str) -> None:
    assert code_literals(f'"""A module."""\n\n\ndef f():\n{line}\n') == []


def test_every_route_declares_members_of_the_enum() -> None:
    assert {f"{r.method} {r.path}": found for r in ROUTES
            if (found := undeclared(r.problems))} == {}
    declared = {entry.code if isinstance(entry, Noted) else entry
                for r in ROUTES for codes in r.problems.values() for entry in codes}
    assert ProblemCode.INVALID_QUERY_PARAMETER in declared


def test_the_route_check_finds_a_free_string() -> None:
    assert undeclared({"400": (ProblemCode.INVALID_TOPIC, "invalid_topic")}) == ["invalid_topic"]
    assert undeclared({"404": (Noted("gone", "an ack's subscription"),)}) == ["gone"]  # type: ignore[arg-type]
    assert undeclared({"409": (Noted(ProblemCode.ACK_CONFLICT, "why"),)}) == []


def test_a_member_is_its_code_in_the_json() -> None:
    err = InvalidRequest("bad topic", code=ProblemCode.INVALID_TOPIC)
    doc = orjson.loads(problem_document(err.status, err.code, err.title, err.detail, "/x"))
    assert doc["code"] == "invalid_topic"
    assert doc["type"] == "urn:txmsg:problem:invalid_topic"
    assert ApiError("x").code == "bad_request"
