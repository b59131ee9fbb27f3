"""SQL of the api_token table (scoped bearer tokens, their secrets stored as hashes)."""

from __future__ import annotations

from datetime import datetime

import orjson
from sqlalchemy import Connection, delete, insert, select

from app.storage.schema import AnyRow, api_token


def insert_token(conn: Connection, token_id: str, name: str, scopes: list[str],
                 secret_hash: str, now: datetime) -> AnyRow:
    stmt = insert(api_token).values(
        token_id=token_id, name=name, scopes=orjson.dumps(scopes).decode(),
        secret_hash=secret_hash, created_at=now,
    ).returning(*api_token.c)
    return conn.execute(stmt).one()


def get_token(conn: Connection, token_id: str) -> AnyRow | None:
    """The row a presented token names (its secret hash included, to compare)."""
    return conn.execute(select(api_token).where(api_token.c.token_id == token_id)).first()


def list_tokens(conn: Connection, after: int, limit: int) -> list[AnyRow]:
    stmt = (select(api_token).where(api_token.c.id > after)
            .order_by(api_token.c.id).limit(limit))
    return list(conn.execute(stmt))


def delete_token(conn: Connection, token_id: str) -> bool:
    return conn.execute(delete(api_token).where(api_token.c.token_id == token_id)).rowcount > 0


def scopes(row: AnyRow) -> list[str]:
    names: list[str] = orjson.loads(row.scopes)
    return names
