"""txmsg as a producer drives it: keep-alive HTTP, client-chosen transaction ids."""

from __future__ import annotations

import http.client
import socket
import time
from typing import Any

import orjson

GROUP = "bench"
TOPIC = "bench"
BODY_TEXT = "x" * 1024
_JSON = {"Content-Type": "application/json"}


class Connection:
    """One keep-alive connection speaking HTTP/1.1 on a plain socket (requests written
    whole, responses read by Content-Length): http.client cost the load generator about
    0.3 ms of CPU per send + commit pair, this about 0.09 ms, which leaves the service on
    the same two cores that much more of the machine."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self._auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self._buf = b""
        self._sock = self._connect()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""
        return sock

    def _post(self, path: str, body: bytes | None, expect: int, method: str = "POST") -> bytes:
        body = body or b""
        request = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self._auth}"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                   ).encode() + body
        for attempt in (0, 1):
            try:
                self._sock.sendall(request)
                status, data = self._response()
                break
            except (ConnectionError, BrokenPipeError):
                # the server closed an idle keep-alive connection: reconnect once
                self._sock.close()
                self._sock = self._connect()
                if attempt:
                    raise
        if status != expect:
            raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        return data

    def _response(self) -> tuple[int, bytes]:
        buf = self._buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._recv()
        head = buf[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            raise RuntimeError(f"no Content-Length in response: {head[:300]!r}")
        line_end = head.find(b"\r\n", at + 2)
        length = int(head[at + 17:line_end if line_end > 0 else len(head)])
        total = end + 4 + length
        while len(buf) < total:
            buf += self._recv()
        self._buf = buf[total:]
        return int(head[9:12]), buf[end + 4:total]

    def _recv(self) -> bytes:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self._sock.close()


class Producer(Connection):
    """One producer: transactions of ``messages`` messages to ``topic``, requests
    pre-encoded as bytes; with ``keys``, message i of a transaction has the ordering key
    ``k{i % keys}`` (round-robin over the keys when ``keys`` divides ``messages``)."""

    def __init__(self, port: int, name: str, messages: int = 1,
                 token: str | None = None, topic: str = TOPIC, keys: int = 0) -> None:
        super().__init__(port, token)
        self.name = name
        self._seq = 0
        payload = orjson.dumps({"transaction_id": "\0", "messages": [
            {"topic": topic, "body": BODY_TEXT, **({"ordering_key": f"k{i % keys}"}
                                                    if keys else {})}
            for i in range(messages)]})
        self._head, self._tail = payload.split(b"\\u0000", 1)
        self._send_path = f"/v1/producer-groups/{GROUP}/transactions"

    def next_id(self) -> str:
        self._seq += 1
        return f"{self.name}-{self._seq}"

    def send(self, txid: str) -> None:
        self._post(self._send_path, self._head + txid.encode() + self._tail, 201)

    def commit(self, txid: str) -> None:
        self._post(f"{self._send_path}/{txid}/commit", None, 200)

    def pair(self) -> int:
        txid = self.next_id()
        self.send(txid)
        self.commit(txid)
        return 1

    def timed_pair(self) -> dict[str, float]:
        txid = self.next_id()
        t0 = time.perf_counter()
        self.send(txid)
        t1 = time.perf_counter()
        self.commit(txid)
        t2 = time.perf_counter()
        return {"send": t1 - t0, "commit": t2 - t1}


class Consumer(Connection):
    """One consumer of a subscription: receive, then acknowledge; with ``consumer``, its
    name goes in every receive and ack (failover and exclusive need one)."""

    def __init__(self, port: int, topic: str, subscription: str,
                 token: str | None = None, consumer: str | None = None) -> None:
        super().__init__(port, token)
        self._path = f"/v1/topics/{topic}/subscriptions/{subscription}"
        self._named = {"consumer": consumer} if consumer else {}

    def subscribe(self, **settings: object) -> None:
        self._post(self._path, orjson.dumps(settings), 201, method="PUT")

    def receive(self, max_messages: int, wait_ms: int = 0) -> list[dict[str, Any]]:
        data = self._post(f"{self._path}/receive", orjson.dumps(
            {"max_messages": max_messages, "wait_ms": wait_ms, **self._named}), 200)
        return list(orjson.loads(data)["messages"])

    def ack(self, offsets: list[int]) -> None:
        self._post(f"{self._path}/ack", orjson.dumps({"offsets": offsets, **self._named}), 200)

    def ack_through(self, offset: int) -> None:
        """Cumulative: every offset up to ``offset`` (failover and exclusive)."""
        self._post(f"{self._path}/ack", orjson.dumps({"through": offset, **self._named}), 200)

    def receive_ack(self, max_messages: int, cumulative: bool = False) -> int:
        """One batch received and acknowledged (``cumulative``: by one ack through its last
        offset): how many messages."""
        messages = self.receive(max_messages)
        if messages and cumulative:
            self.ack_through(messages[-1]["offset"])
        elif messages:
            self.ack([m["offset"] for m in messages])
        return len(messages)


def _auth(token: str | None) -> dict[str, str]:
    return {**_JSON, "Authorization": f"Bearer {token}"} if token else _JSON


def register(port: int, token: str | None = None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = orjson.dumps({"check_urls": ["http://127.0.0.1:9/bench-check"]})
    conn.request("PUT", f"/v1/producer-groups/{GROUP}", body=body, headers=_auth(token))
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"registration failed: {resp.status}")


def make_token(port: int, admin_token: str, scopes: list[str]) -> str:
    """A scoped token, made with the admin token (access control on)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = orjson.dumps({"name": "bench", "scopes": scopes})
    conn.request("POST", "/v1/tokens", body=body, headers=_auth(admin_token))
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status != 201:
        raise RuntimeError(f"token creation failed: {resp.status} {data[:300]!r}")
    return orjson.loads(data)["token"]


def batch_stats(metrics_text: bytes) -> dict[str, Any]:
    """Mean group-commit batch size per writer, from the service's /metrics."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in metrics_text.decode().splitlines():
        if not line.startswith("txmsg_group_commit_batch_size_"):
            continue
        name, value = line.rsplit(" ", 1)
        writer = name.split('writer="', 1)[1].split('"', 1)[0] if 'writer="' in name else "?"
        if name.startswith("txmsg_group_commit_batch_size_sum"):
            sums[writer] = sums.get(writer, 0) + float(value)
        elif name.startswith("txmsg_group_commit_batch_size_count"):
            counts[writer] = counts.get(writer, 0) + float(value)
    return {w: {"transactions": int(counts[w]), "requests": int(sums.get(w, 0)),
                "mean_batch": round(sums.get(w, 0) / counts[w], 2) if counts[w] else None}
            for w in counts}
