"""The dashboard's sessions, kept on the server: opened at sign-in, looked up on every
page, ended at sign-out, in every process at once.

The cookie (signed by Flask) carries a random session id; the database keeps only its
SHA-256, with the token it was opened with and when it expires. A page's lookup is one
primary-key read joined to the token, so a session ends with its token's revocation too;
it replaces the token read every page made before, so it costs nothing more, and it is
not cached, so a session ended in one process is ended in all of them at once.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import Engine

from app.domain import clock
from app.domain.access import UNRESTRICTED, Principal
from app.storage import tokens, ui_sessions
from app.storage.db import write_transaction


def _hashed(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session(engine: Engine, principal: Principal, lifetime: timedelta) -> str:
    """A new session for ``principal`` (expired ones are swept on the way); its id."""
    session_id = secrets.token_urlsafe(32)
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        ui_sessions.delete_expired_sessions(conn, now)
        ui_sessions.insert_session(conn, _hashed(session_id), principal.token_id, now,
                                   now + lifetime)
    return session_id


def session_principal(engine: Engine, session_id: str) -> Principal | None:
    """Who the session acts as; None once it ended, expired or its token was revoked."""
    with engine.connect() as conn:
        row = ui_sessions.get_live_session(conn, _hashed(session_id), clock.utcnow())
    if row is None:
        return None
    if row.token_id is None:
        return UNRESTRICTED
    if row.scopes is None:  # its token was revoked
        return None
    return Principal(row.token_id, frozenset(tokens.scopes(row)))


def end_session(engine: Engine, session_id: str) -> None:
    with write_transaction(engine) as conn:
        ui_sessions.delete_session(conn, _hashed(session_id))
