"""``x-stream-initial-offset`` (RabbitMQ 4.4): the offset a new stream's first message gets.

Set through each door that declares a stream: AMQP 0-9-1 ``queue.declare`` (pika), the AMQP 1.0
``/management`` node (rabbitmq-amqp-python-client), the HTTP API, and the stream protocol's
Create (rstream passes its arguments through, spelled ``stream-initial-offset`` as RabbitMQ's
stream clients send it). While the stream is empty ``first``, ``last`` and ``next`` all resolve
to that offset; a redeclaration with another value and a value that is not a non-negative
integer up to 2^62 - 1 are refused with 406 PRECONDITION_FAILED.

This broker only: the differential target's RabbitMQ (Debian's 3.10) has no such argument (it
would ignore it and start at 0).
"""
from __future__ import annotations

import uuid

import pika
import pytest
import requests
from rabbitmq_amqp_python_client import (
    AddressHelper, AMQPMessagingHandler, Converter, Environment, OffsetSpecification, OutcomeState,
    StreamConsumerOptions, ValidationCodeException,
)
from rabbitmq_amqp_python_client.qpid.proton import Message
from rstream import ConsumerOffsetSpecification, OffsetType, Producer
from rstream.exceptions import PreconditionFailed

from compat_tests.stream.helpers import client_args, read, run

ARG = "x-stream-initial-offset"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def channel(broker):
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, heartbeat=0))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def _stream_args(offset) -> dict:
    return {"x-queue-type": "stream", ARG: offset}


def _offsets_read(channel, queue: str, count: int, spec=None) -> list[tuple[int, bytes]]:
    """(x-stream-offset, body) of the first ``count`` deliveries of a 0-9-1 consumer from ``spec``."""
    channel.basic_qos(prefetch_count=count)
    got = []
    arguments = {} if spec is None else {"x-stream-offset": spec}
    for method, props, body in channel.consume(queue, arguments=arguments, inactivity_timeout=10):
        assert method is not None, f"only {len(got)} of {count} deliveries came"
        got.append((props.headers["x-stream-offset"], body))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    return got


def test_amqp091_declare_starts_the_stream_there_and_first_next_last_agree(broker, channel):
    queue = _name("io91")
    channel.queue_declare(queue, durable=True, arguments=_stream_args(1000))
    channel.queue_declare(queue, durable=True, arguments=_stream_args(1000))  # the same value: equivalent
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}".encode())
    assert _offsets_read(channel, queue, 3, "first") == [(1000, b"m0"), (1001, b"m1"), (1002, b"m2")]
    assert _offsets_read(channel, queue, 1, 500) == [(1000, b"m0")]  # below the start: from the start
    assert _offsets_read(channel, queue, 1, "last") == [(1002, b"m2")]


def test_amqp091_refuses_invalid_values_and_another_value_on_redeclare(broker):
    host, port = broker.address("amqp")
    queue = _name("bad91")
    cases = [(-1, "value_negative"), ("first", "unacceptable_type"), (1 << 62, "value_too_large")]
    for value, reason in cases:
        connection = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, heartbeat=0))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            connection.channel().queue_declare(queue, durable=True, arguments=_stream_args(value))
        assert refused.value.reply_code == 406
        assert f"invalid arg '{ARG}' for queue '{queue}'" in refused.value.reply_text and reason in \
            refused.value.reply_text, refused.value.reply_text
        connection.close()
    connection = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, heartbeat=0))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments=_stream_args((1 << 62) - 1))  # the largest allowed
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        connection.channel().queue_declare(queue, durable=True, arguments=_stream_args(7))
    assert refused.value.reply_code == 406 and f"inequivalent arg '{ARG}'" in refused.value.reply_text
    connection.close()


class _Read(AMQPMessagingHandler):
    def __init__(self, count: int):
        super().__init__()
        self.count, self.got = count, []

    def on_amqp_message(self, event) -> None:
        if len(self.got) >= self.count:
            return
        self.got.append((event.message.annotations["x-stream-offset"], Converter.bytes_to_string(event.message.body)))
        self.delivery_context.accept(event)
        if len(self.got) >= self.count:
            raise _Enough()


class _Enough(Exception):
    pass


def test_amqp10_management_declare_and_a_receiver_without_an_offset_filter(broker):
    host, port = broker.address("amqp")
    env = Environment(f"amqp://guest:guest@{host}:{port}/")
    conn = env.connection()
    conn.dial()
    management = conn.management()
    stream = _name("io10")
    try:
        body = {"durable": True, "arguments": _stream_args(250)}
        management.request(body, AddressHelper.queue_address(stream), "PUT", [200])
        with pytest.raises(ValidationCodeException):  # another value: 409 (RabbitMQ's precondition-failed)
            management.request({"durable": True, "arguments": _stream_args(9)}, AddressHelper.queue_address(stream),
                               "PUT", [200])
        with pytest.raises(ValidationCodeException):
            management.request({"durable": True, "arguments": _stream_args("next")},
                               AddressHelper.queue_address(_name("bad10")), "PUT", [200])
        assert management.queue_info(stream).arguments[ARG] == 250

        publisher = conn.publisher(AddressHelper.queue_address(stream))
        assert publisher.publish(Message(body=Converter.string_to_bytes("a"))).remote_state == OutcomeState.ACCEPTED
        publisher.close()
        first = _Read(1)
        consumer = conn.consumer(AddressHelper.queue_address(stream), message_handler=first,
                                 consumer_options=StreamConsumerOptions(offset_specification=OffsetSpecification.first))
        try:
            consumer.run()
        except _Enough:
            pass
        consumer.close()
        assert first.got == [(250, "a")]
    finally:
        management.close()
        conn.close()
        env.close()


def test_http_api_declare(broker):
    stream = _name("iohttp")
    url = f"{broker.http_url}/api/queues/%2F/{stream}"
    answer = requests.put(url, json={"durable": True, "arguments": _stream_args(40)}, auth=("guest", "guest"),
                          timeout=10)
    assert answer.status_code in (201, 204), answer.text
    refused = requests.put(f"{url}-bad", json={"durable": True, "arguments": _stream_args(-5)},
                           auth=("guest", "guest"), timeout=10)
    assert refused.status_code == 400 and ARG in refused.text, refused.text
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, heartbeat=0))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("", stream, b"h")
    assert _offsets_read(channel, stream, 1, "first") == [(40, b"h")]
    connection.close()


def test_stream_protocol_create_takes_stream_initial_offset(broker):
    stream = _name("iostream")

    async def scenario():
        async with Producer(**client_args(broker.address("stream"))) as producer:
            await producer.create_stream(stream, arguments={"stream-initial-offset": 77})
            await producer.send_batch(stream, [b"s0", b"s1"])
            for bad in (-1, "first", 1 << 62):  # Create answers precondition-failed
                with pytest.raises(PreconditionFailed):
                    await producer.create_stream(_name("bad"), arguments={"stream-initial-offset": bad})
        got = await read(broker.address("stream"), stream, ConsumerOffsetSpecification(OffsetType.FIRST), 2)
        return [(offset, bytes(m)) for offset, m in got]

    assert run(scenario()) == [(77, b"s0"), (78, b"s1")]
