"""Producer group registrations and their signing secrets, on an in-memory SQLite holding
only their two tables, under a clock the tests move."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import StaticPool

from app.config import Settings
from app.domain import clock, groups
from app.domain.messages import ProducerGroupIn
from app.errors import InvalidRequest, NotFound
from app.storage.schema import metadata, producer_group, signing_secret

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
URL = "http://127.0.0.1:9/check"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> Clock:
    ticks = Clock()
    monkeypatch.setattr(clock, "utcnow", ticks)
    return ticks


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    metadata.create_all(engine, tables=[producer_group, signing_secret])
    yield engine
    engine.dispose()


def request(**fields: Any) -> ProducerGroupIn:
    return ProducerGroupIn.model_validate(fields)


def test_a_group_is_registered_with_its_check_urls(engine: Engine, now: Clock) -> None:
    made = groups.register(engine, "shop", request(check_urls=[URL]))
    assert made["producer_group"] == "shop" and made["check_urls"] == [URL]
    assert made["check_timeout_ms"] == 3000
    assert made["signing_secret"].startswith("whsec_")
    assert made["created_at"] == made["updated_at"] == T0
    assert made["previous_secret_expires_at"] is None
    assert groups.get(engine, "shop") == made


def test_registering_needs_the_check_urls(engine: Engine, now: Clock) -> None:
    with pytest.raises(InvalidRequest) as caught:
        groups.register(engine, "shop", request(check_timeout_ms=500))
    assert caught.value.code == "missing_field"
    with pytest.raises(NotFound):
        groups.get(engine, "shop")


def test_a_change_keeps_what_it_does_not_name_and_the_secret(engine: Engine,
                                                             now: Clock) -> None:
    made = groups.register(engine, "shop", request(check_urls=[URL], check_timeout_ms=500))
    now.now += timedelta(minutes=1)
    changed = groups.register(engine, "shop", request(check_timeout_ms=900))
    assert (changed["check_urls"], changed["check_timeout_ms"]) == ([URL], 900)
    other = "http://127.0.0.1:9/other"
    changed = groups.register(engine, "shop", request(check_urls=[other]))
    assert (changed["check_urls"], changed["check_timeout_ms"]) == ([other], 900)
    assert changed["signing_secret"] == made["signing_secret"]
    assert (changed["created_at"], changed["updated_at"]) == (T0, T0 + timedelta(minutes=1))


def test_the_secret_outlives_the_registration(engine: Engine, now: Clock) -> None:
    made = groups.register(engine, "shop", request(check_urls=[URL]))
    groups.delete(engine, "shop")
    with pytest.raises(NotFound) as caught:
        groups.get(engine, "shop")
    assert caught.value.code == "producer_group_not_found"
    again = groups.register(engine, "shop", request(check_urls=[URL]))
    assert again["signing_secret"] == made["signing_secret"]


def test_deleting_an_unknown_group_is_not_found(engine: Engine, now: Clock) -> None:
    with pytest.raises(NotFound) as caught:
        groups.delete(engine, "shop")
    assert caught.value.code == "producer_group_not_found"


def test_a_rotation_replaces_the_secret_and_shows_the_overlap_while_it_lasts(
        engine: Engine, now: Clock) -> None:
    settings = Settings(signing_secret_overlap_seconds=60)
    made = groups.register(engine, "shop", request(check_urls=[URL]))
    rotated = groups.rotate_secret(engine, settings, "shop")
    assert rotated["signing_secret"] != made["signing_secret"]
    assert rotated["previous_secret_expires_at"] == T0 + timedelta(seconds=60)
    now.now += timedelta(seconds=60)
    assert groups.get(engine, "shop")["previous_secret_expires_at"] is None


def test_an_unregistered_group_has_no_secret_to_rotate(engine: Engine, now: Clock) -> None:
    with pytest.raises(NotFound) as caught:
        groups.rotate_secret(engine, Settings(), "shop")
    assert caught.value.code == "producer_group_not_found"
