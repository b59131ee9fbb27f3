"""Scoped bearer tokens: made, listed and revoked by the admin, verified on every request.

A token is ``txmsg_<token_id>_<secret>``: 64 bits of id to find its row, 256 bits of
secret from ``secrets``. Only the SHA-256 of the whole token is stored, and compared with
``hmac.compare_digest``. A slow password hash (bcrypt, argon2) guards secrets people
choose, which can be guessed; nobody can search 2**256 random secrets, however fast
the hash, while a slow hash would spend tens of milliseconds of CPU on every request.

Verified tokens are cached for ``CACHE_SECONDS`` per process, so that checking one costs a
hash and a dictionary lookup, not a query; a token revoked in another process is refused
here once its entry expires, within 5 s.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictStr, field_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import Engine

from app.domain import clock
from app.domain.access import SCOPE_PATTERN, UNRESTRICTED, Principal, is_valid_scope
from app.domain.messages import parse_body
from app.errors import InvalidRequest, NotFound
from app.problems import ProblemCode
from app.storage import tokens
from app.storage.db import write_transaction
from app.storage.schema import AnyRow

TOKEN_PREFIX = "txmsg_"
TOKEN_ID_PATTERN = r"^[0-9a-f]{16}$"
_TOKEN_ID_RE = re.compile(TOKEN_ID_PATTERN)
_TOKEN_RE = re.compile(r"txmsg_([0-9a-f]{16})_[A-Za-z0-9_-]{43}")
MAX_NAME_LENGTH = 200
MAX_SCOPES = 100
CACHE_SECONDS = 4.0  # under 5: revocation reaches every process within 5 s
CACHE_SIZE = 10_000
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

# the rules as JSON Schema (the OpenAPI document); the validators below check them, each
# refusal with its own code
TokenName = Annotated[StrictStr, Field(
    json_schema_extra={"minLength": 1, "maxLength": MAX_NAME_LENGTH},
    description="A label for people (who holds it, what for); not unique.")]
Scope = Annotated[StrictStr, Field(json_schema_extra={"pattern": SCOPE_PATTERN}, description=(
    "`admin`, `metrics` (`GET /metrics`), `produce:<group>` or `consume:<topic>`; `*` in "
    "place of a name means all."))]
TokenId = Annotated[StrictStr, Field(json_schema_extra={"pattern": TOKEN_ID_PATTERN})]


class TokenIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: TokenName
    scopes: list[Scope] = Field(min_length=1, max_length=MAX_SCOPES,
                                description="Repeated scopes count once.")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not name.strip() or len(name) > MAX_NAME_LENGTH or _CONTROL_RE.search(name):
            raise PydanticCustomError(
                ProblemCode.INVALID_TOKEN_NAME,
                f"a token name is 1..{MAX_NAME_LENGTH} characters, not "
                "blank, without control characters")
        return name

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, scopes: list[str]) -> list[str]:
        for scope in scopes:
            if not is_valid_scope(scope):
                raise PydanticCustomError(
                    ProblemCode.INVALID_SCOPE, f"unknown scope {scope[:200]!r}: admin, metrics, "
                    "produce:<group>, consume:<topic> (a name or *)")
        return list(dict.fromkeys(scopes))  # repeated scopes once, in their order


def parse_token_request(payload: Any) -> TokenIn:
    return parse_body(TokenIn, payload)


def check_token_id(token_id: str) -> str:
    if _TOKEN_ID_RE.fullmatch(token_id) is None:
        raise InvalidRequest(f"token id {token_id[:64]!r} is malformed: 16 hex digits",
                             code=ProblemCode.INVALID_TOKEN_ID)
    return token_id


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _shape(row: AnyRow) -> dict[str, Any]:
    return {"token_id": row.token_id, "name": row.name, "scopes": tokens.scopes(row),
            "created_at": row.created_at}


def create(engine: Engine, request: TokenIn) -> dict[str, Any]:
    """A new token; the answer is the only place its secret ever appears."""
    token_id = secrets.token_hex(8)
    token = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    with write_transaction(engine) as conn:
        row = tokens.insert_token(conn, token_id, request.name, request.scopes, _hash(token),
                                  clock.utcnow())
    return {**_shape(row), "token": token}


def list_tokens(engine: Engine, after: int, limit: int) -> dict[str, Any]:
    with engine.connect() as conn:
        rows = tokens.list_tokens(conn, after, limit)
    return {"tokens": [_shape(r) for r in rows],
            "next_after": str(rows[-1].id) if len(rows) == limit else None}


def revoke(engine: Engine, token_id: str) -> None:
    with write_transaction(engine) as conn:
        if not tokens.delete_token(conn, token_id):
            raise NotFound(f"no token {token_id!r}", code=ProblemCode.TOKEN_NOT_FOUND)


class TokenGuard:
    """Verifies presented tokens: the admin token from the settings, or a stored one."""

    def __init__(self, engine: Engine, admin_token: SecretStr | None, *,
                 clock: Callable[[], float] = time.monotonic,
                 ttl: float = CACHE_SECONDS, size: int = CACHE_SIZE) -> None:
        self._engine = engine
        self.enabled = admin_token is not None
        self._admin = (hashlib.sha256(admin_token.get_secret_value().encode()).digest()
                       if admin_token is not None else b"")
        self._clock, self._ttl, self._size = clock, ttl, size
        # token's SHA-256 → (expiry, principal). Keyed by the hash, never the token: a
        # dictionary lookup's timing then tells nothing about the secret. A plain dict,
        # not cachetools' TTLCache: that cost 5 µs a lookup, this well under one. A dict
        # read is atomic under the GIL, so only writers take the lock.
        self._cache: dict[bytes, tuple[float, Principal]] = {}
        self._writing = threading.Lock()

    def cached(self, token: str) -> Principal | None:
        """Without the database: the admin token, or a token verified moments ago."""
        return self._known(hashlib.sha256(token.encode()).digest())

    def _known(self, digest: bytes) -> Principal | None:
        if self.enabled and hmac.compare_digest(digest, self._admin):
            return UNRESTRICTED
        entry = self._cache.get(digest)
        if entry is not None and entry[0] > self._clock():
            return entry[1]
        return None

    def verify(self, token: str) -> Principal | None:
        """The token's principal; None for an unknown, malformed or revoked token."""
        digest = hashlib.sha256(token.encode()).digest()
        principal = self._known(digest)
        if principal is not None:
            return principal
        match = _TOKEN_RE.fullmatch(token)
        if match is None:
            return None
        row = self._load(match[1])
        if row is None or not hmac.compare_digest(row.secret_hash, digest.hex()):
            return None
        principal = Principal(row.token_id, frozenset(tokens.scopes(row)))
        self._remember(digest, principal)
        return principal

    def _remember(self, digest: bytes, principal: Principal) -> None:
        with self._writing:
            now = self._clock()
            if len(self._cache) >= self._size:
                # full: drop what expired; if nothing did, the oldest (insertion order)
                for key, (expiry, _) in list(self._cache.items()):
                    if expiry <= now:
                        del self._cache[key]
                while len(self._cache) >= self._size:
                    del self._cache[next(iter(self._cache))]
            self._cache[digest] = (now + self._ttl, principal)

    def forget(self) -> None:
        """Drop every cached token (after a revocation in this process)."""
        with self._writing:
            self._cache.clear()

    def _load(self, token_id: str) -> AnyRow | None:
        with self._engine.connect() as conn:
            return tokens.get_token(conn, token_id)
