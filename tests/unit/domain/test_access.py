"""Scopes: the grammar, and the one function that decides what they allow."""

from __future__ import annotations

import pytest

from app.domain.access import (
    ADMIN,
    CONSUME,
    METRICS,
    PRODUCE,
    UNRESTRICTED,
    allows,
    is_valid_scope,
    names_allowed,
)


@pytest.mark.parametrize("scope", ["admin", "metrics", "produce:orders-svc", "consume:orders",
                                   "produce:*", "consume:*", "consume:TRANS_CHECK_MAX_TIME_TOPIC",
                                   f"consume:{'t' * 127}", "produce:a%b|c_d-e"])
def test_valid_scopes(scope: str) -> None:
    assert is_valid_scope(scope)


@pytest.mark.parametrize("scope", ["", "Admin", "admin:x", "produce", "produce:", "consume:",
                                   "read:orders", "metrics:x", "metrics:*", "produce:bad name", "consume:a/b",
                                   f"consume:{'t' * 128}", "produce:**", "produce:a*",
                                   " admin", "admin\n", "consume:orders\n", 7, None])
def test_invalid_scopes(scope: object) -> None:
    assert not is_valid_scope(scope)


CASES = [
    # scopes, action, name, allowed
    ({"admin"}, ADMIN, None, True),
    ({"admin"}, PRODUCE, "g", True),
    ({"admin"}, CONSUME, "t", True),
    ({"produce:*"}, ADMIN, None, False),
    ({"produce:g"}, PRODUCE, "g", True),
    ({"produce:g"}, PRODUCE, "h", False),
    ({"produce:g"}, CONSUME, "g", False),  # producing to a group is not reading a topic
    ({"produce:*"}, PRODUCE, "any-group", True),
    ({"produce:*"}, CONSUME, "t", False),
    ({"consume:t"}, CONSUME, "t", True),
    ({"consume:t"}, CONSUME, "T", False),  # names are case-sensitive
    ({"consume:t"}, PRODUCE, "t", False),
    ({"consume:*"}, CONSUME, "TRANS_CHECK_MAX_TIME_TOPIC", True),
    ({"consume:t", "produce:g"}, CONSUME, "t", True),
    ({"consume:t", "produce:g"}, PRODUCE, "g", True),
    ({"produce:g"}, PRODUCE, None, False),  # a name is needed to allow anything but admin
    ({"produce:*"}, PRODUCE, "*", True),
    (set(), CONSUME, "t", False),
    ({"metrics"}, METRICS, None, True),  # /metrics, and nothing else
    ({"admin"}, METRICS, None, True),
    ({"metrics"}, ADMIN, None, False),
    ({"metrics"}, CONSUME, "t", False),
    ({"consume:*", "produce:*"}, METRICS, None, False),
    (set(), METRICS, None, False),
]


@pytest.mark.parametrize(("scopes", "action", "name", "allowed"), CASES)
def test_allows(scopes: set[str], action: str, name: str | None, allowed: bool) -> None:
    assert allows(frozenset(scopes), action, name) is allowed


def test_the_admin_token_and_open_access_are_unrestricted() -> None:
    assert UNRESTRICTED.token_id is None
    assert all(UNRESTRICTED.may(action, "x") for action in (ADMIN, PRODUCE, CONSUME))


@pytest.mark.parametrize("scopes", [set(), {"admin"}, {"consume:a", "consume:b"},
                                    {"consume:*"}, {"produce:a", "consume:c"},
                                    {"produce:*", "consume:a"}])
def test_names_allowed_is_the_set_form_of_allows(scopes: set[str]) -> None:
    names = ["a", "b", "c", "d", "TRANS_CHECK_MAX_TIME_TOPIC"]
    for action in (PRODUCE, CONSUME):
        allowed = names_allowed(frozenset(scopes), action)
        expected = {n for n in names if allows(frozenset(scopes), action, n)}
        if allowed is None:
            assert expected == set(names)
        else:
            assert set(allowed) & set(names) == expected
