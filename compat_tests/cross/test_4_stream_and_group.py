"""A stream queue (pika) and a Kafka consumer group (kafka-python) read the same records with
the same offsets: the stream delivery's ``x-stream-offset`` header is the Kafka offset."""
from __future__ import annotations

import time

from confluent_kafka import Producer

from .helpers import TIMEOUT, connect, consume, env_int, kafka_read

M = env_int("CROSS_STREAM_RECORDS", 5000)


def produce_fast(bootstrap, topic, m):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": True})
    errors = []
    offsets = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(m):
        while True:
            try:
                p.produce(topic, key=b"key-%d" % (i % 97), value=b"stream-record-%07d" % i,
                          headers=[("i", b"%d" % i)], on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:5]
    assert sorted(offsets) == list(range(m))


def test_stream_queue_and_consumer_group_same_offsets(cross_broker, name):
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    began = time.monotonic()
    produce_fast(cross_broker.bootstrap, name, M)
    print(f"\nconfluent-kafka produced {M} records: {time.monotonic() - began:.2f}s")

    began = time.monotonic()
    stream = consume(ch, name, M, prefetch=1000, arguments={"x-stream-offset": "first"}, ack_every=500)
    print(f"pika stream consumer read {M}: {time.monotonic() - began:.2f}s")
    began = time.monotonic()
    group = kafka_read(cross_broker.bootstrap, name, M, timeout=TIMEOUT)
    print(f"kafka-python group read {M}: {time.monotonic() - began:.2f}s")

    from_stream = [(p.headers["x-stream-offset"], m.routing_key.encode(), b) for m, p, b in stream]
    from_group = [(r.offset, r.key, r.value) for r in group]
    assert len(from_stream) == len(from_group) == M
    for s, g in zip(from_stream, from_group):
        assert s == g, f"stream {s} != group {g}"
    assert [o for o, _, _ in from_group] == list(range(M))
    conn.close()
