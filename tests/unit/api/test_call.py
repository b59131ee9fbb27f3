"""A handler's ``Call``: its query, parsed once, and its declared parameters' bounds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.api.call import Call
from app.api.query import LIMIT, Integer
from app.domain.access import UNRESTRICTED
from app.domain.limits import DEFAULT_PAGE_LIMIT, MAX_INT64, MAX_PAGE_LIMIT
from app.errors import InvalidRequest


def call(query: bytes = b"", **kwargs: Any) -> Call:
    return Call(params={}, body=b"", principal=UNRESTRICTED, state=None,  # type: ignore[arg-type]
                headers=(), query_string=query, **kwargs)


def test_the_first_value_of_a_parameter_counts() -> None:
    assert call(b"a=1&a=2&b=&c").query == {"a": "1", "b": "", "c": ""}


def test_the_query_is_percent_decoded_as_utf8() -> None:
    assert call(b"name=caf%C3%A9+x&bad=%FF").query == {"name": "café x", "bad": "\ufffd"}


def test_the_query_is_parsed_once() -> None:
    c = call(b"a=1")
    assert c.query is c.query


N = Integer("n", "n", "a test's parameter", lo=-10, default=5)
N_TO_10 = Integer("n", "n", "a bounded one", lo=0, hi=10, default=5)


@pytest.mark.parametrize(("query", "expected"), [
    (b"", 5),
    (b"n=0", 0),
    (b"n=-3", -3),
    (b"n=9223372036854775807", MAX_INT64),
])
def test_an_integer_parameter(query: bytes, expected: int) -> None:
    assert call(query, queries=(N,)).arg("n") == expected


@pytest.mark.parametrize("raw", ["", "x", "1.0", "1e3", "1_0", "+1", " 7", "%207", "%D9%A3",
                                 "-11", "12345678901234567890"])
def test_what_is_no_plain_integer_in_bounds_is_refused(raw: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        call(f"n={raw}".encode(), queries=(N,)).arg("n")
    assert caught.value.code == "invalid_query_parameter"
    assert caught.value.extra == {"parameter": "n"}


def test_the_refusal_names_the_bounds() -> None:
    with pytest.raises(InvalidRequest) as caught:
        call(b"n=11", queries=(N_TO_10,)).arg("n")
    assert "0..10" in caught.value.detail and "'11'" in caught.value.detail
    with pytest.raises(InvalidRequest) as caught:
        call(b"n=-11", queries=(N,)).arg("n")
    assert ">= -10" in caught.value.detail


def test_the_page_limit() -> None:
    assert call(queries=(LIMIT,)).arg("limit") == DEFAULT_PAGE_LIMIT
    assert call(b"limit=1", queries=(LIMIT,)).arg("limit") == 1
    assert call(f"limit={MAX_PAGE_LIMIT}".encode(), queries=(LIMIT,)).arg("limit") == \
        MAX_PAGE_LIMIT
    for bad in (b"limit=0", f"limit={MAX_PAGE_LIMIT + 1}".encode()):
        with pytest.raises(InvalidRequest):
            call(bad, queries=(LIMIT,)).arg("limit")


def test_a_parameter_the_route_does_not_declare_is_a_bug() -> None:
    with pytest.raises(LookupError):
        call(b"n=1").arg("n")


def test_run_calls_in_place_without_an_offload_and_through_it_with_one() -> None:
    assert asyncio.run(call().run(lambda a, b: a + b, 2, 3)) == 5
    offloaded: list[Any] = []

    async def offload(fn: Any, *args: Any) -> Any:
        offloaded.append(fn)
        return fn(*args)

    assert asyncio.run(call(offload=offload).run(max, 2, 3)) == 3
    assert offloaded == [max]
