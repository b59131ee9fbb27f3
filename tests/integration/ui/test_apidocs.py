"""``GET /docs``: Swagger UI from the installed package, on this service's OpenAPI
document, public as the document is, and loading nothing from another host."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front

ADMIN_TOKEN = "apidocs-admin-token-0123456789abcdef"


@pytest.fixture
def client(database_url: str) -> Iterator[Any]:
    """Access control on: /docs and its files need no token, as /openapi.json."""
    app = create_app(make_settings(database_url, admin_token=ADMIN_TOKEN))
    try:
        yield front(app)
    finally:
        app.extensions["txmsg"].close()


def referenced(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


def test_the_page_loads_swagger_ui_from_this_host_only(client: Any) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and r.mimetype == "text/html"
    html = r.get_data(as_text=True)
    assert not re.search(r"(?i)https?:|//[a-z0-9]", html)  # no other host, no CDN
    urls = referenced(html)
    assert "/docs/assets/swagger-ui-bundle.js" in urls
    assert "/docs/assets/swagger-ui.css" in urls
    for url in urls:
        assert url.startswith("/docs/assets/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.content_length and asset.content_length > 0, url
    bundle = client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.mimetype in ("text/javascript", "application/javascript")
    assert b"SwaggerUIBundle" in bundle.get_data()
    assert "Content-Security-Policy" in r.headers


def test_it_shows_this_services_openapi_document(client: Any) -> None:
    html = client.get("/docs").get_data(as_text=True)
    assert 'data-openapi-url="/openapi.json"' in html
    init = client.get("/docs/assets/apidocs.js").get_data(as_text=True)
    assert "openapiUrl" in init and "validatorUrl: null" in init  # no validator.swagger.io
    document = client.get("/openapi.json")
    assert document.status_code == 200 and document.json["openapi"].startswith("3.")


def test_only_the_pages_own_files_are_served(client: Any) -> None:
    for name in ("swagger-editor-bundle.js", "LICENSE", "..%2F..%2Fconfig.py", "nope.js"):
        assert client.get(f"/docs/assets/{name}").status_code == 404, name
