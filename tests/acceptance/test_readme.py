"""The README's Python example runs as written against a real `txmsg serve`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_a_python_example() -> None:
    assert python_blocks()


def test_readme_python_examples_run(serve_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({"TXMSG_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}",
                            "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1"})
    outputs = []
    for block in python_blocks():
        script = tmp_path / "example.py"
        script.write_text(block)
        done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True,
                              text=True,
                              timeout=120, env={"TXMSG_URL": served.url, "PATH": "/usr/bin"},
                              cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    lines = outputs[0].splitlines()  # the producer SDK's example
    assert lines[0].startswith("COMMITTED [{'message_id'")
    assert lines[-1] == "COMMITTED"
