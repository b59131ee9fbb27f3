"""The documentation's examples run as written against a real `txmsg serve`: the Python
blocks of the README and of every page under docs/, and the five-minute tour of
docs/tour.md (its shell blocks, in order, with curl and the admin CLI)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from tests.acceptance.conftest import TXMSG, clean_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOUR = ROOT / "docs" / "tour.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


# pages whose examples need a Spark session: tests/spark/test_streaming_docs.py runs them
SPARK_PAGES = {"streaming.md"}


def python_blocks() -> list[tuple[Path, str]]:
    return [(page, block) for page in PAGES if page.name not in SPARK_PAGES
            for block in blocks(page.read_text(), "python")]


def tour_blocks() -> list[str]:
    return blocks(TOUR.read_text(), "sh")


def test_the_docs_have_python_examples() -> None:
    found = python_blocks()
    assert [p.name for p, b in found if "send_in_transaction(" in b] == ["sdk.md"]
    assert len(tour_blocks()) == 4
    assert "](docs/tour.md)" in README.read_text()  # the README leads to the tour


def test_the_tour_waits_for_a_bounded_time() -> None:
    """A loop of the tour that waits for the service ends by itself: `for ... in $(seq N)`,
    never `until` or `while` without a bound."""
    script = "\n".join(tour_blocks())
    assert not re.search(r"^\s*(until|while)\b", script, flags=re.MULTILINE)
    assert re.search(r"^for \w+ in \$\(seq \d+\); do", script, flags=re.MULTILINE)


def test_python_examples_run(serve_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({"TXMSG_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}",
                            "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1"})
    for page, block in python_blocks():
        script = tmp_path / "example.py"
        script.write_text(block)
        done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True,
                              text=True,
                              timeout=120, env={"TXMSG_URL": served.url, "PATH": "/usr/bin"},
                              cwd=ROOT)
        assert done.returncode == 0, (page.name, done.stderr)
        if "send_in_transaction(" in block:  # the producer SDK's example
            lines = done.stdout.splitlines()
            assert lines[0].startswith("COMMITTED [{'message_id'")
            assert lines[-1] == "COMMITTED"


def test_the_five_minute_tour_runs(serve_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    database = {"TXMSG_DATABASE_URL": f"sqlite:///{tmp_path / 'tour.db'}"}
    served = serve_factory({**database, "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1"})
    serve, *steps = tour_blocks()
    assert serve.startswith(".venv/bin/txmsg serve ")  # this test starts it (served)
    script = ("set -eu\n" + "\n".join(steps)).replace(
        "localhost:8080", f"127.0.0.1:{served.port}").replace(".venv/bin/txmsg", TXMSG)
    done = subprocess.run(["bash", "-c", script], check=False, capture_output=True, text=True,
                          timeout=300, env=clean_env(database), cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    out = done.stdout
    assert '{"topic":"orders","messages":[],"next_offset":0,"first_offset":0}' in out
    assert re.search(r'"transaction_id":"order-1","state":"COMMITTED","messages":\[\{'
                     r'"message_id":"\w+","topic":"orders","offset":0\}\]', out)
    assert '"body":"{\\"order\\": 1}"' in out and '"next_offset":1' in out
    assert '{"transaction_id":"order-2","state":"ROLLED_BACK"}' in out
    assert '"status":409' in out and "cannot commit transaction 'order-2'" in out
    assert 'txmsg_checks_total{result="REFUSED"} 1.0\n' in out
    shown = out.split("checks (1):\n", 1)[1].splitlines()
    assert shown[1].split()[0] == "1" and shown[1].split()[2:4] == [
        "REFUSED", "http://127.0.0.1:9000/check"]
    assert "shop order-3: COMMITTED" in out.splitlines()
    listed = out.split("\nproducer_group  transaction_id", 1)[1].splitlines()[1:]
    assert [line.split()[:3] for line in listed] == [
        ["shop", "order-1", "COMMITTED"], ["shop", "order-2", "ROLLED_BACK"],
        ["shop", "order-3", "COMMITTED"]]


def test_the_tours_wait_for_the_first_check_gives_up(tmp_path: Path) -> None:
    """The step that waits for the first check is bounded: with nothing ever answering
    (and ``sleep`` made instant), it ends by itself instead of looping forever."""
    steps = "\n".join(tour_blocks()).splitlines()
    start = next(i for i, line in enumerate(steps) if "/metrics" in line)
    end = next(i for i in range(start, len(steps)) if re.search(r"\bdone\b", steps[i]))
    wait = "\n".join(steps[start:end + 1])
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "sleep").write_text("#!/bin/sh\nexit 0\n")
    (shims / "sleep").chmod(0o755)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = clean_env({})
    env["PATH"] = f"{shims}:{env['PATH']}"
    done = subprocess.run(["bash", "-c", "set -u\n" + wait.replace("localhost:8080",
                                                                    f"127.0.0.1:{port}")],
                          check=False, capture_output=True, text=True, timeout=120, env=env)
    assert "txmsg_checks_total" not in done.stdout


def test_the_api_guide_example_runs(serve_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({"TXMSG_DATABASE_URL": f"sqlite:///{tmp_path / 'api.db'}"})
    [example] = blocks((ROOT / "docs" / "api.md").read_text(), "sh")
    done = subprocess.run(["bash", "-c", "set -eu\n" + example.replace(
        "curl ", "curl -sS -w '\\n' ").replace("localhost:8080", f"127.0.0.1:{served.port}")],
        check=False, capture_output=True, text=True, timeout=120, env=clean_env({}))
    assert done.returncode == 0, done.stderr
    answers = done.stdout.splitlines()
    assert len(answers) == 4
    assert '"state":"PREPARED"' in answers[1] and '"state":"COMMITTED"' in answers[2]
    assert '"offset":0,' in answers[3] and '"body":"{\\"order\\": 1}"' in answers[3]
