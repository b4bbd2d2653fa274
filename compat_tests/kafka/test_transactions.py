"""Kafka transactions (exactly-once) with real clients: confluent-kafka (librdkafka) and kafka-python.

Commit and abort seen exactly by read_committed and read_uncommitted consumers, open
transactions hidden below the last stable offset, fencing of a zombie producer, the
coordinator's timeout abort, offsets committed inside a transaction, state across a broker
restart, and a consume-transform-produce process killed with SIGKILL many times
(``TXN_KILLS``, default 20) whose output must be exactly its input transformed.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.txn_pipeline import transform

ROOT = Path(__file__).resolve().parents[2]
TXN_KILLS = int(os.environ.get("TXN_KILLS", "20"))
PIPELINE_RECORDS = int(os.environ.get("TXN_PIPELINE_RECORDS", "4000"))


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def txn_producer(bootstrap: str, tid: str, **conf) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **conf})
    producer.init_transactions(30)
    return producer


def read_all(bootstrap: str, topic: str, isolation: str, expect: int | None = None, partitions: int = 1,
             idle_s: float = 3.0) -> list[bytes]:
    """Values of the topic from the start, read until ``expect`` values (or 90 s) or, without
    ``expect``, until ``idle_s`` pass without any.

    The idle clock starts once the consumer has reached the partition leader (a watermark
    query), so a slow first connection (a broker just restarted) does not read as "nothing
    there". With ``expect`` the reader waits for the values: Kafka writes commit markers after
    EndTxn has answered, so committed records become readable a moment after the commit.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    for p in range(partitions):
        _reach_leader(consumer, TopicPartition(topic, p))
    values, last = [], time.monotonic()
    deadline = last + 90
    try:
        while ((time.monotonic() - last < idle_s) if expect is None else
               (len(values) < expect and time.monotonic() < deadline)):
            for m in consumer.consume(500, timeout=0.5):
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                values.append(m.value())
                last = time.monotonic()
    finally:
        consumer.close()
    return values


def _reach_leader(consumer, tp: TopicPartition, seconds: float = 60) -> None:
    """A watermark query answered by the partition's leader. Just after a restart there may be
    none yet (Apache Kafka keeps a restarted broker fenced until it has caught up): NOT_LEADER
    and the like are asked again."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            consumer.get_watermark_offsets(tp, timeout=30)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() and exc.args[0].code() not in (
                    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART) or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def test_commit_and_abort_counted_exactly(bootstrap):
    topic = unique_name("txn")
    create_topic(bootstrap, topic)
    producer = txn_producer(bootstrap, unique_name("tid"))
    for kind, count, commit in (("c1", 100, True), ("a1", 40, False), ("c2", 30, True), ("a2", 7, False)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, value=f"{kind}-{i}".encode())
        producer.flush(30)  # on the broker before the end, so an abort has written data to drop
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    committed = [f"c1-{i}".encode() for i in range(100)] + [f"c2-{i}".encode() for i in range(30)]
    assert read_all(bootstrap, topic, "read_committed") == committed
    everything = read_all(bootstrap, topic, "read_uncommitted")
    assert len(everything) == 177 and set(committed) < set(everything)
    assert everything.count(b"a1-0") == 1 and everything.count(b"a2-6") == 1


def test_open_transaction_is_invisible_to_read_committed(bootstrap):
    topic = unique_name("txn-open")
    create_topic(bootstrap, topic)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"before")
    plain.flush(30)
    producer = txn_producer(bootstrap, unique_name("tid"))
    producer.begin_transaction()
    producer.produce(topic, value=b"in-txn")
    producer.flush(30)
    plain.produce(topic, value=b"after-open")  # not transactional, but above the open transaction's start
    plain.flush(30)
    assert read_all(bootstrap, topic, "read_committed", idle_s=2) == [b"before"]
    assert read_all(bootstrap, topic, "read_uncommitted", expect=3) == [b"before", b"in-txn", b"after-open"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                         "isolation.level": "read_committed"})
    try:
        # ListOffsets latest under read_committed is the last stable offset.
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1] in (1, 3)
    finally:
        consumer.close()
    producer.commit_transaction(30)
    assert read_all(bootstrap, topic, "read_committed", expect=3) == [b"before", b"in-txn", b"after-open"]


def test_second_producer_fences_the_first(bootstrap):
    topic, tid = unique_name("txn-fence"), unique_name("tid")
    create_topic(bootstrap, topic)
    zombie = txn_producer(bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(30)
    successor = txn_producer(bootstrap, tid)  # bumps the epoch, aborts the zombie's open transaction
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-2")
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal(), raised.value
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(30)
    assert read_all(bootstrap, topic, "read_committed", expect=1) == [b"successor"]


def test_transaction_timeout_aborts_and_fences(bootstrap):
    topic = unique_name("txn-timeout")
    create_topic(bootstrap, topic)
    producer = txn_producer(bootstrap, unique_name("tid"), **{"transaction.timeout.ms": 2000,
                                                               "message.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, value=b"abandoned")
    producer.flush(30)
    time.sleep(4)  # the coordinator checks every second
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert read_all(bootstrap, topic, "read_committed", idle_s=2) == []
    assert read_all(bootstrap, topic, "read_uncommitted", expect=1) == [b"abandoned"]


def test_offsets_in_a_transaction_apply_on_commit_only(bootstrap):
    source, sink, group = unique_name("txn-src"), unique_name("txn-sink"), unique_name("txn-group")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    producer = txn_producer(bootstrap, unique_name("tid"))
    try:
        producer.begin_transaction()
        producer.produce(sink, value=b"x")
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 42)], consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset < 0
        producer.begin_transaction()
        producer.produce(sink, value=b"y")
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 7)], consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 7
    finally:
        consumer.close()


def test_kafka_python_transactions(bootstrap):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTopicPartition

    topic = unique_name("txn-kp")
    create_topic(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("tid"))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic, value=f"keep-{i}".encode())
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, value=f"drop-{i}".encode())
    producer.flush()
    producer.abort_transaction()
    producer.close()

    def consume(isolation: str, expect: int) -> list[bytes]:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values, deadline = [], time.monotonic() + 15
        while time.monotonic() < deadline and len(values) < expect:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        time.sleep(1)
        for records in consumer.poll(timeout_ms=500).values():
            values += [r.value for r in records]
        consumer.close()
        return values

    assert consume("read_committed", 20) == [f"keep-{i}".encode() for i in range(20)]
    assert len(consume("read_uncommitted", 30)) == 30
    # And librdkafka reads kafka-python's transactions the same way.
    assert read_all(bootstrap, topic, "read_committed", expect=20) == [f"keep-{i}".encode() for i in range(20)]


def test_transactions_survive_a_restart(kafka_broker):
    bootstrap = kafka_broker.bootstrap
    topic, tid = unique_name("txn-restart"), unique_name("tid")
    create_topic(bootstrap, topic)
    producer = txn_producer(bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"left-open")
    producer.flush(30)
    bootstrap = kafka_broker.restart()
    assert read_all(bootstrap, topic, "read_committed", idle_s=2) == [b"committed"]
    successor = txn_producer(bootstrap, tid)  # the reloaded coordinator aborts the open transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"next")
    successor.commit_transaction(30)
    assert read_all(bootstrap, topic, "read_committed", expect=2) == [b"committed", b"next"]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_pipeline_killed_repeatedly_produces_exactly_once(bootstrap, client):
    partitions = 2
    source, sink = unique_name(f"ctp-in-{client}"), unique_name(f"ctp-out-{client}")
    group, tid = unique_name("ctp-group"), unique_name("ctp-tid")
    create_topic(bootstrap, source, partitions)
    create_topic(bootstrap, sink, partitions)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    inputs = [f"rec-{i:06d}".encode() for i in range(PIPELINE_RECORDS)]
    for i, value in enumerate(inputs):
        plain.produce(source, key=str(i % 17).encode(), value=value, partition=i % partitions)
    plain.flush(30)

    argv = [sys.executable, "-m", "compat_tests.kafka.txn_pipeline", client, bootstrap, source, sink, group, tid,
            str(partitions)]
    rng = random.Random(7)
    kills = 0
    for _ in range(TXN_KILLS):
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        time.sleep(rng.uniform(0.5, 2.5))
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace")
            assert proc.returncode == 0, out[-3000:]
            break  # it finished before we got to kill it
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        kills += 1
    final = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    assert kills == TXN_KILLS, f"only {kills} kills happened before the pipeline finished"

    out = read_all(bootstrap, sink, "read_committed", expect=len(inputs), partitions=partitions)
    expected = sorted(transform(v) for v in inputs)
    duplicates = len(out) - len(set(out))
    assert duplicates == 0, f"{duplicates} duplicate output record(s) after {kills} kills"
    assert sorted(out) == expected, f"{len(set(expected) - set(out))} missing after {kills} kills"
