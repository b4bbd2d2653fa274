"""Deliveries go out before the group-commit fsync (as RabbitMQ delivers persistent messages
before they are on disk); only the publisher confirm waits for it. So a consumer can ack a
message the disk never got, the ack floor checkpoint can record that ack, and a crash can then
lose the message's bytes. After such a crash the queue must not treat the *next* messages
published at those re-used offsets as acked: this test makes the crash happen for real (kill -9,
then the unsynced tail of the segment files cut off, as a power loss would) and checks that.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pika

from tests.brokerproc import start_broker

QUEUE = "acked-before-fsync"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _segment_sizes(data_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in data_dir.rglob("*.log") if p.is_file()}


def _floor(data_dir: Path) -> int | None:
    floors = json.loads((data_dir / "amqp" / "ack-floors.json").read_text())
    for key, doc in floors.items():
        if QUEUE in key:
            return doc.get("floor")
    return None


def _consume(channel, count: int, timeout: float = 10) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    for method, _, body in channel.consume(QUEUE, inactivity_timeout=0.5):
        if method is not None:
            got.append(body)
            channel.basic_ack(method.delivery_tag)
        if len(got) >= count or time.monotonic() > deadline:
            break
    channel.cancel()
    return got


def test_acks_of_messages_lost_in_a_crash_do_not_swallow_later_messages(tmp_path):
    data_dir = tmp_path / "data"
    broker = start_broker(data_dir)
    host, port = broker.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    confirmed = conn.channel()
    confirmed.confirm_delivery()
    confirmed.queue_declare(QUEUE, durable=True)
    for i in range(10):
        confirmed.basic_publish("", QUEUE, b"durable-%d" % i, PERSISTENT)  # returns once fsynced
    durable_sizes = _segment_sizes(data_dir)
    plain = conn.channel()  # no confirms: these 5 may be delivered and acked before any fsync
    for i in range(5):
        plain.basic_publish("", QUEUE, b"unsynced-%d" % i, PERSISTENT)
    assert len(_consume(conn.channel(), 15)) == 15
    deadline = time.monotonic() + 10
    while _floor(data_dir) != 15 and time.monotonic() < deadline:
        time.sleep(0.1)  # the ack-floor checkpoint runs on the AMQP tick
    assert _floor(data_dir) == 15, "the checkpoint never recorded the acks: the crash below would prove nothing"
    broker.stop(signal.SIGKILL)

    cut = 0
    for path, size in _segment_sizes(data_dir).items():
        if path in durable_sizes and size > durable_sizes[path]:
            os.truncate(path, durable_sizes[path])  # what was never fsynced is gone
            cut += 1
    assert cut, "no segment grew after the confirmed publishes"

    broker = start_broker(data_dir)
    try:
        host, port = broker.address("amqp")
        conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
        channel = conn.channel()
        channel.confirm_delivery()
        assert channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count == 0
        for i in range(5):
            channel.basic_publish("", QUEUE, b"after-%d" % i, PERSISTENT)
        assert channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count == 5
        assert _consume(conn.channel(), 5) == [b"after-%d" % i for i in range(5)]
        conn.close()
    finally:
        broker.stop()
