"""A send's W3C trace context (``traceparent`` / ``tracestate`` headers) is stored with
its messages, on both stores: reads, receives, the discard topic's copies and the check
callback's payload carry it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson
import pytest
from flask import Flask

from app import tracing
from app.api.asgi import Api
from app.domain.messages import MAX_PROPERTIES, MAX_PROPERTIES_BYTES
from app.web import create_app
from tests.asgi_client import AsgiClient
from tests.callbacks import answer, wait_until
from tests.conftest import make_settings
from tests.integration.checker_harness import Harness

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
SEND = "/v1/producer-groups/gTAG/transactions"
MSG = {"topic": "tTAG", "body": "hello"}


TAG = "AAON"
_RANDOM = ("message_id", "created_at", "resolved_at", "next_check_at", "committed_at")


class Answer(NamedTuple):
    status: int
    body: Any


class Side:
    """The app behind its ASGI front; its names carry its tag where the requests say
    ``TAG``."""

    def __init__(self, app: Flask, tag: str = TAG) -> None:
        self.app, self.tag = app, tag
        self.api = Api(app)
        self.asgi = AsgiClient(self.api)

    def call(self, method: str, path: str, *, json: Any = None,
             headers: dict[str, str] | None = None) -> Answer:
        path = path.replace("TAG", self.tag)
        data = b"" if json is None else orjson.dumps(json).replace(b"TAG", self.tag.encode())
        fields = {"Content-Type": "application/json", **(headers or {})}
        reply = self.asgi.request(method, path, body=data, headers=[
            *fields.items(), ("Content-Length", str(len(data)))])
        raw = reply.body
        body = orjson.loads(raw.replace(self.tag.encode(), b"TAG")) if raw else None
        return Answer(reply.status, _without_random(body))

    def close(self) -> None:
        self.asgi.close()
        self.api.stop_threads()
        self.app.extensions["txmsg"].close()


def _without_random(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: "<random>" if k in _RANDOM else _without_random(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_random(v) for v in node]
    return node


@pytest.fixture
def side(database_url: str) -> Iterator[Side]:
    """The app with a registered group."""
    one = Side(create_app(make_settings(database_url)))
    put = one.call("PUT", "/v1/producer-groups/gTAG",
                   json={"check_urls": ["http://127.0.0.1:9/check"]})
    assert put.status == 200, put
    yield one
    one.close()


def stored(side: Side, transaction_id: str) -> list[dict[str, str]]:
    answer = side.call("GET", f"{SEND}/{transaction_id}")
    assert answer.status == 200, answer
    return [m["properties"] for m in answer.body["messages"]]


def test_the_headers_are_stored_with_each_message_unless_it_sets_its_own(side) -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    sent = side.call("POST", SEND, headers={"traceparent": TRACEPARENT,
                                              "tracestate": TRACESTATE},
                json={"transaction_id": "x1", "messages": [
                    {**MSG, "properties": {"p": "v"}},
                    {**MSG, "properties": {"traceparent": own}},
                    {**MSG, "properties": {"tracestate": "mine=1"}}]})
    assert sent.status == 201, sent
    assert stored(side, "x1") == [
        {"p": "v", "traceparent": TRACEPARENT, "tracestate": TRACESTATE},
        {"traceparent": own},  # its own context, whole: not the request's tracestate
        {"tracestate": "mine=1"}]  # its own too: none of the request's

    assert side.call("POST", f"{SEND}/x1/commit").status == 200
    read = side.call("GET", "/v1/topics/tTAG/messages?from_offset=0")
    assert [m["properties"].get("traceparent") for m in read.body["messages"]] == \
        [TRACEPARENT, own, None]
    assert side.call("PUT", "/v1/topics/tTAG/subscriptions/s",
                json={"initial_position": "earliest"}).status == 201
    received = side.call("POST", "/v1/topics/tTAG/subscriptions/s/receive",
                    json={"max_messages": 3})
    assert [m["properties"].get("tracestate") for m in received.body["messages"]] == \
        [TRACESTATE, None, "mine=1"]


def test_a_send_without_the_headers_stores_none(side) -> None:
    assert side.call("POST", SEND, json={"transaction_id": "x1", **MSG}).status == 201
    assert stored(side, "x1") == [{}]


@pytest.mark.parametrize("traceparent", [
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # trace id all zeros
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # parent id all zeros
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # the forbidden version
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # 00 has 4 fields
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
    "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "",
    "not a traceparent",
])
def test_an_invalid_traceparent_is_ignored_with_its_tracestate(side, traceparent) -> None:
    sent = side.call("POST", SEND, json={"transaction_id": "x1", **MSG},
                headers={"traceparent": traceparent, "tracestate": TRACESTATE})
    assert sent.status == 201, sent
    assert stored(side, "x1") == [{}]


def test_a_later_version_is_kept_whole(side) -> None:
    later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    assert side.call("POST", SEND, json={"transaction_id": "x1", **MSG},
                headers={"traceparent": later}).status == 201
    assert stored(side, "x1") == [{"traceparent": later}]


def test_a_tracestate_over_512_characters_is_dropped(side) -> None:
    long = ",".join(f"k{i}=" + "v" * 40 for i in range(12))  # 12 members, over 512
    assert len(long) > 512
    side.call("POST", SEND, json={"transaction_id": "x1", **MSG},
         headers={"traceparent": TRACEPARENT, "tracestate": long})
    side.call("POST", SEND, json={"transaction_id": "x2", **MSG},
         headers={"traceparent": TRACEPARENT, "tracestate": "a=1," * 40 + "b=2"})  # 41
    assert stored(side, "x1") == stored(side, "x2") == [{"traceparent": TRACEPARENT}]


def test_a_message_at_the_property_limits_is_stored_without_them(side) -> None:
    full_count = {f"k{i}": "v" for i in range(MAX_PROPERTIES)}
    one_left = {f"k{i}": "v" for i in range(MAX_PROPERTIES - 1)}
    bytes_left = MAX_PROPERTIES_BYTES - len("traceparent") - len(TRACEPARENT)
    room_for_traceparent = {"big": "x" * (bytes_left - len("big"))}
    sent = side.call("POST", SEND, headers={"traceparent": TRACEPARENT,
                                              "tracestate": TRACESTATE},
                json={"transaction_id": "x1", "messages": [
                    {**MSG, "properties": full_count}, {**MSG, "properties": one_left},
                    {**MSG, "properties": room_for_traceparent}]})
    assert sent.status == 201, sent
    assert stored(side, "x1") == [
        full_count, {**one_left, "traceparent": TRACEPARENT},
        {**room_for_traceparent, "traceparent": TRACEPARENT}]


def test_a_retried_send_under_another_span_is_the_same_send(side) -> None:
    retried = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
    first = side.call("POST", SEND, json={"transaction_id": "x1", **MSG},
                 headers={"traceparent": TRACEPARENT})
    again = side.call("POST", SEND, json={"transaction_id": "x1", **MSG},
                 headers={"traceparent": retried})
    assert (first.status, again.status) == (201, 200)
    assert stored(side, "x1") == [{"traceparent": TRACEPARENT}]  # the first send's


def test_two_traceparent_fields_are_ignored(side) -> None:
    body = b'{"transaction_id": "x1", "topic": "t", "body": "b"}'
    fields = [("Content-Type", "application/json"), ("traceparent", TRACEPARENT),
              ("traceparent", TRACEPARENT)]
    reply = side.asgi.request("POST", SEND.replace("TAG", side.tag), body=body,
                              headers=[*fields, ("Content-Length", str(len(body)))])
    assert reply.status == 201, reply
    assert stored(side, "x1") == [{}]


def test_the_check_and_the_discard_copies_carry_the_trace_context(harness) -> None:
    h: Harness = harness
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    r = h.client.post("/v1/producer-groups/shop/transactions",
                      json={"transaction_id": "order-1", "topic": "orders", "body": "b"},
                      headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE})
    assert r.status_code == 201, r.json
    h.start_checker()
    assert wait_until(lambda: h.state("shop", "order-1") == "DISCARDED")
    [message] = cb.checks[0]["messages"]
    assert (message["properties"]["traceparent"], message["properties"]["tracestate"]) == \
        (TRACEPARENT, TRACESTATE)
    [parked] = h.topic("TRANS_CHECK_MAX_TIME_TOPIC")
    assert parked["properties"]["traceparent"] == TRACEPARENT


@pytest.fixture
def exported() -> Iterator[Any]:
    """Tracing on in this process (``app.tracing``), its spans kept in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing.shutdown()


def test_the_front_makes_the_spans(side, exported) -> None:
    commit_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00000000000000c0-01"
    ack_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00000000000000d0-01"
    side.call("POST", SEND, json={"transaction_id": "x1", **MSG},
         headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE})
    side.call("POST", f"{SEND}/x1/commit", headers={"traceparent": commit_parent})
    side.call("PUT", "/v1/topics/tTAG/subscriptions/s", json={"initial_position": "earliest"})
    side.call("POST", "/v1/topics/tTAG/subscriptions/s/receive", json={"max_messages": 1})
    side.call("POST", "/v1/topics/tTAG/subscriptions/s/ack", json={"offsets": [0]},
         headers={"traceparent": ack_parent})

    def shape(span: Any) -> tuple[Any, ...]:
        return (span.name.replace(TAG, "TAG"), span.kind.name,
                span.parent and f"{span.parent.trace_id:032x}-{span.parent.span_id:016x}",
                [f"{link.context.trace_id:032x}-{link.context.span_id:016x}"
                 for link in span.links])

    stored_context = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
    expected = [("send tTAG", "PRODUCER", stored_context, []),
                ("commit tTAG", "CLIENT", "4bf92f3577b34da6a3ce929d0e0e4736-00000000000000c0",
                 [stored_context]),
                ("receive tTAG", "CLIENT", None, [stored_context]),
                ("ack tTAG", "CLIENT", "4bf92f3577b34da6a3ce929d0e0e4736-00000000000000d0", [])]
    spans = [shape(s) for s in exported.get_finished_spans()]
    assert spans == expected
    send = exported.get_finished_spans()[0]
    assert send.parent.trace_state.get("congo") == "t61rcWkgMzE"


def test_tracing_off_imports_no_opentelemetry(tmp_path) -> None:
    """Without OTEL_EXPORTER_OTLP_ENDPOINT a send, commit, receive and ack, traced or not,
    leave OpenTelemetry unimported (the hot path checks ``TRACER is None`` only)."""
    script = f"""
import sys
from app.api.asgi import Api
from app.web import create_app
from tests.asgi_client import AsgiClient
from tests.conftest import make_settings
from tests.front_client import front
from app import tracing

assert not tracing.install({{}})
app = create_app(make_settings("sqlite:///{tmp_path / 'txmsg.db'}"))
from app.storage.db import upgrade_to_head
upgrade_to_head(app.extensions["txmsg"].settings)
client = AsgiClient(Api(app))
headers = [("Content-Type", "application/json"), ("traceparent", "{TRACEPARENT}")]
def call(path, body=b""):
    reply = client.request("POST", path, body=body,
                           headers=[*headers, ("Content-Length", str(len(body)))])
    assert reply.status < 300, (path, reply.status, reply.body)
assert front(app).put("/v1/producer-groups/g",
                             json={{"check_urls": ["http://127.0.0.1:9/c"]}}).status_code == 200
assert front(app).put("/v1/topics/t/subscriptions/s",
                             json={{"initial_position": "earliest"}}).status_code == 201
call("/v1/producer-groups/g/transactions", b'{{"transaction_id": "x", "topic": "t", "body": "b"}}')
call("/v1/producer-groups/g/transactions/x/commit")
call("/v1/topics/t/subscriptions/s/receive", b'{{"max_messages": 1}}')
call("/v1/topics/t/subscriptions/s/ack", b'{{"offsets": [0]}}')
client.close()
app.extensions["txmsg"].close()
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TXMSG_", "OTEL_"))}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
