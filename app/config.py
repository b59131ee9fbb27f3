"""Settings: one typed object read from ``TXMSG_*`` environment variables, never at import."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///var/txmsg.db"
MIN_ADMIN_TOKEN_LENGTH = 16
# link-local and cloud metadata, unspecified, multicast (the contract's default)
DEFAULT_CALLBACK_DENIED_NETWORKS = (
    "0.0.0.0/8,169.254.0.0/16,100.100.100.200/32,224.0.0.0/4,240.0.0.0/4,"
    "::/128,fe80::/10,fd00:ec2::254/128,ff00::/8")

# CIDRs, comma-separated in the environment
Networks = Annotated[list[IPvAnyNetwork], NoDecode]


class Settings(BaseSettings):
    # hide_input_in_errors: a refused setting (an admin token, a URL with a password) is
    # not echoed into the error
    model_config = SettingsConfigDict(env_prefix="TXMSG_", extra="ignore",
                                      hide_input_in_errors=True)

    database_url: str = DEFAULT_DATABASE_URL
    # a hot standby (PostgreSQL) for offset reads, message lookups, the dashboard's read
    # pages and `txmsg ingest`; it may lag the primary, never shows a gap. Unset: the primary
    read_database_url: str | None = None
    # "transaction": database_url goes through a transaction pooler (PgBouncer's
    # pool_mode=transaction), so no startup options, no server-side prepared statements
    # and no session state: the session settings go with each transaction (SET LOCAL)
    database_pooling: Literal["session", "transaction"] = "session"
    # direct to PostgreSQL (not through the pooler), for what needs a session of its own:
    # LISTEN/NOTIFY wake-ups and migrations. Unset behind a transaction pooler: receives
    # waiting in one process learn of other processes' commits by polling
    session_database_url: str | None = None
    transaction_timeout_seconds: float = Field(6, ge=0)
    check_interval_seconds: float = Field(30, ge=0)
    check_max_times: int = Field(15, ge=1)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1)
    # most body bytes in one page of a read (a page always holds at least one message)
    max_read_bytes: int = Field(16 * 1024 * 1024, ge=1)

    # access control: off while unset (then `txmsg serve` listens on loopback only, unless
    # allow_unauthenticated); SecretStr keeps it out of reprs and logs
    admin_token: SecretStr | None = None
    allow_unauthenticated: bool = False

    # retention (app.domain.retention): of committed messages (a topic may override it) and
    # of resolved transactions; how often the check service runs it; rows per batch
    retention_seconds: int = Field(259_200, ge=1)
    retention_interval_seconds: float = Field(60, gt=0)
    retention_batch_size: int = Field(2000, ge=1)
    # PostgreSQL without autovacuum: VACUUM a table once retention deleted this many of its
    # rows here, so that its space is reused (0: never)
    retention_vacuum_rows: int = Field(100_000, ge=0)

    # signed check callbacks: after a rotation the previous secret signs too, this long
    signing_secret_overlap_seconds: int = Field(86400, ge=0)
    # callback address policy (app.domain.callback_policy): never these; when the allowed
    # list is not empty, only those
    callback_denied_networks: Networks = Field(default_factory=lambda: [
        ipaddress.ip_network(n) for n in _networks(DEFAULT_CALLBACK_DENIED_NETWORKS)])
    callback_allowed_networks: Networks = Field(default_factory=list)
    # reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (when the
    # direct peer is in one of these networks; from any other peer they are ignored)
    trusted_proxies: Networks = Field(default_factory=list)

    # database connection pool (PostgreSQL); SQLite uses one pooled connection per thread
    db_pool_size: int = Field(10, ge=1)
    db_max_overflow: int = Field(10, ge=0)
    db_pool_timeout_seconds: float = Field(10, gt=0)
    db_connect_timeout_seconds: int = Field(5, ge=1)
    db_statement_timeout_ms: int = Field(30_000, ge=0)
    # a partition is noticed, not waited out: unacknowledged data gives up after this, and
    # a silent connection is probed (keepalives) after this idle time (PostgreSQL)
    db_tcp_user_timeout_ms: int = Field(10_000, ge=0)
    db_keepalives_idle_seconds: int = Field(10, ge=1)
    # the longest a send, commit or rollback waits for its group-committed batch (then 503)
    db_write_timeout_seconds: float = Field(15, gt=0)
    sqlite_busy_timeout_ms: int = Field(10_000, ge=0)

    # group commit: the most requests one database transaction carries
    batch_max_size: int = Field(512, ge=1)

    # web server: Granian's ASGI interface, the ASGI front (app/api/asgi.py) serving every
    # API route, and the dashboard by Flask behind it
    web_workers: int = Field(1, ge=1)
    # threads serving the routes that block (the front's pool, and Flask's)
    web_threads: int = Field(64, ge=1)
    # a request's whole body must arrive within this time (else 408); read on the event
    # loop, so a slow client holds no thread meanwhile
    request_body_timeout_seconds: float = Field(30, gt=0)
    # a request's head must arrive within this time, and an idle keep-alive connection
    # is closed after it (Granian's HTTP/1 header_read_timeout)
    http_header_timeout_seconds: float = Field(30, gt=0)
    # on SIGTERM, requests in flight get this long to finish before the workers are killed
    shutdown_timeout_seconds: int = Field(30, ge=1)
    # txmsg serve retries an unreachable database this long before it gives up
    startup_database_wait_seconds: float = Field(60, ge=0)

    # logs: "text" lines, or "json" (one object per line); the level is also txmsg --log-level
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # /metrics: what it reads from the database (and the per-subscription counters) is
    # computed at most this often, by one scrape at a time; the others answer with it
    metrics_cache_seconds: float = Field(5, ge=0)

    # check service
    checker_batch_size: int = Field(200, ge=1)
    checker_concurrency: int = Field(16, ge=1)
    # checks of one producer group in flight at once in one checker: a group whose
    # callbacks hang holds this many workers at most, the others go on
    checker_group_concurrency: int = Field(4, ge=1)
    # a check's database work that fails is tried again for this long; then its lease is
    # given back (due at once) instead of held until it expires
    checker_db_retry_seconds: float = Field(5, ge=0)
    # while the database is unavailable the checker says so once, then at most this often
    checker_outage_log_seconds: float = Field(60, gt=0)
    # a claim lasts the callbacks' own timeouts plus this margin (a dead checker's claims
    # are retried, with the same check number, once it runs out)
    checker_lease_seconds: float = Field(120, gt=0)
    # < 1 s so that claiming plus the first byte of a check fit in the 1 s promise
    checker_poll_seconds: float = Field(0.5, gt=0, le=1.0)

    # Spark ingestion (txmsg ingest): master (else SPARK_MASTER, else Spark's default
    # local[*]) and the JDBC drivers, from Debian packages
    spark_master: str | None = None
    postgresql_jdbc_jar: str = "/usr/share/java/postgresql.jar"
    sqlite_jdbc_jar: str = "/usr/share/java/sqlite-jdbc.jar"

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        return value.upper() if info.field_name == "log_level" else value.lower()

    @field_validator("admin_token", mode="before")
    @classmethod
    def _admin_token(cls, value: object) -> object:
        if value is None or value == "":
            return None  # set but empty (a compose default of ""): access control stays off
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and (len(text) < MIN_ADMIN_TOKEN_LENGTH
                                      or text != text.strip()):
            raise ValueError(f"TXMSG_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_LENGTH} "
                             "characters, without surrounding whitespace")
        return value

    @property
    def access_control(self) -> bool:
        return self.admin_token is not None

    @field_validator("callback_denied_networks", "callback_allowed_networks",
                     "trusted_proxies", mode="before")
    @classmethod
    def _split_networks(cls, value: object) -> object:
        return _networks(value) if isinstance(value, str) else value


# settings that no longer exist, each with what to do instead: ``txmsg serve`` warns of
# one that is still set, and goes on without it (the API's answers were the same either way)
RETIRED = {
    "TXMSG_WEB_INTERFACE": "the ASGI front is the only one (a WSGI server no longer serves "
                           "the API); unset it",
    "TXMSG_WEB_HOT_ROUTES": "the ASGI front serves every API route; unset it",
}


def retired_settings(environ: Mapping[str, str]) -> list[str]:
    """A warning for each retired setting set in ``environ``."""
    return [f"{name} is ignored: {advice}" for name, advice in RETIRED.items()
            if name in environ]


def _networks(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
