"""Query parameters (app/api/query.py): each is declared once, on its route, and both the
handler's parsing and the OpenAPI document come from that declaration."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.api.call import Call
from app.api.openapi import openapi_document
from app.api.query import AFTER_ID, AFTER_TOPIC, LIMIT, STATE, Integer, Query
from app.api.routes import ROUTES
from app.domain.access import UNRESTRICTED
from app.domain.limits import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT
from app.errors import InvalidRequest
from app.problems import ProblemCode

ROOT = Path(__file__).resolve().parents[3]
# the one module that reads a query string
PARSER = ROOT / "app" / "api" / "call.py"
_READS_QUERY = re.compile(r"\.query\.get\(|\.query\[|\bquery_string\b|\bparse_qsl?\(")


def query_reads(source: str) -> list[str]:
    """The lines of ``source`` that read a request's query parameters by hand."""
    return [line.strip() for line in source.splitlines() if _READS_QUERY.search(line)]


def _call(query_string: bytes, *queries: Query) -> Call:
    return Call({}, b"", UNRESTRICTED, None, (), query_string,  # type: ignore[arg-type]
                queries=queries)


def test_no_api_module_but_the_call_reads_the_query() -> None:
    """A handler asks ``call.arg(name)`` for a parameter its route declares."""
    offenders = {str(path.relative_to(ROOT)): found
                 for path in sorted((ROOT / "app" / "api").glob("*.py"))
                 if path not in (PARSER, ROOT / "app" / "api" / "asgi.py")
                 and (found := query_reads(path.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize("line", [
    '    after = call.query.get("after")',
    '    limit = int(call.query["limit"])',
    "    pairs = parse_qsl(call.query_string.decode())",
])
def test_the_rule_finds_a_planted_read(line: str) -> None:
    assert query_reads(f"def f(call):\n{line}\n") == [line.strip()]


def test_every_operation_documents_the_query_its_route_declares() -> None:
    doc = openapi_document()
    params = doc["components"]["parameters"]
    for route in ROUTES:
        op = doc["paths"][route.path][route.method.lower()]
        refs = [p["$ref"].rsplit("/", 1)[1] for p in op.get("parameters", [])]
        assert refs == [q.key for q in route.query] + list(route.headers), route.name
        for q in route.query:
            assert params[q.key]["name"] == q.name and params[q.key]["in"] == "query"


@pytest.mark.parametrize("param", sorted({q for r in ROUTES for q in r.query
                                          if isinstance(q, Integer)}, key=lambda q: q.key),
                         ids=lambda q: q.key)
def test_an_integer_takes_what_its_schema_says(param: Integer) -> None:
    schema = openapi_document()["components"]["parameters"][param.key]["schema"]
    lo, hi = schema["minimum"], schema["maximum"]
    assert param.parse(None) == schema["default"]
    assert (param.parse(str(lo)), param.parse(str(hi))) == (lo, hi)
    for bad in (str(lo - 1), str(hi + 1), "1_0", " 7", "x", ""):
        with pytest.raises(InvalidRequest) as refused:
            param.parse(bad)
        assert refused.value.code is ProblemCode.INVALID_QUERY_PARAMETER
        assert refused.value.extra == {"parameter": param.name}


def test_a_call_parses_what_its_route_declares() -> None:
    call = _call(b"limit=7&after=orders&state=PREPARED", LIMIT, AFTER_TOPIC, STATE)
    assert (call.arg("limit"), call.arg("after"), call.arg("state")) == (7, "orders", "PREPARED")
    absent: dict[str, Any] = {"limit": DEFAULT_PAGE_LIMIT, "after": 0, "state": None}
    empty = _call(b"", LIMIT, AFTER_ID, STATE)
    assert {name: empty.arg(name) for name in absent} == absent
    with pytest.raises(InvalidRequest, match=f"1..{MAX_PAGE_LIMIT}"):
        _call(b"limit=0", LIMIT).arg("limit")
    with pytest.raises(InvalidRequest, match=r"after \(a topic name\)"):
        _call(b"after=a%20b", AFTER_TOPIC).arg("after")


def test_a_handler_cannot_read_an_undeclared_parameter() -> None:
    with pytest.raises(LookupError):
        _call(b"limit=7").arg("limit")
