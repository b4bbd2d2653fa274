"""Stream-protocol features past publish and consume: filtering, single active consumer, and
what survives a kill -9 (publisher sequences, stored offsets, super streams)."""
from __future__ import annotations

import asyncio
import signal

from rstream import (Consumer, ConsumerOffsetSpecification, FilterConfiguration, OffsetSpecification, OffsetType, Producer,
                     SuperStreamCreationOption, SuperStreamProducer)

from compat_tests.stream.helpers import run
from compat_tests.stream.test_rstream import stream_args
from tests.brokerproc import start_broker


def test_filtering_sends_only_matching_chunks(broker):
    stream = "filtered"

    async def scenario():
        async def region(message) -> str:
            return bytes(message).split(b":")[0].decode()

        async with Producer(**stream_args(broker), filter_value_extractor=region) as producer:
            await producer.create_stream(stream)
            # separate chunks (filtering is per chunk, as with RabbitMQ's Bloom filters)
            await producer.send_batch(stream, [b"ca:%d" % i for i in range(50)])
            await asyncio.sleep(0.5)
            await producer.send_batch(stream, [b"ny:%d" % i for i in range(50)])
            await asyncio.sleep(0.5)
            await producer.send_batch(stream, [b"ca:late"])
        got: list = []
        done = asyncio.Event()

        async def on_message(message, context):
            got.append(message)
            if message == b"ca:late":
                done.set()

        async with Consumer(**stream_args(broker)) as consumer:
            await consumer.start()
            await consumer.subscribe(stream, on_message, offset_specification=ConsumerOffsetSpecification(
                OffsetType.FIRST), filter_input=FilterConfiguration(
                values_to_filter=["ca"], predicate=lambda m: True, match_unfiltered=False))  # no client-side filter:
            # what arrives is what the broker chose to send
            await asyncio.wait_for(done.wait(), 30)
        return got

    got = run(scenario())
    assert got == [b"ca:%d" % i for i in range(50)] + [b"ca:late"]


def test_single_active_consumer_fails_over(broker):
    stream = "sac"

    async def scenario():
        async with Producer(**stream_args(broker)) as producer:
            await producer.create_stream(stream)
            await producer.send_batch(stream, [b"x%d" % i for i in range(10)])
        seen = {"a": [], "b": []}

        async def listener(active, context):
            return OffsetSpecification(OffsetType.FIRST, 0)

        def callback(name):
            async def on_message(message, context):
                seen[name].append(message)
            return on_message

        props = {"single-active-consumer": "true", "name": "app"}
        a = Consumer(**stream_args(broker))
        b = Consumer(**stream_args(broker))
        await a.start()
        await b.start()
        sub_a = await a.subscribe(stream, callback("a"), properties=props, subscriber_name="app",
                                  consumer_update_listener=listener)
        await b.subscribe(stream, callback("b"), properties=props, subscriber_name="app",
                          consumer_update_listener=listener)
        await asyncio.sleep(1.5)
        first = dict((k, list(v)) for k, v in seen.items())
        await a.unsubscribe(sub_a)  # b takes over and starts where its listener says
        await asyncio.sleep(1.5)
        await a.close()
        await b.close()
        return first, seen

    first, seen = run(scenario())
    assert len(first["a"]) == 10 and first["b"] == []
    assert len(seen["b"]) == 10


def test_publisher_sequence_offsets_and_super_streams_survive_kill(tmp_path):
    process = start_broker(tmp_path / "data")
    try:
        async def before():
            async with Producer(**stream_args(process)) as producer:
                await producer.create_stream("durable-s")
                await producer.send_batch("durable-s", [b"m%d" % i for i in range(100)], publisher_name="w")
                await producer.send_wait("durable-s", b"m100", publisher_name="w")
            async with SuperStreamProducer(**stream_args(process), super_stream="ledger",
                                           routing_extractor=lambda m: "k",
                                           super_stream_creation_option=SuperStreamCreationOption(2)):
                pass
            async with Consumer(**stream_args(process)) as consumer:
                await consumer.start()
                await consumer.store_offset("durable-s", "reader", 41)
                await asyncio.sleep(0.5)
        run(before())
        process.stop(signal.SIGKILL)
        process = start_broker(tmp_path / "data")

        async def after():
            async with Producer(**stream_args(process)) as producer:
                client = await producer._get_or_create_client("durable-s")
                sequence = await client.query_publisher_sequence(stream="durable-s", reference="w")
                partitions = await client.partitions("ledger")
            async with Consumer(**stream_args(process)) as consumer:
                await consumer.start()
                offset = await consumer.query_offset("durable-s", "reader")
            return sequence, partitions, offset

        assert run(after()) == (101, ["ledger-0", "ledger-1"], 41)
    finally:
        process.stop()
