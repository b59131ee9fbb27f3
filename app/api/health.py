"""Liveness, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from app import metrics
from app.api.call import Answer, Call, Raw
from app.domain import health, reads, retention, subscriptions
from app.errors import ApiError
from app.problems import ProblemCode


class NotReady(ApiError):
    status, code, title = 503, ProblemCode.DATABASE_UNAVAILABLE, "Database unavailable"


async def healthz(call: Call) -> Answer:
    """The process is up (answered on the event loop: it needs no thread)."""
    return 200, {"status": "ok"}


def readyz(call: Call) -> Answer:
    """The database answers, takes writes and its schema is at the head revision."""
    ready = health.readiness(call.state.engine)
    if ready.code is ProblemCode.DATABASE_UNAVAILABLE:
        raise NotReady(ready.detail)
    if ready.code is not None:
        refusal = NotReady(ready.detail, code=ready.code, revision=ready.revision,
                           head=ready.head)
        refusal.title = "Schema not at head"
        raise refusal
    body: dict[str, Any] = {"status": "ready", "revision": ready.revision}
    replica = call.state.reads.replica_reachable()
    if replica is not None:  # reads go to the primary meanwhile: still ready
        body["read_replica"] = "reachable" if replica else "unreachable"
    return 200, body


def metrics_view(call: Call) -> Answer:
    """Prometheus text exposition."""
    return 200, Raw(call.state.exposition.render(), metrics.CONTENT_TYPE_LATEST)


def database_state(engine: Engine) -> metrics.DatabaseState:
    """What /metrics reads from the database: four queries, whatever is stored."""
    prepared = reads.prepared_backlog(engine)
    return metrics.DatabaseState(prepared.half_messages, prepared.oldest_age_seconds,
                                 retention.oldest_ages(engine), subscriptions.backlogs(engine),
                                 subscriptions.alive_consumers(engine))


def openapi(call: Call) -> Answer:
    """The OpenAPI document of this API."""
    from app.api.openapi import openapi_document  # the document is built from the routes

    return 200, openapi_document()
