"""Zero-copy Fetch: on a plaintext connection the records of a Fetch answer go from the segment
files to the socket with os.sendfile (gateway.netutil.write_parts). What the clients read must be
exactly what was produced, with small, large and mixed batches, many partitions in one answer, a
consumer that reads slowly (the socket fills and the rest of an answer is copied), and the
broker's /metrics must show that the bytes really took the sendfile path."""
from __future__ import annotations

import hashlib
import re
import time
import urllib.request

from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer

from compat_tests.conftest import unique_name
from compat_tests.kafka.test_confluent_kafka import create_topic


def _fetched(broker) -> dict[str, int]:
    text = urllib.request.urlopen(f"http://{broker.process.addresses['http']}/metrics", timeout=10).read().decode()
    found = dict(re.findall(r'gateway_kafka_fetch_record_bytes_total\{path="(\w+)"\} ([0-9.e+]+)', text))
    return {path: int(float(value)) for path, value in found.items()}


def _produce(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[bytes, bytes]]]:
    failed = []
    # idempotent: on a loaded machine a produce request can time out and be retried, and without
    # sequence numbers the retry would store its batch twice
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                         "enable.idempotence": True,
                         "message.max.bytes": 2_000_000,
                         "on_delivery": lambda err, msg: err is not None and failed.append(err)})
    sent: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(partitions)}
    for i in range(3000):
        size = (100, 1000, 10_000, 100_000)[i % 4] if i % 7 else 300_000
        key, value = b"k%05d" % i, (b"%06d" % i) * (size // 6)
        partition = i % partitions
        producer.produce(topic, value, key, partition=partition)
        sent[partition].append((key, value))
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not failed, f"{len(failed)} records not delivered, e.g. {failed[0]}"
    return sent


def _digest(records: dict[int, list[tuple[bytes, bytes]]]) -> dict[int, list[tuple[bytes, str]]]:
    """Each record as its key and a hash of its value: a mismatch then prints in a few lines (pytest's
    diff of 800 MB of values ran past the test's time-out)."""
    return {p: [(k, f"{len(v)}:{hashlib.blake2b(v, digest_size=8).hexdigest()}") for k, v in values]
            for p, values in records.items()}


def _same(got, sent) -> str:
    """'' when got equals sent, else where the first difference is in each partition."""
    got, sent = _digest(got), _digest(sent)
    differences = []
    for p in sent:
        mine, theirs = got.get(p, []), sent[p]
        if mine != theirs:
            first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            differences.append(f"partition {p}: read {len(mine)} of {len(theirs)} records, first difference "
                               f"at #{first}: read {mine[first] if first < len(mine) else None}, "
                               f"sent {theirs[first] if first < len(theirs) else None}")
    return "; ".join(differences)


def test_consumers_read_exactly_what_was_produced_through_sendfile(kafka_broker):
    topic = unique_name("zero-copy")
    partitions = 4
    # batches of up to 1 MB of 300 KB records pass Kafka's default 1 MB limit (message.max.bytes
    # 1048588): Kafka refuses them (MESSAGE_TOO_LARGE, which flush() does not report), so the
    # topic takes 4 MB batches
    create_topic(kafka_broker.bootstrap, topic, partitions=partitions, config={"max.message.bytes": "4194304"})
    sent = _produce(kafka_broker.bootstrap, topic, partitions)
    total = sum(len(v) for values in sent.values() for _, v in values)
    # the sendfile counters are our /metrics; on Apache Kafka (no such endpoint, and its own
    # zero-copy path) only what the clients read back is checked
    metrics = kafka_broker.process is not None
    before = _fetched(kafka_broker) if metrics else {}

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": unique_name("zc"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 2 << 20})
    consumer.subscribe([topic])
    got: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 120
    while sum(map(len, got.values())) < 3000 and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=1.0):
            assert message.error() is None, message.error()
            got[message.partition()].append((message.key(), message.value()))
    consumer.close()
    assert not (difference := _same(got, sent)), f"confluent-kafka read something else than was produced: {difference}"

    # kafka-python, reading slowly: answers pile up in the socket, the rest of each is copied
    slow = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, group_id=unique_name("zc-slow"),
                         auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_bytes=8 << 20,
                         max_partition_fetch_bytes=2 << 20, receive_buffer_bytes=32 * 1024,
                         consumer_timeout_ms=20_000)
    got = {p: [] for p in range(partitions)}
    for message in slow:
        got[message.partition].append((message.key, message.value))
        if len(got[message.partition]) % 200 == 0:
            time.sleep(0.05)
        if sum(map(len, got.values())) >= 3000:
            break
    slow.close()
    assert not (difference := _same(got, sent)), f"kafka-python read something else than was produced: {difference}"

    if not metrics:
        return
    after = _fetched(kafka_broker)
    by_sendfile = after["sendfile"] - before.get("sendfile", 0)
    copied = after["copied"] - before.get("copied", 0)
    assert by_sendfile + copied >= 2 * total, (by_sendfile, copied, total)
    assert by_sendfile >= total, f"only {by_sendfile:,} of {2 * total:,} record bytes went out with sendfile"
