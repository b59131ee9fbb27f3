"""The payloads of commit notifications (``app.storage.notices``): under PostgreSQL's
8000-byte limit however many topics, each naming its sender; and none on SQLite."""

from __future__ import annotations

from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from app.config import Settings
from app.storage import notices
from app.storage.db import make_engine


def test_payloads_split_under_the_limit_and_carry_every_topic_once() -> None:
    topics = {f"{i:03d}-" + "x" * 123 for i in range(300)}  # 127 characters each
    payloads = notices.payloads("me", topics)
    assert len(payloads) > 1
    assert all(len(p.encode()) <= notices.MAX_PAYLOAD_BYTES for p in payloads)
    parsed = [notices.parse(p) for p in payloads]
    assert {origin for origin, _ in parsed} == {"me"}
    carried = [t for _, chunk in parsed for t in chunk]
    assert sorted(carried) == sorted(topics)


def test_one_payload_for_a_few_topics() -> None:
    assert [notices.parse(p) for p in notices.payloads("me", ["b", "a"])] == [
        ("me", ["a", "b"])]
    assert notices.payloads("me", []) == []


def test_a_payload_not_written_here_names_no_topic() -> None:
    for payload in ("", "hello", "[]", '{"origin": 1, "topics": ["t"]}', '{"topics": ["t"]}'):
        assert notices.parse(payload) == ("", [])


def test_sqlite_has_neither_end(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}")
    engine = make_engine(settings)
    try:
        assert notices.libpq_conninfo(engine) is None
        assert notices.publisher(engine, settings) is None
        assert notices.listener(engine, settings, lambda topics: None,
                                own=notices.Publisher("", settings)) is None
    finally:
        engine.dispose()


def test_the_libpq_conninfo_keeps_the_password_and_drops_the_driver() -> None:
    settings = Settings(database_url="postgresql+psycopg://u:s%40cret@db:5433/txmsg")
    engine = make_engine(settings)
    try:
        conninfo = notices.libpq_conninfo(engine)
        assert conninfo is not None
        assert conninfo_to_dict(conninfo) == {
            "host": "db", "port": "5433", "user": "u", "password": "s@cret", "dbname": "txmsg"}
    finally:
        engine.dispose()


def test_the_libpq_conninfo_keeps_every_host_of_a_multi_host_url() -> None:
    """libpq's multi-host form, as with Patroni: the listener and the publisher follow the
    primary as the engine does."""
    settings = Settings(database_url="postgresql+psycopg://postgres@/txmsg?host=h1:5432"
                                     "&host=h2:5433&target_session_attrs=read-write")
    engine = make_engine(settings)
    try:
        conninfo = notices.libpq_conninfo(engine)
        assert conninfo is not None
        assert conninfo_to_dict(conninfo) == {
            "host": "h1,h2", "port": "5432,5433", "user": "postgres", "dbname": "txmsg",
            "target_session_attrs": "read-write"}
    finally:
        engine.dispose()
