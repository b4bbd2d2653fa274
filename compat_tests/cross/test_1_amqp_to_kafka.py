"""pika publishes (confirms, every property, every header type); kafka-python reads the queue's
topic non-destructively and sees README's record form; then pika consumes everything back."""
from __future__ import annotations

import time

from .helpers import (consume, connect, env_int, expected_record_headers, full_properties, kafka_read,
                      diff_props, message_count, publish_confirmed)

N = env_int("CROSS_MESSAGES", 2000)
BOUND_KEY = "cross.bound.key"


def messages_for(queue: str, n: int):
    """Even messages through the default exchange (key = queue name), odd ones through
    amq.direct with a bound routing key (so the record carries ``amqp.exchange``)."""
    out = []
    for i in range(n):
        exchange, rk = ("", queue) if i % 2 == 0 else ("amq.direct", BOUND_KEY)
        out.append((exchange, rk, full_properties(i), b"body-%d-" % i + bytes(range(256)) * (i % 3)))
    return out


def check_records(records, sent, queue):
    assert len(records) == len(sent)
    offsets = [r.offset for r in records]
    assert offsets == list(range(len(sent))), f"offsets not dense from 0: {offsets[:10]}..."
    for r, (exchange, rk, props, body) in zip(records, sent):
        assert r.topic == queue and r.partition == 0
        assert r.value == body, f"offset {r.offset}: value differs"
        assert r.key == rk.encode(), f"offset {r.offset}: key {r.key!r} != routing key {rk!r}"
        got = [(k, v) for k, v in r.headers]
        want = expected_record_headers(props, exchange)
        assert got == want, f"offset {r.offset}: record headers\n got  {got}\n want {want}"


def check_deliveries(deliveries, sent, queue):
    assert len(deliveries) == len(sent)
    for idx, ((method, props, body), (exchange, rk, sprops, sbody)) in enumerate(zip(deliveries, sent)):
        assert body == sbody, f"delivery {idx}: body differs"
        assert (method.exchange, method.routing_key) == (exchange, rk), f"delivery {idx}"
        assert not method.redelivered, f"delivery {idx} flagged redelivered"
        assert not diff_props(props, sprops), f"delivery {idx}: {diff_props(props, sprops)}"


def test_pika_publish_kafka_reads_then_pika_consumes(cross_broker, name):
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    ch.queue_bind(name, "amq.direct", BOUND_KEY)
    sent = messages_for(name, N)

    seconds = publish_confirmed(cross_broker, sent)
    print(f"\n{N} confirmed pika publishes: {seconds:.2f}s")
    assert message_count(ch, name) == N

    began = time.monotonic()
    records = kafka_read(cross_broker.bootstrap, name, N)
    print(f"kafka-python read {N} records: {time.monotonic() - began:.2f}s")
    check_records(records, sent, name)

    # the Kafka read consumed nothing: AMQP still has every message
    assert message_count(ch, name) == N
    began = time.monotonic()
    deliveries = consume(ch, name, N)
    print(f"pika consumed {N} deliveries: {time.monotonic() - began:.2f}s")
    check_deliveries(deliveries, sent, name)
    assert message_count(ch, name) == 0
    conn.close()

    # ... and the destructive AMQP read left the topic alone: a new group reads it all again
    again = kafka_read(cross_broker.bootstrap, name, N)
    check_records(again, sent, name)
