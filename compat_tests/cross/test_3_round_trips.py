"""Byte-exact round trips through real clients of both protocols.

AMQP -> Kafka -> AMQP: pika publishes; confluent-kafka reads the record and produces it again
(same key, value, headers, timestamp) to a second queue's topic; pika consumes that queue and
gets the original properties back. Kafka -> AMQP -> Kafka: confluent-kafka produces a record;
pika consumes it and re-publishes the delivery unchanged; a Kafka consumer reads the original
record (key, value, headers, timestamp) from the second queue's topic.
"""
from __future__ import annotations

import time

import pika
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .helpers import (TIMEOUT, connect, consume, diff_props, full_properties, publish_confirmed, unique)


def confluent_read(bootstrap, topic, n, timeout=TIMEOUT):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("rt"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < n:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
            assert time.monotonic() < deadline, f"confluent-kafka read {len(got)} of {n} from {topic!r}"
    finally:
        c.close()
    return got


def confluent_produce(bootstrap, topic, items):
    """items: (key, value, headers, timestamp_ms or None); returns delivered messages in order."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    delivered = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(msg)

    for key, value, headers, ts in items:
        kw = {"timestamp": ts} if ts is not None else {}
        p.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery, **kw)
    assert p.flush(TIMEOUT) == 0, "confluent-kafka did not deliver everything"
    assert len(delivered) == len(items)
    return delivered


@pytest.mark.parametrize("exchange", ["", "amq.direct"])
def test_amqp_kafka_amqp(cross_broker, name, exchange):
    q1, q2 = name + "-a", name + "-b"
    conn = connect(cross_broker)
    ch = conn.channel()
    rk = q1
    for q in (q1, q2):
        ch.queue_declare(q, durable=True)
    if exchange:
        rk = "rt.key"
        ch.queue_bind(q1, exchange, rk)
    sent = [(exchange, rk, full_properties(i), b"rt-body-%d\x00\xff" % i) for i in range(20)]
    sent.append((exchange, rk, pika.BasicProperties(), b""))  # no properties, empty body
    sent.append((exchange, rk, pika.BasicProperties(headers={}), b"empty table"))
    publish_confirmed(cross_broker, sent)

    records = confluent_read(cross_broker.bootstrap, q1, len(sent))
    confluent_produce(cross_broker.bootstrap, q2,
                      [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in records])

    got = consume(ch, q2, len(sent))
    for idx, ((method, props, body), (sx, srk, sprops, sbody)) in enumerate(zip(got, sent)):
        assert body == sbody, idx
        assert (method.exchange, method.routing_key) == (sx, srk), idx
        assert not diff_props(props, sprops), f"message {idx}: {diff_props(props, sprops)}"
    # and the copy's records equal the originals' records exactly
    copies = confluent_read(cross_broker.bootstrap, q2, len(sent))
    for a, b in zip(records, copies):
        assert (a.key(), a.value(), a.headers(), a.timestamp()) == (b.key(), b.value(), b.headers(), b.timestamp())
    conn.close()


def test_kafka_amqp_kafka(cross_broker, name):
    q1, q2 = name + "-a", name + "-b"
    conn = connect(cross_broker)
    ch = conn.channel()
    for q in (q1, q2):
        ch.queue_declare(q, durable=True)
    # The key is the second queue's name: re-publishing to the default exchange routes it there.
    # Header values are UTF-8 and names unique: pika decodes a non-UTF-8 long string as bytes
    # (re-encoded as a byte array) and a table as a dict (duplicates collapse), so those records
    # cannot survive a pika re-publish whatever the broker does.
    items = [
        (q2.encode(), b"plain-%d\x00\xff" % i, [("h", b"v%d" % i), ("utf8", "\u00e9\u2713".encode()), ("z", b"1")],
         1_650_000_000_123 + i)
        for i in range(10)
    ]
    items.append((q2.encode(), b"", [], 1_650_000_001_000))                    # empty value, no headers
    items.append((q2.encode(), b"nullhdr", [("n", None), ("e", b"")], 1_650_000_002_000))  # null and empty values
    produced = confluent_produce(cross_broker.bootstrap, q1, items)
    assert [m.offset() for m in produced] == list(range(len(items)))

    got = consume(ch, q1, len(items))
    for method, props, body in got:
        ch.basic_publish("", method.routing_key, body, props, mandatory=True)
    conn.process_data_events(time_limit=0)

    copies = confluent_read(cross_broker.bootstrap, q2, len(items))
    for idx, ((key, value, headers, ts), copy) in enumerate(zip(items, copies)):
        assert copy.key() == key, idx
        assert copy.value() == value, idx
        assert (copy.headers() or []) == headers, idx
        assert copy.timestamp()[1] == ts, idx
    conn.close()
