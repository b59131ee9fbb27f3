"""SQL of the ui_session table (the dashboard's sessions, by the hash of their id)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, insert, select

from app.storage.schema import AnyRow, api_token, ui_session


def insert_session(conn: Connection, session_hash: str, token_id: str | None,
                   now: datetime, expires_at: datetime) -> None:
    conn.execute(insert(ui_session).values(session_hash=session_hash, token_id=token_id,
                                           created_at=now, expires_at=expires_at))


def get_live_session(conn: Connection, session_hash: str, now: datetime) -> AnyRow | None:
    """The session unless expired, with its token's scopes (``scopes`` is NULL when the
    session was opened with a token since revoked, or with the admin token)."""
    stmt = (select(ui_session.c.token_id, api_token.c.scopes)
            .select_from(ui_session.outerjoin(
                api_token, api_token.c.token_id == ui_session.c.token_id))
            .where(ui_session.c.session_hash == session_hash,
                   ui_session.c.expires_at > now))
    return conn.execute(stmt).first()


def delete_session(conn: Connection, session_hash: str) -> bool:
    return conn.execute(
        delete(ui_session).where(ui_session.c.session_hash == session_hash)).rowcount > 0


def delete_expired_sessions(conn: Connection, now: datetime) -> int:
    return conn.execute(delete(ui_session).where(ui_session.c.expires_at <= now)).rowcount
