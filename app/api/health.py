"""Liveness, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from flask import Blueprint, Response
from sqlalchemy import exc as sa_exc

from app import metrics
from app.api.access import public
from app.api.http import json_response, problem, state
from app.api.openapi import openapi_document
from app.domain import reads, retention, subscriptions
from app.storage.db import current_revision, head_revision, refuses_writes

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@public
def healthz() -> Response:
    """The process is up."""
    return json_response({"status": "ok"})


@bp.get("/readyz")
@public
def readyz() -> Response:
    """The database answers, takes writes and its schema is at the head revision."""
    head = head_revision()
    try:
        with state().engine.connect() as conn:
            current = current_revision(conn)
            read_only = refuses_writes(conn)
    except sa_exc.SQLAlchemyError as exc:
        return problem(503, "database_unavailable", "Database unavailable",
                       f"cannot reach the database: {type(exc).__name__}")
    if read_only:
        return problem(503, "database_unavailable", "Database unavailable",
                       "the database refuses writes (read-only, or a standby)")
    if current != head:
        return problem(503, "schema_not_at_head", "Schema not at head",
                       f"schema revision is {current}, head is {head}; run `txmsg migrate`",
                       revision=current, head=head)
    return json_response({"status": "ready", "revision": current})


@bp.get("/metrics")
@public
def metrics_view() -> Response:
    """Prometheus text exposition."""
    engine = state().engine
    return Response(metrics.render(lambda: reads.prepared_backlog(engine),
                                   lambda: retention.oldest_ages(engine),
                                   lambda: subscriptions.backlogs(engine)),
                    mimetype=metrics.CONTENT_TYPE_LATEST)


@bp.get("/openapi.json")
@public
def openapi() -> Response:
    """The OpenAPI document of this API."""
    return json_response(openapi_document())
