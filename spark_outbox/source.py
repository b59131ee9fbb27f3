"""Where the committed messages come from: the database URL as JDBC, and the SQL per store.

Only the committed views are read: ``committed_messages`` (one row per committed message,
nothing rolled back, pending or discarded but for TRANS_CHECK_MAX_TIME_TOPIC entries),
through Spark's JDBC source, and ``topic_watermarks`` (each topic's next and first
offsets), by the driver itself through SQLAlchemy: one short query, no Spark job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from app.config import Settings
from app.domain.lake import UnknownDatabase, dialect_for_url, read_settings
from spark_outbox.errors import EXIT_CANNOT_RUN, IngestError
from spark_outbox.plan import TopicRange

POSTGRESQL = "postgresql"
SQLITE = "sqlite"

DRIVERS = {POSTGRESQL: "org.postgresql.Driver", SQLITE: "org.sqlite.JDBC"}
DEBIAN_PACKAGES = {POSTGRESQL: "libpostgresql-jdbc-java", SQLITE: "libxerial-sqlite-jdbc-java"}

# rows fetched per round trip (PostgreSQL streams through a cursor when this is > 0)
FETCH_SIZE = 10_000

# SQLite gives no column types for the view's computed columns (CASE, COALESCE), so the
# JDBC schema is stated; timestamps come as text and become timestamps in ``extract``.
SQLITE_SCHEMA = (
    "topic STRING, queue_offset BIGINT, message_id STRING, transaction_id STRING, "
    "producer_group STRING, keys STRING, tag STRING, ordering_key STRING, properties STRING, "
    "body STRING, "
    "body_bytes BINARY, created_at STRING, committed_at STRING"
)
POSTGRESQL_SCHEMA = SQLITE_SCHEMA.replace("created_at STRING, committed_at STRING",
                                          "created_at TIMESTAMP, committed_at TIMESTAMP")

# SQLite stores UTC datetimes as naive text; the "Z" makes them instants whatever the
# Spark session's time zone is.
_SQLITE_TIMESTAMPS = "created_at || 'Z' AS created_at, committed_at || 'Z' AS committed_at"
_POSTGRESQL_TIMESTAMPS = "created_at, committed_at"
_COLUMNS = ("topic, queue_offset, message_id, transaction_id, producer_group, keys, tag, "
            "ordering_key, properties, body, body_bytes, {timestamps}")


@dataclass(frozen=True)
class JdbcSource:
    """One database as Spark's JDBC source reads it; what differs per database is set
    here, once, by ``jdbc_source``."""

    kind: str
    url: str
    jar: Path
    display: str  # the database URL without its password, for messages
    properties: dict[str, str] = field(default_factory=dict)
    sqlite_file: Path | None = None
    # the JDBC schema of the committed messages (``custom_schema``); the timestamps as
    # selected (``committed_table``); whether they come as text, made timestamps in
    # ``extract``
    custom_schema: str = field(default=POSTGRESQL_SCHEMA, kw_only=True)
    timestamps: str = field(default=_POSTGRESQL_TIMESTAMPS, kw_only=True)
    timestamps_as_text: bool = field(default=False, kw_only=True)
    # the same database as the driver itself reads it (the watermarks: no Spark job)
    settings: Settings = field(kw_only=True, repr=False, compare=False)

    @property
    def driver(self) -> str:
        return DRIVERS[self.kind]

    def options(self) -> dict[str, str]:
        """Options of Spark's JDBC source common to every read of this database."""
        return {"url": self.url, "driver": self.driver, "fetchsize": str(FETCH_SIZE),
                **self.properties}

    @property
    def committed_table(self) -> str:
        """A ``dbtable`` subquery: the committed messages, in the columns ``extract`` reads."""
        return (f"(SELECT {_COLUMNS.format(timestamps=self.timestamps)} "
                "FROM committed_messages) committed")


def range_predicate(ranges: Sequence[TopicRange]) -> str:
    """A WHERE condition for exactly the offsets of ``ranges`` (one JDBC read's share)."""
    return " OR ".join(
        f"(topic = {_literal(r.topic)} AND queue_offset >= {int(r.start)} "
        f"AND queue_offset < {int(r.end)})" for r in ranges)


def jdbc_source(settings: Settings) -> JdbcSource:
    """The JDBC form of ``TXMSG_READ_DATABASE_URL`` (a hot standby), else of
    ``TXMSG_DATABASE_URL`` (SQLAlchemy syntax), and its driver jar. The watermarks are read
    there too, so a run plans from what the standby shows and stays exact."""
    settings = read_settings(settings)
    try:
        url = make_url(settings.database_url)
    except Exception as exc:
        raise IngestError(f"TXMSG_DATABASE_URL is not a database URL: {exc}",
                          EXIT_CANNOT_RUN) from exc
    display = url.render_as_string(hide_password=True)
    try:
        dialect = dialect_for_url(url)
    except UnknownDatabase as exc:
        raise IngestError(f"txmsg ingest reads PostgreSQL or SQLite, not {exc.backend!r} "
                          f"({display})", EXIT_CANNOT_RUN) from exc
    if dialect.in_process:  # SQLite: the driver reads the file
        if not url.database or url.database == ":memory:":
            raise IngestError("an in-memory SQLite database cannot be ingested: "
                              "set TXMSG_DATABASE_URL to a file", EXIT_CANNOT_RUN)
        path = Path(url.database).resolve()
        return JdbcSource(SQLITE, f"jdbc:sqlite:{path}", Path(settings.sqlite_jdbc_jar),
                          display, sqlite_file=path, settings=settings,
                          custom_schema=SQLITE_SCHEMA, timestamps=_SQLITE_TIMESTAMPS,
                          timestamps_as_text=True)
    props = {k: str(v) for k, v in url.query.items()}
    props["connectTimeout"] = str(settings.db_connect_timeout_seconds)
    props.setdefault("ApplicationName", "txmsg-ingest")
    if url.username:
        props["user"] = url.username
    if url.password:
        props["password"] = str(url.password)
    return JdbcSource(POSTGRESQL,
                      f"jdbc:postgresql://{_jdbc_hosts(url, props)}/{url.database or ''}",
                      Path(settings.postgresql_jdbc_jar), display, properties=props,
                      settings=settings)


def _jdbc_hosts(url: URL, props: dict[str, str]) -> str:
    """``host:port`` (pgjdbc's list of them for libpq's multi-host form, ``?host=h1:p1&
    host=h2:p2``, with ``target_session_attrs`` as pgjdbc's ``targetServerType``)."""
    props.pop("host", None)
    attrs = props.pop("target_session_attrs", None)
    if attrs is not None:
        props["targetServerType"] = _TARGET_SERVER_TYPES.get(attrs, "any")
    listed = url.query.get("host")
    if listed:
        return ",".join([listed] if isinstance(listed, str) else list(listed))
    host = url.host or "localhost"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{host}:{url.port or 5432}"


# libpq's target_session_attrs → pgjdbc's targetServerType
_TARGET_SERVER_TYPES = {"read-write": "primary", "primary": "primary", "any": "any",
                        "read-only": "secondary", "standby": "secondary",
                        "prefer-standby": "preferSecondary"}


def checked_source(settings: Settings) -> JdbcSource:
    """The run's database, failing early and clearly when its driver jar or file is missing."""
    source = jdbc_source(settings)
    check_reachable(source)
    return source


def check_reachable(source: JdbcSource) -> None:
    """Fail early and clearly when the driver jar or the SQLite file is missing."""
    if not source.jar.is_file():
        raise IngestError(
            f"{source.kind} JDBC driver not found at {source.jar} (install the Debian "
            f"package {DEBIAN_PACKAGES[source.kind]}: scripts/ensure-system-deps.sh)",
            EXIT_CANNOT_RUN)
    # the SQLite driver would silently create an empty database file
    if source.sqlite_file is not None and not source.sqlite_file.is_file():
        raise IngestError(f"database file {source.sqlite_file} does not exist "
                          "(check TXMSG_DATABASE_URL; `txmsg migrate` creates it)",
                          EXIT_CANNOT_RUN)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
