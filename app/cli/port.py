"""The address ``txmsg serve`` listens on, claimed before Granian binds it.

Granian's workers bind with SO_REUSEPORT, which Linux lets any process of the same user
share: a second ``txmsg serve`` on a busy port would start without a word and take half
the connections. So serve first binds the address itself without SO_REUSEPORT, which
fails if anything is bound there (a listener with or without the option); then it sets
SO_REUSEPORT on that bound socket, so that its own workers may join it, and holds it for
as long as it serves. Another serve's claim then fails too: no window between the check
and the bind for a second one to slip through. (But for an address that a gone server's
connections still hold, in TIME_WAIT right after a restart: that claim binds with
SO_REUSEADDR, which a second serve starting in the same instant could share.)
"""

from __future__ import annotations

import errno
import socket
from typing import Any


class PortBusy(Exception):
    """The address is taken: its ``str`` is the one line to print."""


def claim(host: str, port: int) -> socket.socket | None:
    """A socket bound to ``host:port`` (not listening: it takes no connection), held by
    the caller while it serves; None for port 0 (Granian picks one of its own)."""
    if port == 0:
        return None
    address = f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except OSError as exc:
        raise PortBusy(f"txmsg serve: cannot listen on {address}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise PortBusy(f"txmsg serve: cannot listen on {address}: "
                           f"{exc.strerror or exc}") from None
        sock = _after_closed_connections(family, kind, proto, sockaddr, address)
    if hasattr(socket, "SO_REUSEPORT"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def _after_closed_connections(family: int, kind: int, proto: int, sockaddr: tuple[Any, ...],
                              address: str) -> socket.socket:
    """The address refused a plain bind: busy if something accepts connections there;
    else what holds it is connections of a server now gone (TIME_WAIT, as after a
    restart), which SO_REUSEADDR binds past (Linux still refuses it beside a listener, or
    beside another claim, which sets no SO_REUSEADDR)."""
    with socket.socket(family, kind, proto) as probe:
        probe.settimeout(1)
        listening = probe.connect_ex(sockaddr) == 0
    if not listening:
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
            return sock
        except OSError:
            sock.close()
    raise PortBusy(f"txmsg serve: {address} is already in use (another process "
                   "listens there); not starting a second listener")
