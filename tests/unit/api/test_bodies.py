"""How much body each route takes."""

from __future__ import annotations

from types import SimpleNamespace

from app.api.bodies import SMALL_BODY_BYTES, body_limit, send_limit
from app.config import Settings

MiB = 1024 * 1024


def test_a_send_takes_twice_the_largest_body_and_at_least_64_mib() -> None:
    assert send_limit(Settings(max_body_bytes=1)) == 64 * MiB
    assert send_limit(Settings(max_body_bytes=32 * MiB)) == 64 * MiB
    assert send_limit(Settings(max_body_bytes=40 * MiB)) == 80 * MiB


def test_a_route_that_carries_messages_takes_the_ceiling() -> None:
    send = SimpleNamespace(carries_messages=True)
    assert body_limit(send, 64 * MiB) == 64 * MiB
    assert body_limit(send, None) is None


def test_every_other_route_takes_a_small_body_at_most() -> None:
    ack = SimpleNamespace(carries_messages=False)

    def view() -> None: ...

    for route in (ack, view):
        assert body_limit(route, None) == SMALL_BODY_BYTES
        assert body_limit(route, 64 * MiB) == SMALL_BODY_BYTES
        assert body_limit(route, 1000) == 1000  # a ceiling below it stands
