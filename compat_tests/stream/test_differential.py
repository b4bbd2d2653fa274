"""The stream protocol as RabbitMQ's stream plugin answers it: each test runs against this broker
and against a real RabbitMQ node, so its expectations are RabbitMQ's."""
from __future__ import annotations

import asyncio
import uuid

import pika
import pytest
from rstream import (AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer,
                     Properties, amqp_decoder)
from rstream.exceptions import OffsetNotFound, StreamAlreadyExists, StreamDoesNotExist

from compat_tests.stream import helpers
from compat_tests.stream.helpers import numbered, run


def client_args(target) -> dict:
    return helpers.client_args(target.stream)


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def read(target, stream: str, spec: ConsumerOffsetSpecification, count: int, decoder=None) -> list:
    return await helpers.read(target.stream, stream, spec, count, decoder, timeout=30)


def test_confirms_deduplication_and_sequence(target):
    stream = fresh("dedup")
    confirmed: list[int] = []

    async def scenario():
        async with Producer(**client_args(target)) as producer:
            await producer.create_stream(stream)
            batch = [numbered(AMQPMessage(body=b"m%d" % i), i + 1) for i in range(50)]
            await producer.send_batch(stream, batch, publisher_name="writer",
                                      on_publish_confirm=lambda s: confirmed.append(s.message_id))
            again = [numbered(AMQPMessage(body=b"again%d" % i), i + 1) for i in range(40, 50)]
            await producer.send_batch(stream, again, publisher_name="writer",
                                      on_publish_confirm=lambda s: confirmed.append(s.message_id))
            for _ in range(200):
                if len(confirmed) >= 60:
                    break
                await asyncio.sleep(0.05)
            client = await producer._get_or_create_client(stream)
            return await client.query_publisher_sequence(stream=stream, reference="writer")

    sequence = run(scenario())
    assert sequence == 50
    assert sorted(confirmed) == sorted(list(range(1, 51)) + list(range(41, 51)))  # duplicates are confirmed too
    got = run(read(target, stream, ConsumerOffsetSpecification(OffsetType.FIRST, None), 50, amqp_decoder))
    assert [o for o, _ in got] == list(range(50))
    assert [b"".join(m.body) if isinstance(m.body, list) else m.body for _, m in got][-1] == b"m49"


def test_errors_are_the_protocols_codes(target):
    stream = fresh("errs")

    async def scenario():
        async with Producer(**client_args(target)) as producer:
            await producer.create_stream(stream)
            with pytest.raises(StreamAlreadyExists):
                await producer.create_stream(stream)
            with pytest.raises(StreamDoesNotExist):
                await producer.delete_stream(fresh("missing"))
        async with Consumer(**client_args(target)) as consumer:
            await consumer.start()
            with pytest.raises(OffsetNotFound):
                await consumer.query_offset(stream, "nobody")
            with pytest.raises(StreamDoesNotExist):
                await consumer.subscribe(fresh("missing"), lambda m, c: None)
            assert await consumer.stream_exists(stream)
            assert not await consumer.stream_exists(fresh("missing"))

    run(scenario())


def test_offsets_first_offset_stored_and_last(target):
    stream = fresh("offsets")

    async def scenario():
        async with Producer(**client_args(target)) as producer:
            await producer.create_stream(stream)
            await producer.send_batch(stream, [b"x%d" % i for i in range(30)])
            await asyncio.sleep(0.5)
        async with Consumer(**client_args(target)) as consumer:
            await consumer.start()
            await consumer.store_offset(stream, "app", 11)
            await asyncio.sleep(0.3)
            return await consumer.query_offset(stream, "app")

    stored = run(scenario())
    assert stored == 11
    got = run(read(target, stream, ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1), 18))
    assert got[0] == (12, b"x12") and got[-1] == (29, b"x29")
    got = run(read(target, stream, ConsumerOffsetSpecification(OffsetType.LAST, None), 1))
    assert got[0][1].startswith(b"x")  # the last chunk's first message


def test_pika_reads_what_rstream_wrote_with_properties(target):
    """The AMQP 1.0 -> 0-9-1 conversion, compared with RabbitMQ's own."""
    stream = fresh("convert")
    host, port = target.amqp
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})

    async def scenario():
        async with Producer(**client_args(target)) as producer:
            await producer.send_wait(stream, AMQPMessage(
                body=b"payload", properties=Properties(message_id="mid-1", correlation_id="cid-1",
                                                       content_type="application/json", reply_to="replies"),
                application_properties={"tenant": "acme", "count": 3}))

    run(scenario())
    channel.basic_qos(prefetch_count=10)
    for method, props, body in channel.consume(stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=10):
        assert method is not None, "nothing delivered"
        break
    connection.close()
    assert body == b"payload"
    assert (props.message_id, props.correlation_id, props.content_type, props.reply_to) == \
        ("mid-1", "cid-1", "application/json", "replies")
    assert props.headers["tenant"] == "acme" and props.headers["count"] == 3


def test_create_takes_rabbitmqs_argument_names_without_the_prefix(target):
    """What rstream and RabbitMQ's own stream clients send when a user sets retention: the names
    without ``x-``; unknown names are left out, as RabbitMQ does."""
    stream = fresh("retention")

    async def scenario():
        async with Producer(**client_args(target)) as producer:
            await producer.create_stream(stream, arguments={
                "max-length-bytes": 20_000_000, "max-age": "3600s", "stream-max-segment-size-bytes": 500_000,
                "initial-cluster-size": 1, "queue-leader-locator": "least-leaders", "not-a-known-argument": "x"})
            await producer.send_batch(stream, [AMQPMessage(body=b"kept")])
        got = await read(target, stream, ConsumerOffsetSpecification(OffsetType.FIRST, None), 1, amqp_decoder)
        return got

    got = run(scenario())
    assert [b"".join(m.body) if isinstance(m.body, list) else m.body for _, m in got] == [b"kept"]
    host, port = target.amqp
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    try:  # the stream is a stream queue with those arguments: declaring it with them is equivalent
        connection.channel().queue_declare(stream, durable=True, arguments={
            "x-queue-type": "stream", "x-max-length-bytes": 20_000_000, "x-max-age": "3600s",
            "x-stream-max-segment-size-bytes": 500_000, "x-initial-cluster-size": 1,
            "x-queue-leader-locator": "least-leaders"})
    finally:
        connection.close()
