"""`txmsg serve` on a busy address: it exits at once, non-zero, with one line naming the
address, and never becomes a second listener sharing the port (Granian's workers bind
with SO_REUSEPORT, which would let it)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.acceptance.conftest import run_txmsg


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A plain listening socket on a loopback port chosen now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def assert_refused(done, address: str, cwd: Path) -> None:  # type: ignore[no-untyped-def]
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and address in lines[0] and "in use" in lines[0], done.stderr
    assert not (cwd / "var").exists()  # refused before it migrated (or created) anything


def test_a_port_another_process_listens_on_is_refused(listener: socket.socket,
                                                      tmp_path: Path) -> None:
    port = listener.getsockname()[1]
    done = run_txmsg(["serve", "--port", str(port), "--no-checker"], {}, tmp_path, timeout=60)
    assert_refused(done, f"127.0.0.1:{port}", tmp_path)


def test_a_listener_sharing_the_port_with_so_reuseport_is_refused(tmp_path: Path) -> None:
    """What Granian itself does: a second serve would have joined this one's group."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = run_txmsg(["serve", "--port", str(port), "--no-checker"], {}, tmp_path,
                         timeout=60)
    assert_refused(done, f"127.0.0.1:{port}", tmp_path)


def test_an_ipv6_address_is_named_in_brackets(tmp_path: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6) as sock:
        try:
            sock.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback")
        sock.listen()
        port = sock.getsockname()[1]
        done = run_txmsg(["serve", "--host", "::1", "--port", str(port), "--no-checker"], {},
                         tmp_path, timeout=60)
    assert_refused(done, f"[::1]:{port}", tmp_path)


def test_a_second_serve_on_the_port_of_a_running_one_exits(serve_factory,  # type: ignore[no-untyped-def]
                                                           tmp_path: Path) -> None:
    first = serve_factory({}, "--no-checker")
    other = tmp_path / "other"
    other.mkdir()
    done = run_txmsg(["serve", "--port", str(first.port), "--no-checker"], {}, other,
                     timeout=60)
    assert_refused(done, f"127.0.0.1:{first.port}", other)
    assert first.proc.poll() is None
    assert requests.get(f"{first.url}/readyz", timeout=5).status_code == 200
