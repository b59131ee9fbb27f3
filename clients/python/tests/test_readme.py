"""This README's Python examples run as written against a real ``txmsg serve``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import Service

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def expected_output(block: str) -> list[str]:
    """The ``# ...`` comments after the prints: what they print."""
    lines: list[str] = []
    after_print = False
    for line in block.splitlines():
        if line.startswith("print("):
            if "  # " in line:
                lines.append(line.split("  # ", 1)[1])
            after_print = True
        elif line.startswith("# ") and after_print:
            lines.append(line[2:])
        else:
            after_print = False
    return lines


def test_readme_python_examples_run(service: Service, tmp_path: Path) -> None:
    blocks = python_blocks()
    assert len(blocks) == 4
    env = {"TXMSG_URL": service.url, "PATH": os.environ.get("PATH", "/usr/bin")}
    for block in blocks[1:]:  # the first one only imports
        script = tmp_path / "example.py"
        script.write_text(block)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == expected_output(block)
