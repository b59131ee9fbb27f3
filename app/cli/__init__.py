"""The ``txmsg`` command: the composition root (API + embedded checker, ingestion), and
the admin command groups on the database, one module each (``app.cli.tokens``, ...).

Imports happen inside the commands: ``serve`` must set PROMETHEUS_MULTIPROC_DIR before
any metric is created, so that the web workers and the checker share their counters.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import socket
import sys
import tempfile
from typing import TYPE_CHECKING

import click

from app.cli import dead_letters as dead_letters_cli
from app.cli import subscriptions as subscriptions_cli
from app.cli import tokens as tokens_cli
from app.cli import topics as topics_cli
from app.cli import transactions as transactions_cli
from app.cli.common import load_settings as _settings

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("txmsg")


@click.group()
@click.option("--log-level", default=None,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                                case_sensitive=False),
              help="Log level (default: TXMSG_LOG_LEVEL, else INFO).")
def main(log_level: str | None) -> None:
    """txmsg: transactional (half) messages on SQL storage."""
    from app import logs

    settings = _settings()
    logs.configure(settings, (log_level or settings.log_level).upper())


@main.command()
@click.option("--grant-to", "grant_to", metavar="ROLE", default=None,
              help="PostgreSQL: grant ROLE what serve, checker and ingest need (rows of "
                   "txmsg's tables and views, its sequences), nothing that creates, alters "
                   "or drops.")
def migrate(grant_to: str | None) -> None:
    """Bring the database schema to head (safe to repeat)."""
    from sqlalchemy.engine import make_url

    from app.storage.db import upgrade_to_head
    from app.storage.dialects import dialect_for_url

    settings = _settings()
    if grant_to is not None and not dialect_for_url(make_url(settings.database_url)).roles:
        click.echo("txmsg migrate: --grant-to needs PostgreSQL (SQLite has no roles: "
                   "its file's permissions are its access control); nothing done", err=True)
        sys.exit(2)
    upgrade_to_head(settings)
    click.echo(f"schema at head on {_redacted(settings.database_url)}")
    if grant_to is not None:
        _grant(settings, grant_to)


def _grant(settings, role: str) -> None:  # type: ignore[no-untyped-def]
    """Grant ``role`` the service's privileges, one transaction; logged."""
    from app.cli.common import or_exit
    from app.storage import grants
    from app.storage.db import make_engine, write_transaction

    url = settings.session_database_url if settings.database_pooling == "transaction" \
        and settings.session_database_url else settings.database_url
    engine = make_engine(settings.model_copy(update={"database_url": url}), pool=False)
    try:
        def grant() -> list[str]:
            with write_transaction(engine) as conn:
                return grants.grant_to(conn, role)

        or_exit(grant)
    finally:
        engine.dispose()
    log.info("txmsg migrate: granted %s the service's privileges", role)
    click.echo(f"granted {role} what serve, checker and ingest need")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
@click.option("--no-checker", is_flag=True, help="Do not run the check service in this process.")
@click.option("--no-migrate", is_flag=True, help="Do not migrate the schema first.")
@click.option("--workers", type=int, default=None, help="Web worker processes (TXMSG_WEB_WORKERS).")
def serve(host: str, port: int, no_checker: bool, no_migrate: bool, workers: int | None) -> None:
    """Serve the API on Granian, with the check service alongside unless --no-checker."""
    settings = _settings()
    if not (settings.access_control or settings.allow_unauthenticated or _is_loopback(host)):
        click.echo(f"txmsg serve: refusing to listen on {host} without access control: set "
                   "TXMSG_ADMIN_TOKEN (or TXMSG_ALLOW_UNAUTHENTICATED=true to serve it open)",
                   err=True)
        sys.exit(2)
    from app.cli import port as port_claim

    try:
        claimed = port_claim.claim(host, port)  # held while serving: see app.cli.port
    except port_claim.PortBusy as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    metrics_dir = tempfile.mkdtemp(prefix="txmsg-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    from app.lifetime import PARENT_PID_ENV

    os.environ[PARENT_PID_ENV] = str(os.getpid())  # the web workers die with this process
    import multiprocessing

    multiprocessing.set_start_method("spawn", force=True)
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    from app import logs, tracing
    from app.config import retired_settings

    if not no_migrate:
        _migrate_once_reachable(settings)
    service = None
    if not no_checker:
        from checker.service import CheckService

        tracing.install()  # the checker's spans (the web workers install their own)
        service = CheckService(settings)
        service.start()
    for warning in retired_settings(os.environ):
        log.warning("txmsg serve: %s", warning)
    log.info("txmsg serving http://%s:%d on %s%s%s", host, port,
             _redacted(settings.database_url),
             "" if no_checker else " with the check service",
             ", access control on" if settings.access_control else ", access control off")
    try:
        Granian(
            "app.web:asgi_from_env", factory=True,
            address=host, port=port, interface=Interfaces.ASGI,
            workers=workers or settings.web_workers,
            # HTTP/1 alone: with HTTP/2 too, hyper-util reads the first bytes to tell
            # them apart with no timer, and a connection that sends none stays open
            # (hyperium/hyper#3756); HTTP/1's header_read_timeout starts at the accept
            http=HTTPModes.http1, backlog=_BACKLOG, log_access=False,
            backpressure=_connections_per_worker(settings, workers or settings.web_workers),
            # the workers log as this process does (format, level, redaction)
            log_dictconfig=logs.dict_config(settings, logging.getLogger().level),
            # closes connections idle (or slow to send a request head, or silent) for this long
            http1_settings=HTTP1Settings(
                header_read_timeout=round(settings.http_header_timeout_seconds * 1000)),
            # on SIGTERM a worker stops accepting and finishes the requests it holds;
            # past this bound it is killed
            workers_kill_timeout=settings.shutdown_timeout_seconds,
        ).serve()
    finally:
        if service is not None:
            service.shutdown()
            tracing.shutdown()
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if claimed is not None:
            claimed.close()


_BACKLOG = 2048
# a web worker's own descriptors besides its connections: its modules' files, logs,
# SQLite's files, pipes (about 32 at start), with room to spare
_WORKER_DESCRIPTORS = 64


def _connections_per_worker(settings: Settings, workers: int) -> int:
    """The connections a web worker holds at most (Granian's ``backpressure``): its share
    of the backlog, and fewer when the file-descriptor limit would not leave it room for
    its own descriptors and its database connections. A connection
    past it waits in the kernel's backlog until one closes (idle or silent ones within
    the header timeout), where it costs the worker nothing: at its limit a worker could
    open no database connection, and Granian retried its accept every 0.5 s, logging
    "Too many open files". The soft limit is raised to the hard one first (the workers
    inherit it)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a hard limit over the kernel's nr_open
            pass
    own = _WORKER_DESCRIPTORS + settings.db_pool_size + settings.db_max_overflow
    share = _BACKLOG // workers
    if soft == resource.RLIM_INFINITY:
        return share
    return max(1, min(share, soft - own))


def _migrate_once_reachable(settings) -> None:  # type: ignore[no-untyped-def]
    """Migrate, retrying with backoff while the database cannot be reached, one line per
    attempt, for at most ``startup_database_wait_seconds``; then give up in one line.

    Retrying (rather than failing at once) lets serve start alongside a database that
    comes up a little later, as in a compose file or a pod; the bound still ends a start
    that cannot succeed, plainly, for the supervisor to restart or an operator to read.
    """
    import time

    from sqlalchemy.exc import OperationalError

    from app.storage.db import upgrade_to_head

    url = _redacted(settings.database_url)
    deadline = time.monotonic() + settings.startup_database_wait_seconds
    delay, attempt = 0.5, 1
    while True:
        try:
            upgrade_to_head(settings)
            return
        except OperationalError as exc:
            reason = str(exc.orig or exc).strip().splitlines()[0][:200]
            left = deadline - time.monotonic()
            if left <= 0:
                raise click.ClickException(f"database {url} unreachable after {attempt} "
                                           f"attempt(s), giving up: {reason}") from None
            pause = min(delay, left)
            log.warning("txmsg serve: database %s unreachable (attempt %d: %s); retrying "
                        "in %.1f s", url, attempt, reason, pause)
            time.sleep(pause)
            delay, attempt = min(delay * 2, 5.0), attempt + 1


@main.command()
def checker() -> None:
    """Run the check service alone (no API)."""
    from app import tracing
    from checker.service import CheckService

    tracing.install()
    try:
        CheckService(_settings()).run_forever()
    finally:
        tracing.shutdown()


@main.command()
@click.option("--output", required=True, type=click.Path(file_okay=False),
              help="Directory of the Parquet dataset (and its checkpoint files).")
@click.option("--topics", default=None, help="Comma-separated topics (default: all but reserved).")
@click.option("--follow", is_flag=True,
              help="Keep the dataset current: a run every --interval seconds until SIGTERM.")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds from the start of one run to the next, with --follow.")
def ingest(output: str, topics: str | None, follow: bool, interval: float) -> None:
    """One incremental Spark run from the committed views into Parquet under OUTPUT
    (with --follow: one run after another, in one Spark session, until stopped)."""
    import importlib

    try:
        importlib.import_module("pyspark")
    except ImportError:
        click.echo("txmsg ingest: PySpark is not installed; it comes with the spark extra: "
                   "pip install 'txmsg[spark]' (and a Java runtime)", err=True)
        sys.exit(2)
    from spark_outbox.job import main as ingest_main

    sys.exit(ingest_main(_settings(), output, topics,
                         follow_seconds=interval if follow else None))


# The admin commands, on the database through the domain functions the API uses: one
# module per group under app/cli/ (with app.cli.common), each exporting its click ``group``.
ADMIN_GROUPS = (tokens_cli.group, transactions_cli.group, topics_cli.group,
                subscriptions_cli.group, dead_letters_cli.group)
for _group in ADMIN_GROUPS:
    main.add_command(_group)


def _is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (a name is resolved)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback
                               for info in infos)


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
