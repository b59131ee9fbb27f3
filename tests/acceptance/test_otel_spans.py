"""`txmsg serve` with OTEL_EXPORTER_OTLP_ENDPOINT exports its spans to a real OTLP/HTTP
receiver (a server in this test that decodes them with opentelemetry-proto): send,
commit, receive, ack and a check, each with its parent and links."""

from __future__ import annotations

import gzip
import signal
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

from tests.callbacks import CallbackServer, answer, wait_until

pytestmark = pytest.mark.slow

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CHECKED_TRACE = "0af7651916cd43dd8448eb211c80319c"


def traceparent(trace_id: str, span_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{span_id}-01"}


class Span(NamedTuple):
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    links: list[tuple[str, str]]
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value"))


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: POST /v1/traces, protobuf."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.services: set[str] = set()
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                ok = self.path == "/v1/traces"
                if ok:
                    request = ExportTraceServiceRequest.FromString(raw)
                    with lock:
                        outer._collect(request)
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _collect(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            for attr in resource_spans.resource.attributes:
                if attr.key == "service.name":
                    self.services.add(_value(attr.value))
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(Span(
                        s.name, SpanProto.SpanKind.Name(s.kind), s.trace_id.hex(),
                        s.span_id.hex(), s.parent_span_id.hex(),
                        [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                        {a.key: _value(a.value) for a in s.attributes}))

    def named(self, name: str, trace_id: str | None = None) -> list[Span]:
        return [s for s in self.spans
                if s.name == name and trace_id in (None, s.trace_id)]

    def one(self, name: str, trace_id: str | None = None) -> Span:
        wait_until(lambda: self.named(name, trace_id), what=f"a span {name!r}")
        [span] = self.named(name, trace_id)
        return span

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_serve_exports_the_spans_of_a_transaction_and_its_check(
        serve_factory: Any, receiver: Receiver) -> None:
    callback = CallbackServer(answer("COMMIT"))
    try:
        served = serve_factory({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                                "OTEL_BSP_SCHEDULE_DELAY": "50",
                                "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0",
                                "TXMSG_CHECKER_POLL_SECONDS": "0.1"})
        s = requests.Session()
        api = f"{served.url}/v1/producer-groups/shop/transactions"
        assert s.put(f"{served.url}/v1/producer-groups/shop",
                     json={"check_urls": [callback.url]}).status_code == 200
        assert s.put(f"{served.url}/v1/topics/orders/subscriptions/billing",
                     json={"initial_position": "earliest"}).status_code == 201

        # produce -> commit -> receive -> ack, each request in the producer's trace
        sent = s.post(api, headers=traceparent(TRACE, "00000000000000a1"),
                      json={"transaction_id": "order-1", "topic": "orders", "body": "x",
                            "check_immunity_seconds": 3600})
        assert sent.status_code == 201, sent.text
        message_id = sent.json()["messages"][0]["message_id"]
        assert s.post(f"{api}/order-1/commit",
                      headers=traceparent(TRACE, "00000000000000a2")).status_code == 200
        received = s.post(f"{served.url}/v1/topics/orders/subscriptions/billing/receive",
                          json={"max_messages": 1}).json()["messages"]
        assert received[0]["properties"] == traceparent(TRACE, "00000000000000a1")
        assert s.post(f"{served.url}/v1/topics/orders/subscriptions/billing/ack",
                      headers=traceparent(TRACE, "00000000000000a3"),
                      json={"offsets": [received[0]["offset"]]}).status_code == 200

        # a transaction left to the check service, which the producer commits
        assert s.post(api, headers=traceparent(CHECKED_TRACE, "00000000000000b1"),
                      json={"transaction_id": "order-2", "topic": "orders", "body": "y"}
                      ).status_code == 201
        wait_until(lambda: s.get(f"{api}/order-2").json()["state"] == "COMMITTED",
                   what="the check's commit")

        send, commit = receiver.one("send orders", TRACE), receiver.one("commit orders", TRACE)
        assert (send.kind, send.trace_id, send.parent_id) == \
            ("SPAN_KIND_PRODUCER", TRACE, "00000000000000a1")
        assert {k: send.attributes.get(k) for k in (
            "messaging.system", "messaging.operation.type", "messaging.operation.name",
            "messaging.destination.name", "messaging.message.id")} == {
            "messaging.system": "txmsg", "messaging.operation.type": "send",
            "messaging.operation.name": "send", "messaging.destination.name": "orders",
            "messaging.message.id": message_id}
        assert (commit.kind, commit.trace_id, commit.parent_id, commit.links) == (
            "SPAN_KIND_CLIENT", TRACE, "00000000000000a2", [(TRACE, "00000000000000a1")])
        assert commit.attributes["messaging.operation.type"] == "settle"

        receive = receiver.one("receive orders")
        assert (receive.kind, receive.links) == ("SPAN_KIND_CLIENT",
                                                  [(TRACE, "00000000000000a1")])
        assert receive.attributes["messaging.consumer.group.name"] == "billing"
        ack = receiver.one("ack orders")
        assert (ack.trace_id, ack.parent_id) == (TRACE, "00000000000000a3")

        check = receiver.one("check orders")
        assert check.kind == "SPAN_KIND_CLIENT"
        assert check.links == [(CHECKED_TRACE, "00000000000000b1")]
        assert check.attributes["txmsg.check.result"] == "COMMIT"
        assert check.attributes["txmsg.transaction_id"] == "order-2"
        # the commit the check led to is a child of the check
        checked_commit = receiver.one("commit orders", check.trace_id)
        assert (checked_commit.trace_id, checked_commit.parent_id) == \
            (check.trace_id, check.span_id)
        assert checked_commit.links == [(CHECKED_TRACE, "00000000000000b1")]
        assert receiver.services == {"txmsg"}
    finally:
        callback.close()


def test_otel_sdk_disabled_exports_nothing(serve_factory: Any, receiver: Receiver) -> None:
    """OTEL_SDK_DISABLED=true keeps tracing off, the endpoint set or not."""
    served = serve_factory({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                            "OTEL_SDK_DISABLED": "true", "OTEL_BSP_SCHEDULE_DELAY": "50"})
    s = requests.Session()
    assert s.put(f"{served.url}/v1/producer-groups/shop",
                 json={"check_urls": ["http://127.0.0.1:9/check"]}).status_code == 200
    api = f"{served.url}/v1/producer-groups/shop/transactions"
    assert s.post(api, headers=traceparent(TRACE, "00000000000000a1"),
                  json={"transaction_id": "order-1", "topic": "orders", "body": "x"}
                  ).status_code == 201
    assert s.post(f"{api}/order-1/commit").status_code == 200
    served.stop()  # a server exporting would have flushed its spans as it stopped
    assert receiver.spans == []


@pytest.fixture
def black_hole() -> Iterator[str]:
    """An OTLP endpoint that takes connections (the kernel does) and never answers."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        yield f"http://127.0.0.1:{hole.getsockname()[1]}"


def test_sigterm_ends_serve_within_10_s_when_the_otlp_endpoint_does_not_answer(
        serve_factory: Any, black_hole: str) -> None:
    """Spans left in a web worker (sends, commits) and in the check service (a check):
    SIGTERM ends serve within the contract's 10 s though the endpoint never answers (the
    exporter waits 10 s for each batch), its last spans dropped."""
    callback = CallbackServer(answer("COMMIT"))
    try:
        served = serve_factory({"OTEL_EXPORTER_OTLP_ENDPOINT": black_hole,
                                "OTEL_BSP_SCHEDULE_DELAY": "600000",  # all left to the end
                                "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0",
                                "TXMSG_CHECKER_POLL_SECONDS": "0.1"})
        s = requests.Session()
        api = f"{served.url}/v1/producer-groups/shop/transactions"
        assert s.put(f"{served.url}/v1/producer-groups/shop",
                     json={"check_urls": [callback.url]}).status_code == 200
        for i in range(5):
            assert s.post(api, json={"transaction_id": f"o-{i}", "topic": "orders", "body": "x",
                                     "check_immunity_seconds": 3600}).status_code == 201
            assert s.post(f"{api}/o-{i}/commit").status_code == 200
        assert s.post(api, json={"transaction_id": "checked", "topic": "orders", "body": "y"}
                      ).status_code == 201
        wait_until(lambda: s.get(f"{api}/checked").json()["state"] == "COMMITTED",
                   what="the check's commit")
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=10) == 0
        assert "the last ones are dropped" in served.log.read_text()
    finally:
        callback.close()
