"""rbfly (the other RabbitMQ Streams client on PyPI, Cython) against the stream listener."""
from __future__ import annotations


import pika
from rbfly.streams import Offset, streams_client

from compat_tests.stream.helpers import run


def test_rbfly_publishes_and_subscribes(broker):
    host, port = broker.address("stream")
    client = streams_client(f"rabbitmq-stream://guest:guest@{host}:{port}/")

    async def scenario():
        await client.create_stream("rbfly-s")
        async with client.publisher("rbfly-s", name="rb") as publisher:
            for i in range(100):
                await publisher.send(f"text-{i}")  # AMQP 1.0, an amqp-value string body
            for i in range(100):
                await publisher.send(b"bin-%d" % i)  # AMQP 1.0, a data section
        got = []
        async for message in client.subscribe("rbfly-s", offset=Offset.FIRST, timeout=10):
            got.append(message)
            if len(got) == 200:
                break
        await client.disconnect()
        return got

    got = run(scenario())
    assert got[:2] == ["text-0", "text-1"] and got[100:102] == [b"bin-0", b"bin-1"] and len(got) == 200

    # pika reads the data-section messages' bodies as they were sent
    amqp_host, amqp_port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(amqp_host, amqp_port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)
    bodies = []
    for method, _, body in channel.consume("rbfly-s", arguments={"x-stream-offset": 100}, inactivity_timeout=10):
        assert method is not None
        bodies.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(bodies) == 100:
            break
    connection.close()
    assert bodies == [b"bin-%d" % i for i in range(100)]
