"""The ASGI front's router matches as Flask's URL map, both derived from the route table."""

from __future__ import annotations

import pytest
from flask import Flask
from werkzeug.exceptions import HTTPException

from app.api import flask_routes
from app.api.router import Router
from app.api.routes import ROUTES, Route

VALUES = {"group": "g-1", "transaction_id": "t.1", "topic": "orders", "subscription": "s",
          "message_id": "0F8E3B0C9D2A4C6E8F1A2B3C4D5E6F70", "token_id": "0123456789abcdef"}


def _flask_match(method: str, path: str) -> str | None:
    app = Flask(__name__)
    flask_routes.install(app)
    try:
        rule, _ = app.url_map.bind("localhost").match(path, method, return_rule=True)
    except HTTPException:
        return None
    return str(rule.endpoint)


def _concrete(route: Route) -> str:
    return route.path.format(**VALUES)


def test_every_route_is_matched_with_its_parameters() -> None:
    router = Router(ROUTES)
    for route in ROUTES:
        found = router.match(route.method, _concrete(route))
        assert found is not None, route.path
        assert found[0] is route
        assert found[1] == {name: VALUES[name] for name in route.params}


@pytest.mark.parametrize(("method", "path"), [
    *((route.method, _concrete(route)) for route in ROUTES),
    ("GET", "/v1/topics/"), ("GET", "/v1//topics"), ("GET", "/v1/topics//messages"),
    ("POST", "/v1/producer-groups/g/transactions/"), ("PUT", "/v1/producer-groups/g/transactions"),
    ("DELETE", "/v1/topics/t"),
    ("GET", "/v1/producer-groups/g/transactions/t/commit"), ("GET", "/"), ("GET", ""),
    ("GET", "/v1/topics/subscriptions"), ("GET", "/v1/topics/t/subscriptions/s/ack"),
    ("POST", "/v1/producer-groups/signing-secret/rotate"), ("GET", "/ui/"),
    ("POST", "/v1/producer-groups/g/signing-secret/rotate/x"), ("GET", "/V1/topics"),
])
def test_the_router_agrees_with_flask(method: str, path: str) -> None:
    """Where Flask would answer 404, 405 or a redirect, the router matches nothing (the
    front hands such requests to Flask)."""
    found = Router(ROUTES).match(method, path)
    assert (found[0].name if found else None) == (_flask_match(method, path) if path else None)


def test_head_and_options_are_left_to_flask() -> None:
    router = Router(ROUTES)
    assert router.match("HEAD", "/healthz") is None
    assert router.match("OPTIONS", "/v1/topics") is None


def test_a_route_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        Router([*ROUTES, ROUTES[0]])
