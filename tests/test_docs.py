"""The documentation site builds with ``mkdocs build --strict`` (a broken link or anchor,
or a page that cannot be built, fails), loads nothing from elsewhere, and has every page in
its menu; the API guide lists every route of the route table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.api.routes import ROUTES
from scripts.mkdocs_hooks import included

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.name for p in (ROOT / "docs").glob("*.md"))


def nav_pages(entries: list[Any]) -> list[str]:
    """The pages of mkdocs.yml's ``nav``, sections flattened."""
    found: list[str] = []
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_page_is_in_the_menu_once() -> None:
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert sorted(nav) == PAGES
    assert nav[0] == "index.md"


def test_the_site_builds_strictly_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    pages = [Path(p).stem for p in PAGES]
    for page in pages:
        assert (site / ("index.html" if page == "index" else f"{page}/index.html")).is_file()
    index = (site / "index.html").read_text()
    for page in pages:  # the menu, on every page, links every page
        if page != "index":
            assert f'href="{page}/"' in index, page
    # the consumer SDK's page shows the SDK's README, whose examples its tests run
    consumer_sdk = (site / "consumer-sdk" / "index.html").read_text()
    assert "consumer.run(bill" in consumer_sdk and "<!-- include" not in consumer_sdk
    for html in site.rglob("*.html"):
        assets = re.findall(r'<(?:script|link|img)\b[^>]*(?:src|href)="([^"]+)"', html.read_text())
        assert not [a for a in assets if re.match(r"(https?:)?//", a)], html


def test_the_readme_links_into_docs_resolve() -> None:
    """Relative links of the README (docs/...) name files that exist, as GitHub shows them."""
    links = re.findall(r"\]\(((?:docs/)[^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_an_include_shows_the_file_from_its_start_line(tmp_path: Path) -> None:
    (tmp_path / "part.md").write_text("# Title\nintro\n## Consumer\nthe text\n")
    page = 'before\n<!-- include part.md from "## Consumer" -->\nafter\n'
    assert included(page, tmp_path) == "before\n## Consumer\nthe text\nafter\n"
    with pytest.raises(ValueError, match="no line starting with"):
        included('<!-- include part.md from "## Producer" -->', tmp_path)


_ROUTE = re.compile(r"`(GET|PUT|POST|DELETE|PATCH) (/[^`\s?]*)`")
_SCOPES = {"produce": "`produce:{group}`", "consume": "`consume:{topic}`", "admin": "admin",
           "metrics": "`metrics`"}


API_GUIDE = ROOT / "docs" / "api.md"


def documented_routes(page: str) -> dict[tuple[str, str], str]:
    """Each `METHOD /path` of the API guide's tables, with its row's scope column."""
    found = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and (m := _ROUTE.fullmatch(cells[0])):
            found[(m[1], m[2])] = cells[1]
    return found


def missing_routes(page: str) -> list[str]:
    documented = documented_routes(page)
    return [f"{r.method} {r.path}" for r in ROUTES if (r.method, r.path) not in documented]


def test_the_api_guide_lists_every_route_with_its_scope() -> None:
    page = API_GUIDE.read_text()
    assert missing_routes(page) == []
    documented = documented_routes(page)
    for route in ROUTES:
        access, scope = route.access, documented[(route.method, route.path)]
        if access.open:
            assert scope == "none", route.path
        elif access.action is not None:
            assert scope == _SCOPES[access.action], route.path


def test_a_route_left_out_of_the_api_guide_is_found() -> None:
    receive = "| `POST /v1/topics/{topic}/subscriptions/{subscription}/receive` |"
    page = API_GUIDE.read_text()
    assert receive in page
    without = "\n".join(line for line in page.splitlines() if not line.startswith(receive))
    assert missing_routes(without) == ["POST /v1/topics/{topic}/subscriptions/{subscription}/receive"]
