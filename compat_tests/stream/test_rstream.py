"""rstream (the RabbitMQ Streams client on PyPI) against the stream listener, with pika and Kafka
clients reading and writing the same streams."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pika
import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from rstream import (AMQPMessage, ConfirmationStatus, Consumer, ConsumerOffsetSpecification, OffsetType, Producer,
                     Properties, RouteType, SuperStreamConsumer, SuperStreamCreationOption, SuperStreamProducer,
                     amqp_decoder)
from rstream.exceptions import OffsetNotFound, StreamDoesNotExist

from compat_tests.stream.helpers import client_args, numbered, read, run
from tests.brokerproc import ROOT

COUNT = 10_000


def stream_args(broker) -> dict:
    return client_args(broker.address("stream"))


def pika_channel(broker):
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    return connection, connection.channel()


def kafka_values(broker, topic: str, count: int, partitions=None) -> list[bytes]:
    host, port = broker.address("kafka")
    consumer = KafkaConsumer({"bootstrap.servers": f"{host}:{port}", "group.id": f"g-{uuid.uuid4()}",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            assert message.error() is None, message.error()
            out.append(message)
    consumer.close()
    return out


async def consume(broker, stream: str, spec: ConsumerOffsetSpecification, count: int) -> list:
    return await read(broker.address("stream"), stream, spec, count, amqp_decoder)


def test_rstream_publish_confirm_dedup_and_three_readers(broker):
    stream = "orders-stream"
    connection, channel = pika_channel(broker)
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    confirmed: list[int] = []

    async def produce():
        def on_confirm(status: ConfirmationStatus):
            assert status.is_confirmed, status
            confirmed.append(status.message_id)

        async with Producer(**stream_args(broker)) as producer:
            messages = [numbered(AMQPMessage(body=f"m{i}".encode(),
                                             properties=Properties(message_id=f"id-{i}", content_type="text/plain"),
                                             application_properties={"n": i}), i + 1) for i in range(COUNT)]
            for start in range(0, COUNT, 500):
                await producer.send_batch(stream, messages[start:start + 500], publisher_name="p1",
                                          on_publish_confirm=on_confirm)
            deadline = time.monotonic() + 60
            while len(confirmed) < COUNT and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            # a publisher that lost its confirms publishes again: confirmed, not stored twice
            again = [numbered(AMQPMessage(body=f"m{i}".encode()), i + 1) for i in range(COUNT - 100, COUNT)]
            await producer.send_batch(stream, again, publisher_name="p1", on_publish_confirm=on_confirm)
            while len(confirmed) < COUNT + 100 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

    run(produce())
    assert sorted(set(confirmed)) == list(range(1, COUNT + 1)) and len(confirmed) == COUNT + 100

    # the named publisher's sequence survives: a new producer under the same name continues after it
    async def sequence():
        async with Producer(**stream_args(broker)) as producer:
            client = await producer._get_or_create_client(stream)
            return await client.query_publisher_sequence(stream=stream, reference="p1")
    assert run(sequence()) == COUNT

    # rstream from first: every message once, in order, with its properties
    got = run(consume(broker, stream, ConsumerOffsetSpecification(OffsetType.FIRST, None), COUNT))
    assert [o for o, _ in got[:COUNT]] == list(range(COUNT))
    assert [bytes(m.body) if not isinstance(m.body, list) else b"".join(m.body) for _, m in got[:3]] == \
        [b"m0", b"m1", b"m2"]
    first = got[0][1]
    assert first.properties.message_id in ("id-0", b"id-0")
    assert first.application_properties[b"n" if b"n" in first.application_properties else "n"] == 0

    # pika with x-stream-offset: the same messages in the same order, properties mapped
    channel.basic_qos(prefetch_count=1000)
    bodies = []
    for method, props, body in channel.consume(stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=10):
        assert method is not None, f"pika stopped after {len(bodies)}"
        bodies.append(body)
        if len(bodies) == 1:
            assert props.message_id == "id-0" and props.content_type == "text/plain"
            assert props.headers["n"] == 0
        channel.basic_ack(method.delivery_tag)
        if len(bodies) == COUNT:
            break
    channel.cancel()
    assert bodies == [f"m{i}".encode() for i in range(COUNT)]

    # a Kafka consumer of the stream's topic
    records = kafka_values(broker, stream, COUNT)
    assert [m.value() for m in records] == bodies
    assert [m.offset() for m in records] == list(range(COUNT))
    connection.close()

    # rstream from a stored offset: the consumer stores where it got to, a new one resumes after it
    async def store_and_query():
        async with Consumer(**stream_args(broker)) as consumer:
            await consumer.start()
            await consumer.store_offset(stream, "billing", 4999)
            await asyncio.sleep(0.3)
            return await consumer.query_offset(stream, "billing")
    stored = run(store_and_query())
    assert stored == 4999
    got = run(consume(broker, stream, ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1), COUNT - 5000))
    assert [o for o, _ in got] == list(range(5000, COUNT))

    # rstream from a timestamp: the first message at or after it (the Kafka records' timestamps say which)
    stamps = [m.timestamp()[1] for m in records]
    when = stamps[COUNT // 2]
    expected = next(i for i, t in enumerate(stamps) if t >= when)
    got = run(consume(broker, stream, ConsumerOffsetSpecification(OffsetType.TIMESTAMP, when), COUNT - expected))
    assert [o for o, _ in got] == list(range(expected, COUNT))


def test_stored_offset_and_timestamp(broker):
    stream = "offsets-stream"

    async def scenario():
        async with Producer(**stream_args(broker)) as producer:
            await producer.create_stream(stream)
            await producer.send_batch(stream, [f"a{i}".encode() for i in range(100)])
            await asyncio.sleep(1.2)
            middle_ms = int(time.time() * 1000)
            await asyncio.sleep(0.2)
            await producer.send_wait(stream, b"late")
            await producer.send_batch(stream, [f"b{i}".encode() for i in range(9)])
        async with Consumer(**stream_args(broker)) as consumer:
            await consumer.start()
            with pytest.raises(OffsetNotFound):
                await consumer.query_offset(stream, "reader")
            await consumer.store_offset(stream, "reader", 49)
            await asyncio.sleep(0.3)
            return middle_ms, await consumer.query_offset(stream, "reader")

    middle_ms, stored = run(scenario())
    assert stored == 49
    got = run(read(broker.address("stream"), stream, ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1), 60))
    assert [o for o, _ in got] == list(range(50, 110))
    assert got[0][1] == b"a50" and got[-1][1] == b"b8"
    got = run(read(broker.address("stream"), stream, ConsumerOffsetSpecification(OffsetType.TIMESTAMP, middle_ms), 10))
    assert got[0] == (100, b"late")
    # the stored offset is a consumer-group offset Kafka tools see (next offset = stored + 1)
    out = subprocess.run([sys.executable, "-m", "gateway", "groups", "describe", "reader", "--json",
                          "--bootstrap", "%s:%d" % broker.address("kafka")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["offsets"] == [{"topic": stream, "partition": 0, "committed": 50, "end_offset": 110,
                                                  "lag": 60}]


def test_kafka_and_amqp_publishes_reach_stream_consumers(broker):
    stream = "mixed-stream"
    connection, channel = pika_channel(broker)
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    channel.basic_publish("", stream, b"from-pika", pika.BasicProperties(content_type="application/json",
                                                                           headers={"k": "v"}))
    connection.close()
    host, port = broker.address("kafka")
    producer = KafkaProducer({"bootstrap.servers": f"{host}:{port}"})
    producer.produce(stream, b"from-kafka", key=b"key-1", headers=[("h", b"x")])
    assert producer.flush(10) == 0
    got = run(consume(broker, stream, ConsumerOffsetSpecification(OffsetType.FIRST, None), 2))
    first, second = got[0][1], got[1][1]
    assert b"".join(first.body) if isinstance(first.body, list) else first.body == b"from-pika"
    assert first.properties.content_type in (b"application/json", "application/json")
    assert {(k.decode() if isinstance(k, bytes) else k): v for k, v in first.application_properties.items()}["k"] \
        in ("v", b"v")
    body = b"".join(second.body) if isinstance(second.body, list) else second.body
    assert body == b"from-kafka"


def test_errors_name_the_problem(broker):
    async def scenario():
        async with Consumer(**stream_args(broker)) as consumer:
            await consumer.start()
            with pytest.raises(StreamDoesNotExist):
                await consumer.subscribe("no-such-stream", lambda m, c: None)
            assert not await consumer.stream_exists("no-such-stream")
    run(scenario())


def test_super_stream_is_a_partitioned_topic(broker):
    name = "invoices"
    sent = 300

    async def produce():
        async def routing_key(message):
            return str(message.application_properties["id"])

        async with SuperStreamProducer(**stream_args(broker), super_stream=name, routing=RouteType.Hash,
                                       routing_extractor=routing_key,
                                       super_stream_creation_option=SuperStreamCreationOption(3)) as producer:
            for i in range(sent):
                await producer.send(AMQPMessage(body=f"inv-{i}".encode(), application_properties={"id": i}))
            await asyncio.sleep(1)

    run(produce())
    kafka = "%s:%d" % broker.address("kafka")
    out = subprocess.run([sys.executable, "-m", "gateway", "topics", "list", "--json", "--bootstrap", kafka],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    topics = {t["name"]: t for t in json.loads(out.stdout)}
    assert topics[name]["partitions"] == 3
    records = kafka_values(broker, name, sent)
    assert sorted(m.value() for m in records) == sorted(f"inv-{i}".encode() for i in range(sent))
    assert len({m.partition() for m in records}) == 3  # hash routing spread them

    # AMQP publishers through the super stream's exchange land in its partitions too
    connection, channel = pika_channel(broker)
    channel.confirm_delivery()
    channel.basic_publish(name, "1", b"through-exchange")  # binding key "1": partition stream invoices-1
    connection.close()
    records = kafka_values(broker, name, sent + 1)
    extra = [m for m in records if m.value() == b"through-exchange"]
    assert len(extra) == 1 and extra[0].partition() == 1

    # and rstream's super-stream consumer reads all partitions
    got: list = []

    async def consume_all():
        done = asyncio.Event()

        async def on_message(message, context):
            got.append(message)
            if len(got) >= sent + 1:
                done.set()

        async with SuperStreamConsumer(**stream_args(broker), super_stream=name) as consumer:
            await consumer.start()
            await consumer.subscribe(on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await asyncio.wait_for(done.wait(), 60)

    run(consume_all())
    assert len(got) == sent + 1
