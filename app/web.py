"""The application factories: the Flask app (the dashboard, and the app's state), and the
ASGI front that serves it and every API route."""

from __future__ import annotations

from functools import partial

from flask import Flask
from sqlalchemy import Engine
from werkzeug.exceptions import HTTPException

from app import heap, tracing, ui
from app.api import bodies, http, telemetry
from app.api.asgi import Api
from app.config import Settings
from app.domain.lifecycle import Lifecycle
from app.domain.subscriptions import Subscriptions
from app.domain.tokens import TokenGuard
from app.domain.wakeups import NOTIFIED
from app.lifetime import die_with_parent
from app.state import AppState
from app.storage import notices
from app.storage.db import make_engine, make_read_engine


def create_app(settings: Settings | None = None, *, engine: Engine | None = None,
               cross_process: bool = False) -> Flask:
    """Build the app's state (settings from the environment unless given, one engine, two
    writers) and the dashboard (/ui/); the API is served by the ASGI front over it
    (``Api(create_app(settings))``, ``app.api.asgi``).

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
    app.register_error_handler(HTTPException, http.flask_problem)  # Flask's 405s, redirects aside
    telemetry.install(app, settings.trusted_proxies)
    ui.install(app, settings)
    return app


def asgi_from_env() -> Api:
    """ASGI entry point, as ``txmsg serve`` runs it (settings from TXMSG_* variables)."""
    die_with_parent()
    tracing.install()
    api = Api(create_app(cross_process=True))
    heap.settle()
    return api
