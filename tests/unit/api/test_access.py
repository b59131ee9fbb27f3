"""Access at the edge: the bearer token of a request, and a route's declaration checked."""

from __future__ import annotations

import pytest

from app.api.access import (
    ADMIN_ONLY,
    OPEN,
    Access,
    access_of,
    authorize,
    bearer_token,
    public,
    route_access,
    unauthenticated,
)
from app.domain.access import CONSUME, PRODUCE, UNRESTRICTED, Principal
from app.errors import Forbidden


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"),
    ("bearer abc", "abc"),
    ("BEARER  abc ", "abc"),
    (None, None),
    ("", None),
    ("Bearer", None),
    ("Bearer   ", None),
    ("Basic dXNlcjpwYXNz", None),
    ("Token abc", None),
    ("Bearerabc", None),
])
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_the_challenge_says_whether_a_token_was_given() -> None:
    none = unauthenticated(None)
    assert none.status == 401 and none.code == "unauthenticated"
    assert dict(none.headers)["WWW-Authenticate"] == 'Bearer realm="txmsg"'
    bad = unauthenticated("x")
    assert dict(bad.headers)["WWW-Authenticate"].endswith('error="invalid_token"')


def principal(*scopes: str) -> Principal:
    return Principal("0123456789abcdef", frozenset(scopes))


def test_a_scope_names_the_path_parameters_value() -> None:
    access = Access(action=PRODUCE, param="group")
    authorize(access, principal("produce:shop"), {"group": "shop"})
    authorize(access, principal("produce:*"), {"group": "shop"})
    authorize(access, UNRESTRICTED, {"group": "shop"})
    with pytest.raises(Forbidden) as caught:
        authorize(access, principal("produce:other", "consume:shop"), {"group": "shop"})
    assert caught.value.code == "forbidden"
    assert caught.value.extra == {"required_scope": "produce:shop"}


def test_routes_without_an_action_take_any_token() -> None:
    authorize(Access(note="narrowed by the handler"), principal(), {})
    authorize(OPEN, principal(), {})


def test_admin_only() -> None:
    authorize(ADMIN_ONLY, UNRESTRICTED, {})
    with pytest.raises(Forbidden) as caught:
        authorize(ADMIN_ONLY, principal("produce:*", "consume:*", "metrics"), {})
    assert caught.value.extra == {"required_scope": "admin"}


def test_the_scope_in_a_refusal_is_cut_short() -> None:
    with pytest.raises(Forbidden) as caught:
        authorize(Access(action=CONSUME, param="topic"), principal(), {"topic": "t" * 500})
    assert len(caught.value.extra["required_scope"]) == 200


def test_required_scope_as_the_openapi_document_names_it() -> None:
    assert Access(action=PRODUCE, param="group").required_scope == "produce:{group}"
    assert ADMIN_ONLY.required_scope == "admin"
    assert Access(note="consume on each topic").required_scope == "consume on each topic"


def test_a_view_that_declares_nothing_is_admin_only() -> None:
    def forgotten() -> None: ...

    @public
    def page() -> None: ...

    assert access_of(forgotten) is None and route_access(forgotten) is ADMIN_ONLY
    assert access_of(page) is OPEN and route_access(page) is OPEN
