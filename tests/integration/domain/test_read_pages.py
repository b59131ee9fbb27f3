"""Pages of a topic read are bounded in bytes as well as in count, on both stores."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import finish, register, send, statements_run

BUDGET = 1000


@pytest.fixture
def small_pages(database_url: str) -> Iterator[Any]:
    app = create_app(make_settings(database_url, max_read_bytes=BUDGET))
    yield front(app)
    app.extensions["txmsg"].close()


def commit(client: Any, messages: list[dict[str, Any]]) -> None:
    sent = send(client, messages=messages)
    assert sent.status_code == 201, sent.json
    assert finish(client, sent.json["transaction_id"], "commit").status_code == 200


def page(client: Any, from_offset: int, limit: int = 100) -> tuple[list[int], int]:
    r = client.get(f"/v1/topics/t/messages?from_offset={from_offset}&limit={limit}")
    assert r.status_code == 200, r.json
    return [m["offset"] for m in r.json["messages"]], r.json["next_offset"]


def test_a_page_holds_at_most_the_byte_budget_but_at_least_one_message(small_pages) -> None:
    client = small_pages
    register(client)
    binary = base64.b64encode(b"\xff" * 600).decode()  # 800 characters, 600 bytes
    commit(client, [{"topic": "t", "body": "a" * 400}, {"topic": "t", "body": "b" * 400},
                    {"topic": "t", "body": "c" * 400}, {"topic": "t", "body": "d" * 1500},
                    {"topic": "t", "body_base64": binary}, {"topic": "t", "body": "é" * 200},
                    {"topic": "t", "body": "f" * 10}])

    assert page(client, 0) == ([0, 1], 2)  # 800 bytes; a third would make 1200
    assert page(client, 2) == ([2], 3)
    assert page(client, 3) == ([3], 4)  # larger than the budget: alone
    # bodies are counted in bytes as stored: 600 decoded bytes + 400 UTF-8 bytes
    assert page(client, 4) == ([4, 5], 6)
    assert page(client, 6) == ([6], 7)
    assert page(client, 7) == ([], 7)
    assert page(client, 0, limit=1) == ([0], 1)  # the count still bounds a page


def test_paging_by_next_offset_reads_every_message_once(small_pages) -> None:
    client = small_pages
    register(client)
    sizes = [1, 999, 1000, 1001, 0, 500, 500, 2500, 3, 997]
    commit(client, [{"topic": "t", "body": "x" * n} for n in sizes])
    seen, offset = [], 0
    while True:
        r = client.get(f"/v1/topics/t/messages?from_offset={offset}&limit=3").json
        if not r["messages"]:
            break
        assert len(r["messages"]) == 1 or sum(len(m["body"]) for m in r["messages"]) <= BUDGET
        seen += [len(m["body"]) for m in r["messages"]]
        offset = r["next_offset"]
    assert seen == sizes


def test_a_page_and_its_retained_range_are_read_in_one_statement(small_pages) -> None:
    """A read is one round trip to the database, whether its page holds messages or not."""
    client = small_pages
    register(client)
    commit(client, [{"topic": "t", "body": "x"}, {"topic": "t", "body": "y"}])
    with statements_run(client.application.extensions["txmsg"].engine) as statements:
        assert page(client, 1) == ([1], 2)
        assert page(client, 2) == ([], 2)
    assert len(statements) == 2, statements
