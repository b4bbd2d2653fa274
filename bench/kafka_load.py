"""Kafka load generator, one run in its own process: ``python -m bench.kafka_load SPEC-JSON``.

SPEC: ``{"bootstrap": "host:port", "topic": str, "messages": int, "size": int, "acks": "1"|"all",
"consume": bool, "partitions": 1, "client": "confluent"|"kafka-python", "pid": broker pid or 0,
"topic_config": {name: value} (CreateTopics configs, e.g. ``flush.messages``)}``.
Creates the topic, produces ``messages`` records of ``size`` bytes (linger 5 ms, default batch
size), waits for every delivery, then (if ``consume``) reads them all back with an assigned
consumer (no group join), and deletes the topic. With ``pid`` it also reports the broker's CPU
microseconds per produced (and consumed) message (from /proc). Prints one JSON line.

``"mode": "latency"`` instead produces ``rate`` records a second for ``seconds`` (linger 1 ms),
the send time in the value, while a consumer in the same process reads them; it reports
p50/p99/max of receive minus send time after a 0.5 s warm-up.
"""
from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def _create_topic(admin: AdminClient, topic: str, partitions: int = 1, config: dict | None = None) -> None:
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                            config=config or {})], operation_timeout=30)
    for f in futures.values():
        f.result(30)
    # wait until metadata shows a leader
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
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
        while True:
            try:
                produce_(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # librdkafka's queue is full (1 GB of 1 KB records): wait for deliveries
                producer.poll(0.05)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if left or failures:
        raise RuntimeError(f"{left} undelivered, {len(failures)} failed: {failures[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, messages: int, partitions: int = 1) -> float:
    # fetch.queue.backoff.ms: librdkafka pauses fetching for 1 s (its default) whenever its local
    # queue is full (64 MB); a broker that fills it fast then measured slower than one that does
    # not (10 KB consume alternated between ~160 and ~600 MB/s on the same code). 10 ms keeps the
    # pause without letting one of them dominate a short run.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False, "fetch.queue.backoff.ms": 10})
    got = 0
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + 300
    while got < messages:
        batch = consumer.consume(num_messages=min(10000, messages - got), timeout=1.0)
        for m in batch:
            if m.error() is not None:
                raise KafkaException(m.error())
        got += len(batch)
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumed {got}/{messages} in 300 s")
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def kp_produce(bootstrap: str, topic: str, messages: int, size: int, acks: str) -> float:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1 if acks == "1" else "all", linger_ms=5)
    producer.partitions_for(topic)  # connect before the clock starts
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(messages):
        producer.send(topic, value)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    producer.close()
    return elapsed


def kp_consume(bootstrap: str, topic: str, messages: int, partitions: int = 1) -> float:
    from kafka import KafkaConsumer, TopicPartition as KTP
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    parts = [KTP(topic, p) for p in range(partitions)]
    got = 0
    start = time.perf_counter()
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    deadline = time.monotonic() + 300
    while got < messages:
        for records in consumer.poll(timeout_ms=1000, max_records=10000).values():
            got += len(records)
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumed {got}/{messages} in 300 s")
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def latency(bootstrap: str, topic: str, rate: float, seconds: float, size: int) -> dict:
    """Produce at a fixed rate while one consumer reads; one thread, librdkafka does the I/O."""
    import struct
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 1,
                         "enable.idempotence": False})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{topic}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer.list_topics(topic, timeout=10)
    pad, stamp, unpack = b"x" * max(size - 8, 0), struct.Struct(">d").pack, struct.Struct(">d").unpack_from
    total = int(rate * seconds)
    clock = time.perf_counter
    sent = got = 0
    latencies = []
    t0 = clock()
    deadline = t0 + seconds + 60
    while got < total:
        now = clock()
        due = min(int((now - t0) * rate), total) - sent
        for _ in range(due):
            producer.produce(topic, stamp(clock()) + pad)
        sent += max(due, 0)
        producer.poll(0)
        for m in consumer.consume(num_messages=10000, timeout=0.001):
            if m.error() is not None:
                raise KafkaException(m.error())
            sent_at = unpack(m.value())[0]
            if sent_at - t0 >= 0.5:
                latencies.append(clock() - sent_at)
            got += 1
        if clock() > deadline:
            raise RuntimeError(f"latency run: {got}/{total} read 60 s after the last produce")
    offered = sent / (clock() - t0)
    producer.flush(10)
    consumer.close()
    latencies.sort()
    n = len(latencies)
    return {"rate": rate, "achieved_rate": offered, "measured": n, "p50_ms": latencies[n // 2] * 1000,
            "p99_ms": latencies[min(n - 1, int(0.99 * n))] * 1000, "max_ms": latencies[-1] * 1000}


def small_writes(bootstrap: str, topic: str, seconds: float, size: int, producers: int = 10) -> dict:
    """``producers`` threads, each its own librdkafka producer (linger.ms=0, acks=all) sending one
    record and waiting for its acknowledgement before the next: every record is its own request
    and its own durable write. Returns records acknowledged per second over ``seconds``."""
    import threading
    value = b"x" * size
    counts = [0] * producers
    stop = time.monotonic() + seconds
    errors: list = []

    def run(i: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": False, "max.in.flight.requests.per.connection": 1})
        failed = []
        while time.monotonic() < stop and not failed:
            producer.produce(topic, value,
                             on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
            producer.flush(30)
            counts[i] += 1
        errors.extend(failed)
    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} records failed: {errors[:3]}")
    elapsed = time.monotonic() - started
    return {"records": sum(counts), "seconds": elapsed, "msgs_s": sum(counts) / elapsed}


def main(spec: dict) -> dict:
    from bench.peers import cpu_seconds
    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
    topic, n = spec["topic"], spec.get("messages", 0)
    partitions = spec.get("partitions", 1)
    if spec.get("produce", True):
        _create_topic(admin, topic, partitions, spec.get("topic_config"))
    out = {"topic": topic, "messages": n, "size": spec["size"], "acks": spec.get("acks"), "partitions": partitions}
    if spec.get("mode") == "latency":
        out.update(latency(spec["bootstrap"], topic, spec["rate"], spec["seconds"], spec["size"]))
    elif spec.get("mode") == "small":
        out.update(small_writes(spec["bootstrap"], topic, spec["seconds"], spec["size"], spec.get("producers", 10)))
    else:
        kp = spec.get("client") == "kafka-python"
        pid = spec.get("pid") or 0
        cpu = cpu_seconds(pid) if pid else 0.0
        if spec.get("produce", True):  # False: read a topic an earlier run filled (and kept)
            p = (kp_produce if kp else produce)(spec["bootstrap"], topic, n, spec["size"], spec["acks"])
            out.update(produce_s=p, produce_msgs_s=n / p)
            if pid:
                out["cpu_us_per_msg"] = (cpu_seconds(pid) - cpu) / n * 1e6
        if spec.get("consume"):
            cpu = cpu_seconds(pid) if pid else 0.0
            c = (kp_consume if kp else consume)(spec["bootstrap"], topic, n, partitions)
            out.update(consume_s=c, consume_msgs_s=n / c)
            if pid:
                out["consume_cpu_us_per_msg"] = (cpu_seconds(pid) - cpu) / n * 1e6
    if spec.get("keep"):
        return out
    try:
        for f in admin.delete_topics([topic], operation_timeout=30).values():
            f.result(60)
    except Exception as exc:  # a peer without DeleteTopics still measured fine
        out["delete_error"] = str(exc)
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
