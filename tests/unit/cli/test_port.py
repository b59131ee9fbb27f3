"""``claim``: the address serve holds, refused where something listens, taken where only
a gone server's connections linger (TIME_WAIT, as right after a restart)."""

from __future__ import annotations

import socket

import pytest

from app.cli.port import PortBusy, claim


def _lingering_port() -> int:
    """A port with no listener, whose last connection was closed by the server's side
    first: the server's address stays in TIME_WAIT, and a plain bind is refused."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server closes first: its side goes to TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    return port


def test_a_port_left_by_a_gone_servers_connections_is_claimed() -> None:
    port = _lingering_port()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the claim meets
    held = claim("127.0.0.1", port)
    assert held is not None
    held.close()


def test_a_port_something_listens_on_is_refused_in_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with pytest.raises(PortBusy, match=rf"^txmsg serve: 127\.0\.0\.1:{port} is already in use"):
            claim("127.0.0.1", port)


def test_a_second_claim_of_a_held_address_is_refused() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    held = claim("127.0.0.1", port)
    assert held is not None
    try:
        with pytest.raises(PortBusy):
            claim("127.0.0.1", held.getsockname()[1])
    finally:
        held.close()
