"""Producing the Spark suite's records with real clients, and reading them back with kafka-python."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pika
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

STEP_MS = 10
DAY_MS = 86_400_000


def around_last_midnight(count: int) -> int:
    """A first timestamp that puts half of ``count`` records before the last UTC midnight, half after
    (the archive's date partitions are exercised), recent enough for the default 7-day retention."""
    return int(time.time() * 1000) // DAY_MS * DAY_MS - count * STEP_MS // 2


@dataclass
class Produced:
    """What went in: (topic, partition, offset) -> (key, value, timestamp ms, headers or None)."""

    rows: dict = field(default_factory=dict)

    def add(self, topic, partition, offset, key, value, ts, headers):
        assert (topic, partition, offset) not in self.rows
        self.rows[(topic, partition, offset)] = (key, value, ts, headers or None)

    def of_topic(self, topic: str) -> dict:
        return {k: v for k, v in self.rows.items() if k[0] == topic}


def kafka_record(i: int, first_ms: int) -> tuple:
    """Record ``i``: mostly JSON values with keys and headers, plus a null key, a null value and no headers now and then."""
    key = None if i % 50 == 0 else b"k%04d" % (i % 997)
    value = None if i % 1000 == 999 else json.dumps({"i": i, "name": f"n{i % 13}"}).encode()
    headers = [("seq", str(i).encode()), ("empty", b"")] if i % 3 else []
    return key, value, first_ms + i * STEP_MS, headers


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def produce_kafka(bootstrap: str, topic: str, count: int, produced: Produced, *, partitions: int = 2,
                  start: int = 0, first_ms: int) -> None:
    """``count`` records with kafka-python, half gzip-compressed, spread over the partitions."""
    for codec, lo, hi in ((None, start, start + count // 2), ("gzip", start + count // 2, start + count)):
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=256 * 1024,
                                 compression_type=codec, max_request_size=4 * 1024 * 1024)
        sent = []
        for i in range(lo, hi):
            key, value, ts, headers = kafka_record(i, first_ms)
            sent.append((producer.send(topic, key=key, value=value, partition=i % partitions,
                                       timestamp_ms=ts, headers=headers), key, value, ts, headers))
        producer.flush(60)
        for future, key, value, ts, headers in sent:
            meta = future.get(30)
            produced.add(topic, meta.partition, meta.offset, key, value, ts, headers)
        producer.close(10)


def publish_amqp(host: str, port: int, queue: str, count: int) -> list[bytes]:
    """``count`` persistent messages through a direct exchange into ``queue``, with confirms; their bodies."""
    params = pika.ConnectionParameters(host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"),
                                       connection_attempts=1, socket_timeout=5, blocked_connection_timeout=30)
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        exchange = f"{queue}-x"
        channel.exchange_declare(exchange, "direct", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, routing_key="spark-rk")
        bodies = []
        for i in range(count):
            body = json.dumps({"i": i, "name": "amqp"}).encode()
            channel.basic_publish(exchange, "spark-rk", body, pika.BasicProperties(
                content_type="application/json", delivery_mode=2, headers={"n": i, "src": "pika"}))
            bodies.append(body)
        return bodies
    finally:
        connection.close()


def read_kafka_python(bootstrap: str, topic: str) -> list[tuple]:
    """Every record of ``topic`` as Spark's Kafka source would show it, read with kafka-python."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_bytes=8 * 1024 * 1024, max_partition_fetch_bytes=4 * 1024 * 1024)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        rows, deadline = [], time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            assert time.monotonic() < deadline, f"kafka-python read of {topic} timed out"
            for tp, records in consumer.poll(timeout_ms=500, max_records=50_000).items():
                for r in records:
                    if r.offset < ends[tp]:
                        rows.append((r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type,
                                     [(k, v) for k, v in r.headers] or None))
        return sorted(rows, key=lambda r: (r[3], r[4]))
    finally:
        consumer.close()


def spark_rows(df) -> list[tuple]:
    """A Kafka-source-shaped DataFrame as plain tuples comparable with :func:`read_kafka_python`."""
    def b(x):
        return None if x is None else bytes(x)

    out = []
    for r in df.selectExpr("key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts",
                           "timestampType", "headers").toLocalIterator():
        headers = None if r.headers is None else [(h.key, b(h.value)) for h in r.headers]
        out.append((b(r.key), b(r.value), r.topic, r.partition, r.offset, r.ts, r.timestampType, headers))
    return sorted(out, key=lambda r: (r[3], r[4]))
