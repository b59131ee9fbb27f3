"""MkDocs hooks (mkdocs.yml, ``hooks``): a page may show part of a Markdown file kept
elsewhere in the repository, so that one text, tested where it lives, is also on the site.

``<!-- include clients/python/README.md from "## Consumer" -->`` on a line of its own is
replaced by that file from the line that starts with the quoted text to its end. A file or
a start line that is not there fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_INCLUDE = re.compile(r'^<!-- include (\S+) from "([^"]+)" -->$', flags=re.MULTILINE)


def included(markdown: str, root: Path = ROOT) -> str:
    """``markdown`` with every include line replaced by the part of the file it names."""
    def part(match: re.Match[str]) -> str:
        lines = (root / match[1]).read_text().splitlines()
        starts = [n for n, line in enumerate(lines) if line.startswith(match[2])]
        if not starts:
            raise ValueError(f"{match[1]} has no line starting with {match[2]!r}")
        return "\n".join(lines[starts[0]:])
    return _INCLUDE.sub(part, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return included(markdown)
