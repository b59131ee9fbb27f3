"""Every blueprint of the API in one place: the app factory registers them, the OpenAPI
document reads what each route declares about access."""

from __future__ import annotations

import re

from flask import Flask

from app.api import groups, health, subscriptions, tokens, topics, transactions
from app.api.access import Access, access_of

BLUEPRINTS = (groups.bp, transactions.bp, topics.bp, subscriptions.bp, tokens.bp, health.bp)


def openapi_path(rule: str) -> str:
    """A Flask rule as an OpenAPI path: ``/v1/topics/<topic>`` → ``/v1/topics/{topic}``."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def declared_access() -> dict[tuple[str, str], Access | None]:
    """(method, OpenAPI path) → what the route declares (None: nothing)."""
    app = Flask(__name__)
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    out: dict[tuple[str, str], Access | None] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                out[method, openapi_path(rule.rule)] = access_of(app.view_functions[rule.endpoint])
    return out
