"""Tokens: the request's rules, the token's form, and the guard that verifies them (on an
in-memory SQLite holding only the token table)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import StaticPool

from app.domain.access import UNRESTRICTED
from app.domain.tokens import (
    MAX_NAME_LENGTH,
    MAX_SCOPES,
    TokenGuard,
    check_token_id,
    create,
    parse_token_request,
    revoke,
)
from app.errors import InvalidRequest, NotFound
from app.storage.schema import api_token, metadata

ADMIN = "admin-token-0123456789"


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    metadata.create_all(engine, tables=[api_token])
    yield engine
    engine.dispose()


def refusal(payload: Any) -> str:
    with pytest.raises(InvalidRequest) as caught:
        parse_token_request(payload)
    return caught.value.code


def test_repeated_scopes_count_once_in_their_order() -> None:
    request = parse_token_request({"name": "ci", "scopes": ["consume:b", "admin", "consume:b"]})
    assert request.scopes == ["consume:b", "admin"]


@pytest.mark.parametrize(("payload", "code"), [
    ({"name": "ci", "scopes": []}, "invalid_length"),
    ({"name": "ci", "scopes": ["metrics"] * (MAX_SCOPES + 1)}, "invalid_length"),
    ({"name": "ci", "scopes": ["root"]}, "invalid_scope"),
    ({"name": "ci", "scopes": ["produce:"]}, "invalid_scope"),
    ({"name": "ci", "scopes": ["produce:a b"]}, "invalid_scope"),
    ({"name": "   ", "scopes": ["admin"]}, "invalid_token_name"),
    ({"name": "a\nb", "scopes": ["admin"]}, "invalid_token_name"),
    ({"name": "x" * (MAX_NAME_LENGTH + 1), "scopes": ["admin"]}, "invalid_token_name"),
    ({"scopes": ["admin"]}, "missing_field"),
    ({"name": "ci", "scopes": ["admin"], "expires": 1}, "unknown_field"),
])
def test_bad_token_requests_are_refused_with_their_code(payload: dict[str, Any],
                                                       code: str) -> None:
    assert refusal(payload) == code


def test_token_ids_are_sixteen_lower_case_hex_digits() -> None:
    assert check_token_id("0123456789abcdef") == "0123456789abcdef"
    for bad in ("0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "", "../x"):
        with pytest.raises(InvalidRequest) as caught:
            check_token_id(bad)
        assert caught.value.code == "invalid_token_id"


def test_a_token_is_stored_only_as_its_hash(engine: Engine) -> None:
    made = create(engine, parse_token_request({"name": "ci", "scopes": ["consume:orders"]}))
    token = made["token"]
    assert re.fullmatch(r"txmsg_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", token)
    assert token.split("_")[1] == made["token_id"]
    with engine.connect() as conn:
        row = conn.execute(api_token.select()).one()
    assert token not in [str(v) for v in row]
    assert row.secret_hash == hashlib.sha256(token.encode()).hexdigest()


def test_the_guard_knows_the_admin_token_without_the_database() -> None:
    guard = TokenGuard(None, SecretStr(ADMIN))  # type: ignore[arg-type]
    assert guard.enabled
    assert guard.cached(ADMIN) is UNRESTRICTED
    assert guard.cached(ADMIN + "x") is None
    assert TokenGuard(None, None).enabled is False  # type: ignore[arg-type]


def test_the_guard_verifies_stored_tokens_and_refuses_others(engine: Engine) -> None:
    guard = TokenGuard(engine, SecretStr(ADMIN))
    made = create(engine, parse_token_request({"name": "ci", "scopes": ["consume:orders"]}))
    principal = guard.verify(made["token"])
    assert principal is not None
    assert principal.token_id == made["token_id"]
    assert principal.scopes == frozenset({"consume:orders"})
    wrong_secret = made["token"][:-1] + ("A" if made["token"][-1] != "A" else "B")
    for bad in (wrong_secret, "txmsg_ffffffffffffffff_" + "A" * 43, "Bearer x", ""):
        assert guard.verify(bad) is None


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_revoked_token_is_refused_once_its_cache_entry_expires(engine: Engine) -> None:
    ticks = Ticks()
    guard = TokenGuard(engine, SecretStr(ADMIN), clock=ticks, ttl=4.0)
    made = create(engine, parse_token_request({"name": "ci", "scopes": ["metrics"]}))
    assert guard.verify(made["token"]) is not None
    revoke(engine, made["token_id"])
    ticks.now += 3.9
    assert guard.cached(made["token"]) is not None  # verified moments ago
    ticks.now += 0.2
    assert guard.cached(made["token"]) is None
    assert guard.verify(made["token"]) is None


def test_forget_drops_every_cached_token(engine: Engine) -> None:
    guard = TokenGuard(engine, SecretStr(ADMIN), clock=Ticks())
    made = create(engine, parse_token_request({"name": "ci", "scopes": ["metrics"]}))
    guard.verify(made["token"])
    guard.forget()
    assert guard.cached(made["token"]) is None
    assert guard.cached(ADMIN) is UNRESTRICTED


def test_a_full_cache_drops_the_oldest_entry(engine: Engine) -> None:
    guard = TokenGuard(engine, SecretStr(ADMIN), clock=Ticks(), size=2)
    made = [create(engine, parse_token_request({"name": f"t{i}", "scopes": ["metrics"]}))["token"]
            for i in range(3)]
    for token in made:
        assert guard.verify(token) is not None
    assert [guard.cached(t) is not None for t in made] == [False, True, True]


def test_revoking_an_unknown_token_is_not_found(engine: Engine) -> None:
    with pytest.raises(NotFound) as caught:
        revoke(engine, "0123456789abcdef")
    assert caught.value.code == "token_not_found"
