"""The documentation site builds with ``mkdocs build --strict`` (a broken link or anchor,
or a page that cannot be built, fails), loads nothing from elsewhere, and lists every page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        assert (site / ("index.html" if page == "index" else f"{page}/index.html")).is_file()
    index = (site / "index.html").read_text()
    for page in pages:  # no explicit nav: every page is in the menu
        if page != "index":
            assert f'href="{page}/"' in index, page
    for html in site.rglob("*.html"):
        assets = re.findall(r'<(?:script|link|img)\b[^>]*(?:src|href)="([^"]+)"', html.read_text())
        assert not [a for a in assets if re.match(r"(https?:)?//", a)], html


def test_the_readme_links_into_docs_resolve() -> None:
    """Relative links of the README (docs/...) name files that exist, as GitHub shows them."""
    links = re.findall(r"\]\(((?:docs/)[^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert links
    assert [link for link in links if not (ROOT / link).is_file()] == []
