"""Liveness, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

from flask import Blueprint, Response

from app import metrics
from app.api.access import public
from app.api.http import json_response, problem, state
from app.api.openapi import openapi_document
from app.domain import health, reads, retention, subscriptions

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
    ready = health.readiness(state().engine)
    if ready.code == "database_unavailable":
        return problem(503, ready.code, "Database unavailable", ready.detail)
    if ready.code is not None:
        return problem(503, ready.code, "Schema not at head", ready.detail,
                       revision=ready.revision, head=ready.head)
    return json_response({"status": "ready", "revision": ready.revision})


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
