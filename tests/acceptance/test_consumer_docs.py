"""docs/consumers.md: its shell examples run as written, in order, against a real
`txmsg serve`, and print what the page says they print."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "consumers.md"
# an answer the page shows: a comment line holding JSON, perhaps with a note after it
_SHOWN = re.compile(r"^# ([\[{].*?)(?:\s{2,}\(.*\))?$")


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def shown(block: str) -> list[str]:
    return [m[1] for line in block.splitlines() if (m := _SHOWN.match(line))]


def test_the_page_has_examples_with_answers() -> None:
    assert len(bash_blocks()) >= 5
    assert all(shown(b) for b in bash_blocks())


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None,
                    reason="the examples need curl and jq")
def test_the_examples_print_what_the_page_shows(serve_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({"TXMSG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}"},
                           "--no-checker")
    for block in bash_blocks():
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], check=False,
                              capture_output=True, text=True, timeout=60,
                              env={"TXMSG_URL": served.url, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, (block, done.stderr)
        printed = [line for line in done.stdout.splitlines() if line.strip()]
        expected = shown(block)
        assert len(printed) == len(expected), (block, printed)
        for line, want in zip(printed, expected, strict=True):
            pattern = ".*".join(re.escape(part) for part in want.split("..."))
            assert re.fullmatch(pattern, line), (line, want)
