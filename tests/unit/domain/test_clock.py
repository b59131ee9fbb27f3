"""The domain's one clock (``app.domain.clock``): every decision that reads the time
reads it there, when it decides, so that a test moving it moves all of them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.domain import clock
from app.domain.messages import MessageIn

ROOT = Path(__file__).resolve().parents[3]
CLOCK = ROOT / "app" / "domain" / "clock.py"
# a second clock, or the one clock bound at import (a test moving it would not move it)
_ANOTHER = re.compile(r"datetime\.(?:now|utcnow)\(|\bdef utcnow\b|import\s.*\butcnow\b")


def test_there_is_one_clock() -> None:
    found = {str(path.relative_to(ROOT)): hits
             for folder in ("app/domain", "app/storage", "checker")
             for path in sorted((ROOT / folder).rglob("*.py")) if path != CLOCK
             if (hits := [line.strip() for line in path.read_text().splitlines()
                          if _ANOTHER.search(line)])}
    assert found == {}


def test_moving_the_clock_moves_the_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    later = datetime.now(UTC) + timedelta(days=30)
    message = {"topic": "t", "body": "x", "deliver_at": (later + timedelta(days=5)).isoformat()}
    with pytest.raises(ValueError, match="out_of_range|at most"):
        MessageIn.model_validate(message)
    monkeypatch.setattr(clock, "utcnow", lambda: later)
    assert MessageIn.model_validate(message).deliver_at is not None
