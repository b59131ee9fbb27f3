"""The operator dashboard at ``/ui/``: server-rendered pages (Jinja2) over the same domain
functions as the API, a small stylesheet, no JavaScript. (Its static directory also holds
the one script of the API browser at ``/docs``, ``app.ui.apidocs``, mounted here too.)

With access control on, a person signs in with a token; the session is kept on the
server (``app.domain.ui_sessions``: signing out ends it in every process) and the cookie
carries only its id. The cookie is HttpOnly and SameSite=Strict (and Secure over https,
directly or through a trusted proxy), and is signed with a key derived from
``TXMSG_ADMIN_TOKEN``, so changing that token ends every session. Every form that
changes something carries a CSRF token (Flask-WTF). The token's scopes decide what each
page shows and allows, through ``app.domain.access.allows`` as for the API.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

from flask import Flask, request
from flask.sessions import SecureCookieSessionInterface

from app.config import Settings
from app.ui import apidocs, views

SESSION_HOURS = 12


def session_key(settings: Settings) -> str:
    """The key that signs session cookies: from the admin token, or from the database URL
    while access control is off (the same in every worker process of a deployment)."""
    material = (settings.admin_token.get_secret_value() if settings.admin_token is not None
                else str(settings.database_url))
    return hmac.new(material.encode(), b"txmsg dashboard session", hashlib.sha256).hexdigest()


class _Sessions(SecureCookieSessionInterface):
    """Flask's signed cookie sessions, Secure whenever the request came over https."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(request.is_secure) or super().get_cookie_secure(app)


def install(app: Flask, settings: Settings) -> None:
    """Mount the dashboard (/ui/) and the API browser (/docs) on the app (called by the
    app factory)."""
    app.secret_key = session_key(settings)
    app.config.update(
        SESSION_COOKIE_NAME="txmsg_ui", SESSION_COOKIE_PATH="/ui/",
        SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS),
        # the API's POSTs carry bearer tokens, not cookies: only the dashboard's forms
        # are checked (views.protect), and a form stays valid as long as its session
        WTF_CSRF_CHECK_DEFAULT=False, WTF_CSRF_TIME_LIMIT=None)
    app.session_interface = _Sessions()
    views.csrf.init_app(app)
    app.register_blueprint(views.bp)
    app.register_blueprint(apidocs.bp)
