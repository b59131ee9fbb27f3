"""The address ``txmsg serve`` claims before Granian binds it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from app.cli.port import PortBusy, claim


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def test_port_0_claims_nothing() -> None:
    assert claim("127.0.0.1", 0) is None


def test_a_free_port_is_claimed_and_held() -> None:
    sock = claim_free()
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1"
        with pytest.raises(PortBusy, match="already in use"):
            claim("127.0.0.1", port)  # a second serve on it
    finally:
        sock.close()


def claim_free() -> socket.socket:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    sock = claim("127.0.0.1", port)
    assert sock is not None
    return sock


def test_an_address_someone_listens_on_is_busy(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(PortBusy) as caught:
        claim("127.0.0.1", port)
    assert str(caught.value) == (f"txmsg serve: 127.0.0.1:{port} is already in use (another "
                                 "process listens there); not starting a second listener")


def test_a_claimed_port_lets_its_own_workers_join_it() -> None:
    sock = claim_free()
    try:
        if hasattr(socket, "SO_REUSEPORT"):
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    finally:
        sock.close()


def test_an_ipv6_address_is_written_in_brackets() -> None:
    try:
        listener = socket.socket(socket.AF_INET6)
        listener.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    listener.listen()
    port = listener.getsockname()[1]
    try:
        for host in ("::1", "[::1]"):
            with pytest.raises(PortBusy) as caught:
                claim(host, port)
            assert f" [::1]:{port} is already in use" in str(caught.value)
    finally:
        listener.close()


def test_an_unknown_host_cannot_be_listened_on() -> None:
    with pytest.raises(PortBusy, match=r"cannot listen on nowhere\.invalid:8080"):
        claim("nowhere.invalid", 8080)


def _lingering_port() -> int:
    """A port with no listener, whose last connection was closed by the server's side
    first: the server's address stays in TIME_WAIT, and a plain bind is refused."""
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listening.accept()
    accepted.close()  # the server closes first: its side goes to TIME_WAIT
    client.recv(1)
    client.close()
    listening.close()
    return port


def test_a_port_left_by_a_gone_servers_connections_is_claimed() -> None:
    """As right after a restart on the same port: not refused as busy."""
    port = _lingering_port()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the claim meets
    held = claim("127.0.0.1", port)
    assert held is not None
    held.close()
