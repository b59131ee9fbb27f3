"""With OpenTelemetry installed, the producer sends the current trace context and the
consumer runs each handler in a span that continues the message's trace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import Service
from txmsg_client import Consumer, Producer, ReceivedMessage, message

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")

_EXPORTER = in_memory.InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """The process's global tracer provider (set once), its spans kept in memory."""
    current = trace.get_tracer_provider()
    if not isinstance(current, sdk_trace.TracerProvider):
        current = sdk_trace.TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(export.SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[in_memory.InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def producer(service: Service) -> Producer:
    p = Producer(service.url, "sdk-tracing")
    p.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
    return p


def _received(service: Service, topic: str) -> tuple[Consumer, list[ReceivedMessage]]:
    consumer = Consumer(service.url, topic, "billing")
    consumer.subscribe(initial_position="earliest")
    return consumer, consumer.receive(10, wait_ms=5000)


def test_the_handler_span_continues_the_producers_trace(service: Service, producer: Producer,
                                                         topic: str, spans) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("place order") as placing:
        sent = producer.send(message(topic, "hello"))
        producer.commit(sent["transaction_id"])
    context = placing.get_span_context()
    consumer, [received] = _received(service, topic)
    assert received.properties["traceparent"] == \
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"

    seen: list[int] = []
    result = consumer.handle([received], lambda m: seen.append(
        trace.get_current_span().get_span_context().span_id))
    assert result.acked == [received.offset]
    [process] = [s for s in spans.get_finished_spans() if s.name == f"process {topic}"]
    assert seen == [process.context.span_id]  # the handler ran inside it
    assert process.kind is trace.SpanKind.CONSUMER
    assert (process.context.trace_id, process.parent.span_id) == \
        (context.trace_id, context.span_id)
    assert {k: process.attributes[k] for k in (
        "messaging.system", "messaging.operation.type", "messaging.destination.name",
        "messaging.consumer.group.name", "messaging.message.id")} == {
        "messaging.system": "txmsg", "messaging.operation.type": "process",
        "messaging.destination.name": topic, "messaging.consumer.group.name": "billing",
        "messaging.message.id": received.message_id}


def test_a_handler_error_is_recorded_on_its_span(service: Service, producer: Producer,
                                                 topic: str, spans) -> None:
    producer.commit(producer.send(message(topic, "boom"))["transaction_id"])
    consumer, batch = _received(service, topic)

    def fail(_: ReceivedMessage) -> None:
        raise ValueError("no")

    assert consumer.handle(batch, fail).nacked == [batch[0].offset]
    [process] = [s for s in spans.get_finished_spans() if s.name == f"process {topic}"]
    assert process.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in process.events] == ["exception"]
    assert process.parent is None  # sent outside any span: no context to continue


def test_outside_a_span_nothing_is_sent(service: Service, producer: Producer,
                                        topic: str) -> None:
    producer.commit(producer.send(message(topic, "plain"))["transaction_id"])
    _, [received] = _received(service, topic)
    assert "traceparent" not in received.properties


def test_the_asyncio_clients_carry_the_trace_as_the_sync_ones(service: Service, topic: str,
                                                               spans) -> None:
    """``AsyncProducer`` sends the current trace context, and ``AsyncConsumer.handle``
    runs each handler in a span that continues it (the same drivers' rules)."""
    import asyncio

    pytest.importorskip("httpx")
    from txmsg_client.aio import AsyncConsumer, AsyncProducer

    async def scenario() -> tuple[int, int, list[int], ReceivedMessage]:
        async with AsyncProducer(service.url, "sdk-tracing") as producer, \
                AsyncConsumer(service.url, topic, "billing") as consumer:
            await producer.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
            await consumer.subscribe(initial_position="earliest")
            tracer = trace.get_tracer("test")
            with tracer.start_as_current_span("place order") as placing:
                sent = await producer.send(message(topic, "hello"))
                await producer.commit(sent["transaction_id"])
            context = placing.get_span_context()
            [received] = await consumer.receive(10, wait_ms=5000)
            seen: list[int] = []

            async def handler(_: ReceivedMessage) -> None:
                seen.append(trace.get_current_span().get_span_context().span_id)

            assert (await consumer.handle([received], handler)).acked == [received.offset]
            return context.trace_id, context.span_id, seen, received

    trace_id, span_id, seen, received = asyncio.run(scenario())
    assert received.properties["traceparent"].split("-")[1:3] == [f"{trace_id:032x}",
                                                                  f"{span_id:016x}"]
    [process] = [s for s in spans.get_finished_spans() if s.name == f"process {topic}"]
    assert seen == [process.context.span_id]
    assert (process.context.trace_id, process.parent.span_id) == (trace_id, span_id)
