"""The application's state: what the app factory (``app.web``) builds once per process and
every request is served with (a handler's ``Call.state``, the dashboard's ``state()``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import Engine

from app import metrics
from app.api import health
from app.config import Settings
from app.domain.lifecycle import Lifecycle
from app.domain.subscriptions import Subscriptions
from app.domain.tokens import TokenGuard
from app.domain.wakeups import TopicSignal
from app.storage import notices
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
