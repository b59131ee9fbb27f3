"""`txmsg serve` against connections that send no whole request head (silent ones, or a
byte and then nothing), and against more of them than its file-descriptor limit: a real
process, real sockets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.acceptance.conftest import Served, start_serve

GROUP = "/v1/producer-groups/shop"
CALLBACK = {"check_urls": ["http://127.0.0.1:9/check"]}
# the serve process's descriptor limit in the test below, a quarter of a common default
DESCRIPTOR_LIMIT = 256


def connect(served: Served) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=30)


def ended_by_server(sock: socket.socket, within: float = 20) -> bool:
    """Whether the server ends the connection within ``within`` seconds (far above the
    header timeout), closing it with nothing or with a 408 answer."""
    sock.settimeout(within)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return received == b"" or received.startswith(b"HTTP/1.1 408 ")


def worker_descriptors(served: Served) -> int:
    """Open descriptors of serve's processes: its web worker's are the most of them."""
    children = Path(f"/proc/{served.proc.pid}/task/{served.proc.pid}/children").read_text()
    return sum(len(os.listdir(f"/proc/{pid}/fd"))
               for pid in [served.proc.pid, *map(int, children.split())])


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_serve({"TXMSG_HTTP_HEADER_TIMEOUT_SECONDS": "1"},
                         tmp_path_factory.mktemp("quick"), "--no-checker")
    yield served
    served.stop()


@pytest.mark.parametrize("sent", [b"", b"G", b"GET /healthz HTTP/1.1\r\nHost: test\r\n"],
                         ids=["nothing", "one-byte", "part-of-a-head"])
def test_a_connection_without_a_whole_request_head_is_ended(quick: Served, sent: bytes) -> None:
    with connect(quick) as sock:
        if sent:
            sock.sendall(sent)
        assert ended_by_server(sock)


def test_the_service_answers_past_its_descriptor_limit(tmp_path: Path) -> None:
    """More silent connections than serve's file-descriptor limit: once the header timeout
    has ended the first of them, health, sends and reads answer; every silent one is
    ended, and the worker never ran out of descriptors."""
    served = start_serve({"TXMSG_HTTP_HEADER_TIMEOUT_SECONDS": "1"}, tmp_path, "--no-checker",
                         launcher=["prlimit", f"--nofile={DESCRIPTOR_LIMIT}:{DESCRIPTOR_LIMIT}"])
    silent: list[socket.socket] = []
    try:
        url = served.url
        assert requests.put(url + GROUP, json=CALLBACK, timeout=30).status_code == 200
        before = worker_descriptors(served)
        silent = [connect(served) for _ in range(DESCRIPTOR_LIMIT + 100)]
        with requests.Session() as s:
            assert s.get(f"{url}/healthz", timeout=60).json() == {"status": "ok"}
            assert s.post(f"{url}{GROUP}/transactions", json={"topic": "t", "body": "b"},
                          timeout=60).status_code == 201
            assert s.get(f"{url}/v1/topics/t/messages", timeout=60).status_code == 200
        during = worker_descriptors(served)
        assert all(ended_by_server(sock, within=60) for sock in silent)
        print(f"descriptors of serve's processes: {before} before, {during} with "
              f"{len(silent)} silent connections, {worker_descriptors(served)} after")
        assert "Too many open files" not in served.log.read_text()
    finally:
        for sock in silent:
            sock.close()
        served.stop()
