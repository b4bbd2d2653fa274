"""A disk that fills up mid-write: writes are refused cleanly, nothing is corrupted or lost (issue 19).

The broker's data directory is on a small tmpfs of its own (root only: CI and sessions run as
root), with the disk-free alarm's threshold at 0 so that the writes themselves hit ENOSPC.
A ballast file takes part of the space; producers at full speed fill the rest. Then:

- Kafka: the refused batches get KAFKA_STORAGE_ERROR (no retries here, so the client shows
  the code); the broker raises its disk alarm at once, so AMQP publishers get
  ``connection.blocked``; no traceback in the broker's log;
- removing the ballast gives the space back: the alarm clears, ``connection.unblocked``, and
  produce works again;
- every segment file holds whole, valid batches with contiguous offsets (nothing torn), the
  broker stops cleanly, and after a restart every acknowledged record is there once and no
  refused one is.
"""
from __future__ import annotations

import os
import subprocess
import time

import pika
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.brokerproc import start_broker
from wire.records import iter_batches

SIZE_MB = 40
BALLAST_MB = 20  # freed later: more than the 16 MB the alarm waits for after a failed write


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root (CI and sessions run as root)")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _produce_until_refused(bootstrap: str, topic: str, first: int, limit: int):
    acked, refused, other = set(), set(), {}

    def report(err, msg):
        value = msg.value().split(b"|", 1)[0].decode()
        if err is None:
            acked.add(value)
        elif err.code() == KafkaError.KAFKA_STORAGE_ERROR:
            refused.add(value)
        else:
            other[value] = err.name()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                         "linger.ms": 5, "batch.size": 256 << 10, "message.timeout.ms": 30000})
    payload = b"x" * 8000
    for i in range(first, first + limit):
        value = f"id-{i:07d}".encode()
        while True:
            try:
                producer.produce(topic, value + b"|" + payload, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if refused and i % 200 == 0:
            break
    producer.flush(60)
    return acked, refused, other


def _read(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-full-check", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        got.append(msg.value().split(b"|", 1)[0].decode())
    consumer.close()
    return got


@pytest.mark.timeout(240)
def test_full_disk_refuses_writes_cleanly_then_recovers_without_loss(small_fs):
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\0" * (BALLAST_MB << 20))
    data = small_fs / "data"
    broker = start_broker(data, "--disk-free-limit-mb", "0")
    try:
        bootstrap = broker.addresses["kafka"]
        host, port = broker.address("amqp")
        amqp = pika.BlockingConnection(pika.ConnectionParameters(host, port))
        blocked, unblocked = [], []
        amqp.add_on_connection_blocked_callback(lambda _c, frame: blocked.append(frame.method.reason))
        amqp.add_on_connection_unblocked_callback(lambda _c, frame: unblocked.append(True))
        ch = amqp.channel()
        ch.queue_declare("disk-full", durable=True)

        acked, refused, other = _produce_until_refused(bootstrap, "filling", 0, 20_000)
        assert refused, f"the disk never filled: {len(acked)} acknowledged, other errors {set(other.values())}"
        assert not other, f"refusals other than KAFKA_STORAGE_ERROR: {set(other.values())}"

        ch.basic_publish("", "disk-full", b"while full", pika.BasicProperties(delivery_mode=2))
        deadline = time.monotonic() + 15
        while not blocked and time.monotonic() < deadline:
            amqp.process_data_events(time_limit=0.5)
        assert blocked and "disk" in blocked[0], f"no connection.blocked for the full disk: {blocked}"

        ballast.unlink()  # space comes back: the alarm clears within a tick or two
        deadline = time.monotonic() + 20
        while not unblocked and time.monotonic() < deadline:
            amqp.process_data_events(time_limit=0.5)
        assert unblocked, "no connection.unblocked once space was back"
        amqp.close()
        after, refused_after, other_after = _produce_until_refused(bootstrap, "filling", 1_000_000, 200)
        assert len(after) == 200 and not refused_after and not other_after, \
            f"produce after space came back: {len(after)} acknowledged, {len(refused_after)} refused, {other_after}"
        assert broker.stop() == 0
        out = broker.output()
        assert "Traceback" not in out and "internal error" not in out, out[-3000:]
        assert "produce refused: cannot append" in out

        expected = 0
        for segment in sorted((data / "filling-0").glob("*.log")):
            batches = list(iter_batches(segment.read_bytes()))  # raises on a torn or corrupt batch
            for _pos, header in batches:
                assert header.base_offset == expected, f"{segment.name}: offset gap at {expected}"
                expected = header.last_offset + 1
        assert expected == len(acked) + len(after)

        broker = start_broker(data, "--disk-free-limit-mb", "0")
        stored = _read(broker.addresses["kafka"], "filling")
        assert len(stored) == len(set(stored)), "a record is stored twice"
        missing = (acked | after) - set(stored)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        kept = refused & set(stored)
        assert not kept, f"{len(kept)} refused records were stored, e.g. {sorted(kept)[:5]}"
    finally:
        broker.stop()
