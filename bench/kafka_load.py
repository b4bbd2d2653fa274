"""Kafka load generator, one run in its own process: ``python -m bench.kafka_load SPEC-JSON``.

SPEC: ``{"bootstrap": "host:port", "topic": str, "messages": int, "size": int, "acks": "1"|"all",
"consume": bool}``. Creates the topic (1 partition), produces ``messages`` records of ``size``
bytes with confluent-kafka (linger.ms=5, default batch size), waits for every delivery, then
(if ``consume``) reads them all back with an assigned consumer (no group join), and deletes the
topic. Prints one JSON line: produce/consume seconds and msgs/s.
"""
from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def _create_topic(admin: AdminClient, topic: str) -> None:
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], operation_timeout=10)
    for f in futures.values():
        f.result(30)
    # wait until metadata shows a leader
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and 0 in t.partitions and t.partitions[0].leader >= 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leader after 30 s")


def produce(bootstrap: str, topic: str, messages: int, size: int, acks: str) -> float:
    failures = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "delivery.report.only.error": True, "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": False})
    value = b"x" * size
    produce_ = producer.produce
    producer.list_topics(topic, timeout=10)  # connect before the clock starts
    start = time.perf_counter()
    for _ in range(messages):
        try:
            produce_(topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            produce_(topic, value, on_delivery=on_delivery)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if left or failures:
        raise RuntimeError(f"{left} undelivered, {len(failures)} failed: {failures[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, messages: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})
    got = 0
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 300
    while got < messages:
        batch = consumer.consume(num_messages=10000, timeout=1.0)
        for m in batch:
            if m.error() is not None:
                raise KafkaException(m.error())
        got += len(batch)
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumed {got}/{messages} in 300 s")
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def main(spec: dict) -> dict:
    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
    topic, n = spec["topic"], spec["messages"]
    _create_topic(admin, topic)
    out = {"topic": topic, "messages": n, "size": spec["size"], "acks": spec["acks"]}
    p = produce(spec["bootstrap"], topic, n, spec["size"], spec["acks"])
    out.update(produce_s=p, produce_msgs_s=n / p)
    if spec.get("consume"):
        c = consume(spec["bootstrap"], topic, n)
        out.update(consume_s=c, consume_msgs_s=n / c)
    try:
        for f in admin.delete_topics([topic], operation_timeout=10).values():
            f.result(30)
    except Exception as exc:  # a peer without DeleteTopics still measured fine
        out["delete_error"] = str(exc)
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
