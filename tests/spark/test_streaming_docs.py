"""docs/streaming.md: its worked example runs as written (on the tests' session) and shows
what the page says it shows."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.spark.helpers import commit, register, send

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "streaming.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_worked_example_prints_the_table_the_page_shows(
        spark, client, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    register(client)
    send(client, "tx-1", {"topic": "orders", "body": "a", "tag": "created"},
         {"topic": "orders", "body": "b", "tag": "created"}, {"topic": "orders", "body": "c"},
         {"topic": "orders", "body": "d", "tag": "paid"}, {"topic": "payments", "body": "e",
                                                          "tag": "paid"})
    commit(client, "tx-1")
    monkeypatch.setenv("TXMSG_DATABASE_URL", database_url)
    example = next(b for b in _blocks("python") if "tag_counts" in b)
    shown = _blocks("text")[0]

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(DOC), "exec"), {"__name__": "example"})  # noqa: S102

    assert printed.getvalue().rstrip("\n") == shown.rstrip("\n")
