"""TXMSG_READ_DATABASE_URL: the reads that may lag go to a hot standby, `txmsg ingest`
too (its JDBC URL, in libpq's multi-host form as well, and its watermarks)."""

from __future__ import annotations

from pathlib import Path

from app.config import Settings
from app.storage.db import make_engine, make_read_engine
from spark_outbox.source import jdbc_source

PRIMARY = "postgresql+psycopg://postgres@/txmsg?host=h1:5432&host=h2:5433" \
          "&target_session_attrs=read-write"
STANDBY = "postgresql+psycopg://reader:s3cret@h2:5433/txmsg"


def test_without_a_read_url_reads_use_the_primary(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}")
    primary = make_engine(settings)
    try:
        assert make_read_engine(settings, primary) is primary
    finally:
        primary.dispose()


def test_the_read_url_has_an_engine_of_its_own() -> None:
    settings = Settings(database_url=PRIMARY, read_database_url=STANDBY)
    primary = make_engine(settings)
    reader = make_read_engine(settings, primary)
    try:
        assert reader is not primary
        assert reader.url.render_as_string(hide_password=False) == STANDBY
    finally:
        primary.dispose()
        reader.dispose()


def test_ingest_reads_the_standby_when_there_is_one() -> None:
    source = jdbc_source(Settings(database_url=PRIMARY, read_database_url=STANDBY))
    assert source.url == "jdbc:postgresql://h2:5433/txmsg"
    assert source.properties["user"] == "reader"
    # the watermarks (read by the driver) come from the same standby
    assert source.settings.database_url == STANDBY


def test_ingest_takes_libpq_multi_host_urls_as_pgjdbc_host_lists() -> None:
    source = jdbc_source(Settings(database_url=PRIMARY))
    assert source.url == "jdbc:postgresql://h1:5432,h2:5433/txmsg"
    assert source.properties["targetServerType"] == "primary"
    assert "host" not in source.properties
    assert "target_session_attrs" not in source.properties
