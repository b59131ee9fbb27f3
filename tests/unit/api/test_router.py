"""The ASGI front's router, compiled from the route table: a parameter is one non-empty
segment, a literal segment wins over a parameter, and nothing else matches."""

from __future__ import annotations

import pytest

from app.api.router import Router
from app.api.routes import ROUTES, Route

VALUES = {"group": "g-1", "transaction_id": "t.1", "topic": "orders", "subscription": "s",
          "message_id": "0F8E3B0C9D2A4C6E8F1A2B3C4D5E6F70", "token_id": "0123456789abcdef",
          "consumer": "c-1"}


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
    ("GET", "/v1/topics/"), ("GET", "/v1//topics"), ("GET", "/v1/topics//messages"),
    ("POST", "/v1/producer-groups/g/transactions/"), ("PUT", "/v1/producer-groups/g/transactions"),
    ("DELETE", "/v1/topics/t"),
    ("GET", "/v1/producer-groups/g/transactions/t/commit"), ("GET", "/"), ("GET", ""),
    ("GET", "/v1/topics/t/subscriptions/s/ack"),
    ("POST", "/v1/producer-groups/signing-secret/rotate"), ("GET", "/ui/"),
    ("POST", "/v1/producer-groups/g/signing-secret/rotate/x"), ("GET", "/V1/topics"),
    ("HEAD", "/healthz"), ("OPTIONS", "/v1/topics"),
])
def test_nothing_else_is_matched(method: str, path: str) -> None:
    """(The front answers these 404 or 405 itself, HEAD as its GET, OPTIONS with the
    path's methods.)"""
    assert Router(ROUTES).match(method, path) is None


def test_a_literal_segment_wins_over_a_parameter() -> None:
    route, params = Router(ROUTES).match("GET", "/v1/topics/subscriptions")  # type: ignore[misc]
    assert (route.path, params) == ("/v1/topics/{topic}", {"topic": "subscriptions"})
    route, params = Router(ROUTES).match(  # type: ignore[misc]
        "POST", "/v1/producer-groups/g/transactions/t/commit")
    assert route.name == "commitTransaction"


def test_the_methods_of_a_path() -> None:
    router = Router(ROUTES)
    assert router.methods("/v1/producer-groups/g/transactions") == {"GET", "POST"}
    assert router.methods("/v1/topics/t") == {"GET", "PUT"}
    assert router.methods("/v1/nothing") == frozenset()
    assert router.methods("/v1/topics/") == frozenset()


def test_a_route_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        Router([*ROUTES, ROUTES[0]])
