"""txmsg as a producer drives it: keep-alive HTTP, client-chosen transaction ids."""

from __future__ import annotations

import http.client
import time
from typing import Any

import orjson

GROUP = "bench"
TOPIC = "bench"
BODY_TEXT = "x" * 1024
_JSON = {"Content-Type": "application/json"}


class Producer:
    """One client: one keep-alive connection, requests pre-encoded as bytes."""

    def __init__(self, port: int, name: str, messages: int = 1) -> None:
        self.port, self.name = port, name
        self._seq = 0
        self._conn = self._connect()
        payload = orjson.dumps({"transaction_id": "\0", "messages": [
            {"topic": TOPIC, "body": BODY_TEXT} for _ in range(messages)]})
        self._head, self._tail = payload.split(b"\\u0000", 1)
        self._send_path = f"/v1/producer-groups/{GROUP}/transactions"

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def _post(self, path: str, body: bytes | None, expect: int) -> bytes:
        for attempt in (0, 1):
            try:
                self._conn.request("POST", path, body=body, headers=_JSON)
                resp = self._conn.getresponse()
                data = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # the server closed an idle keep-alive connection: reconnect once
                self._conn.close()
                self._conn = self._connect()
                if attempt:
                    raise
        if resp.status != expect:
            raise RuntimeError(f"POST {path}: {resp.status} {data[:300]!r}")
        return data

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

    def close(self) -> None:
        self._conn.close()


def register(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = orjson.dumps({"check_urls": ["http://127.0.0.1:9/bench-check"]})
    conn.request("PUT", f"/v1/producer-groups/{GROUP}", body=body, headers=_JSON)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"registration failed: {resp.status}")


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
