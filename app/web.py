"""The application factories: the Flask app, and the ASGI front that serves it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from flask import Flask
from sqlalchemy import Engine

from app import heap, metrics, tracing, ui
from app.api import access, bodies, flask_routes, health, telemetry
from app.api.asgi import Api
from app.config import Settings
from app.domain.lifecycle import Lifecycle
from app.domain.subscriptions import Subscriptions
from app.domain.tokens import TokenGuard
from app.domain.wakeups import NOTIFIED, TopicSignal
from app.lifetime import die_with_parent
from app.storage import notices
from app.storage.db import make_engine, make_read_engine
from app.storage.replica import Reads


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    lifecycle: Lifecycle
    guard: TokenGuard
    subscriptions: Subscriptions
    # other processes' commits, for the receives waiting here (PostgreSQL only)
    listener: notices.Listener | None = None
    # reads that may lag: offset reads, message lookups, the dashboard's read pages
    # (TXMSG_READ_DATABASE_URL's standby; else ``engine``)
    read_engine: Engine | None = None
    exposition: metrics.Exposition = field(init=False)  # /metrics, with its computations
    reads: Reads = field(init=False)  # where reads that may lag go now

    def __post_init__(self) -> None:
        self.exposition = metrics.Exposition(partial(health.database_state, self.engine),
                                             self.settings.metrics_cache_seconds)
        self.reads = Reads(self.read_engine, self.engine)

    @property
    def reader(self) -> Engine:
        """The engine of reads that may lag now (the primary while the replica is down)."""
        return self.reads.engine

    @property
    def signal(self) -> TopicSignal:
        return self.lifecycle.signal

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        self.lifecycle.close()
        self.engine.dispose()
        if self.read_engine is not None and self.read_engine is not self.engine:
            self.read_engine.dispose()


def create_app(settings: Settings | None = None, *, engine: Engine | None = None,
               cross_process: bool = False) -> Flask:
    """Build the API and the dashboard (/ui/): settings from the environment unless given,
    one engine, two writers.

    ``cross_process`` (as served): on PostgreSQL, receives waiting here are woken by other
    processes' commits as by this one's, and this one's wake theirs (a listener and a
    publisher, each a thread with a connection of its own; ``app.storage.notices``).
    """
    settings = settings or Settings()
    engine = engine or make_engine(settings)
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = bodies.send_limit(settings)  # the routes': bodies.py
    guard = TokenGuard(engine, settings.admin_token)
    lifecycle = Lifecycle(engine, settings, publish=cross_process)
    listener = None
    if lifecycle.publisher is not None:  # what it sent itself has woken its receives
        listener = notices.listener(engine, settings,
                                    partial(lifecycle.signal.notify, source=NOTIFIED),
                                    own=lifecycle.publisher)
    app.extensions["txmsg"] = AppState(
        settings, engine, lifecycle, guard,
        Subscriptions(engine, settings.max_read_bytes, lifecycle.signal), listener,
        make_read_engine(settings, engine))
    bodies.install(app)
    access.install(app)
    telemetry.install(app, settings.trusted_proxies)
    flask_routes.install(app)
    ui.install(app, settings)
    return app


def app_from_env() -> Flask:
    """WSGI entry point, for a WSGI server (settings from TXMSG_* variables)."""
    die_with_parent()
    tracing.install()
    app = create_app(cross_process=True)
    heap.settle()
    return app


def asgi_from_env() -> Api:
    """ASGI entry point, as ``txmsg serve`` runs it (settings from TXMSG_* variables)."""
    die_with_parent()
    tracing.install()
    api = Api(create_app(cross_process=True))
    heap.settle()
    return api
