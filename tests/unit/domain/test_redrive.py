"""The offsets a redrive takes: ``a..b``, ``a..``, ``..b`` or one offset."""

from __future__ import annotations

import pytest

from app.domain.redrive import parse_offsets
from app.errors import InvalidRequest


@pytest.mark.parametrize(("text", "expected"), [
    (None, (None, None)),
    ("", (None, None)),
    ("3..9", (3, 9)),
    ("3..3", (3, 3)),
    ("3..", (3, None)),
    ("..9", (None, 9)),
    ("..", (None, None)),
    ("7", (7, 7)),
    (" 7 ", (7, 7)),
    ("0..0", (0, 0)),
])
def test_ranges(text: str | None, expected: tuple[int | None, int | None]) -> None:
    assert parse_offsets(text) == expected


@pytest.mark.parametrize("text", [
    "a..b", "1...3", "1..2..3", "x", "1-3", "1,2", "..x",  # not a range
    "-1", "-1..4",  # below the first offset there is
    "9..3",  # backwards
])
def test_what_is_no_range_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_offsets(text)
    assert caught.value.code == "invalid_offsets"
    assert repr(text) in caught.value.detail
