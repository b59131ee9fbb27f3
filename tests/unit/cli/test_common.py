"""What the admin commands share: refusals as one line and an exit status, a missing
SQLite file, and the tables and fields they print."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.cli.common import (
    cell,
    dump_json,
    fields,
    load_settings,
    missing_sqlite_file,
    or_exit,
    table,
)
from app.errors import Conflict


def test_or_exit_passes_an_answer_through() -> None:
    assert or_exit(lambda a, *, b: a + b, 1, b=2) == 3


def test_or_exit_turns_a_refusal_into_one_line_and_status_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> None:
        raise Conflict("transaction t-1 is COMMITTED", code="invalid_state_transition")

    with pytest.raises(SystemExit) as exited:
        or_exit(refuse)
    assert exited.value.code == 1
    assert capsys.readouterr().err == ("txmsg: invalid_state_transition: "
                                       "transaction t-1 is COMMITTED\n")


def test_other_errors_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        or_exit(lambda: 1 / 0)


def test_a_refused_setting_is_a_line_naming_its_variable_and_status_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TXMSG_CHECK_MAX_TIMES", "zero")
    with pytest.raises(SystemExit) as exited:
        load_settings()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("txmsg: TXMSG_CHECK_MAX_TIMES: ") and err.count("\n") == 1
    assert "zero" not in err


def test_a_missing_sqlite_file_is_named_by_its_absolute_path(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.chdir(tmp_path)
    assert missing_sqlite_file("sqlite:///var/none.db") == tmp_path / "var" / "none.db"
    (tmp_path / "there.db").touch()
    assert missing_sqlite_file("sqlite:///there.db") is None
    assert missing_sqlite_file(f"sqlite:///{tmp_path}/there.db") is None


@pytest.mark.parametrize("url", [
    "sqlite://", "sqlite:///:memory:", "sqlite:///file:nowhere.db?mode=ro&uri=true",
    "postgresql+psycopg://postgres@127.0.0.1:1/nowhere",
])
def test_no_file_to_miss(url: str) -> None:
    assert missing_sqlite_file(url) is None


def test_cells() -> None:
    assert cell(None) == "-"
    assert cell([]) == "-" and cell(["a", 1]) == "a,1" and cell(("x",)) == "x"
    assert cell({}) == "-" and cell({"a": 1, "b": "c"}) == "a=1,b=c"
    assert cell(datetime(2024, 5, 1, 12, 0, 1, 999, tzinfo=UTC)) == "2024-05-01T12:00:01+00:00"
    assert cell(7) == "7" and cell(False) == "False"


def test_a_table_aligns_its_columns_under_a_header() -> None:
    rows: list[dict[str, object]] = [{"topic": "orders", "next_offset": 12, "extra": "not shown"},
            {"topic": "a", "next_offset": None}]
    assert table(rows, ["topic", "next_offset"]).splitlines() == [
        "topic   next_offset",
        "orders  12",
        "a       -",
    ]
    assert table([], ["topic"]) == "topic"


def test_fields_align_their_names() -> None:
    assert fields({"token_id": "abc", "scopes": ["admin", "metrics"]},
                  ["token_id", "scopes", "name"]).splitlines() == [
        "token_id: abc",
        "scopes:   admin,metrics",
        "name:     -",
    ]


def test_json_as_the_api_writes_it() -> None:
    assert dump_json({"at": datetime(2024, 5, 1, tzinfo=UTC), "n": None}) == \
        '{"at":"2024-05-01T00:00:00Z","n":null}'
