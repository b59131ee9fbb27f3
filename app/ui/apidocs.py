"""``GET /docs``: the API browser, Swagger UI over this service's OpenAPI document.

Swagger UI's files come from the installed ``swagger-ui-py`` package and are served
here, with a small initializer of ours: the page loads nothing from another host (no
CDN), so it works offline and behind a strict egress policy. It is public, as the
document it shows (``/openapi.json``) is; "Try it out" sends the bearer token typed
into its Authorize dialog.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from flask import Blueprint, Response, abort, render_template, request, send_from_directory

from app.api.access import public

OWN = Path(__file__).parent / "static"
# what the page loads: Swagger UI's (from its package) and the initializer (ours)
SWAGGER_ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png",
                  "favicon-16x16.png")
OWN_ASSETS = ("apidocs.js",)
# the page runs Swagger UI's script and ours, and asks this host only (its validator
# badge, which would call validator.swagger.io, is off in apidocs.js)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; "
                               "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

bp = Blueprint("apidocs", __name__, url_prefix="/docs", template_folder="templates")


@cache
def swagger_ui_static() -> Path:
    """The ``static`` directory of the installed ``swagger_ui`` package (found without
    importing it: its ``__init__`` loads framework adapters this page does not use)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is not installed (a dependency of txmsg)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@bp.get("", strict_slashes=False)
@public
def page() -> Response:
    """Swagger UI on /openapi.json."""
    html = render_template("apidocs.html", openapi_url=f"{request.script_root}/openapi.json")
    return Response(html, mimetype="text/html")


@bp.get("/assets/<name>")
@public
def asset(name: str) -> Response:
    """One of the page's files (a fixed list: nothing else of either directory)."""
    if name in SWAGGER_ASSETS:
        return send_from_directory(swagger_ui_static(), name, max_age=86400)
    if name in OWN_ASSETS:
        return send_from_directory(OWN, name, max_age=3600)
    abort(404)


@bp.after_request
def _secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response
