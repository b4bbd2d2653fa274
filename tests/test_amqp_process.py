"""AMQP behaviour of the broker process that RabbitMQ shows only under its own settings.

(The behaviour shared with RabbitMQ is in compat_tests/amqp, which also runs against RabbitMQ.)
"""
from __future__ import annotations

import socket
import time

import pika
import pytest

from tests.brokerproc import start_broker


@pytest.fixture
def broker_with(tmp_path):
    started = []

    def start(**env):
        broker = start_broker(tmp_path / f"data{len(started)}", env={k: str(v) for k, v in env.items()})
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def test_disk_alarm_blocks_publishers_with_connection_blocked(broker_with):
    broker = broker_with(GATEWAY_DISK_FREE_LIMIT_MB=10**9)  # a petabyte: the alarm is on at once
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    blocked = []
    connection.add_on_connection_blocked_callback(lambda conn, frame: blocked.append(frame.method.reason))
    channel = connection.channel()
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"x")
    deadline = time.monotonic() + 10
    while not blocked and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.2)
    assert blocked == ["low on disk"]
    assert "resource alarm set" in broker.output()
    # A blocked connection is not read any more (as in RabbitMQ), so a polite close would wait
    # for the alarm to clear; drop the socket instead.
    connection._impl._transport._sock.close()


def test_silent_client_is_dropped_after_two_missed_heartbeats(broker_with):
    broker = broker_with()
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port, heartbeat=1))
    sock = connection._impl._transport._sock  # stop reading and writing: a client that hangs
    started = time.monotonic()
    sock.settimeout(10)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    assert time.monotonic() - started < 6
    assert "missed heartbeats from client" in broker.output()


def test_quorum_queues_have_rabbitmq_4s_default_delivery_limit_of_20(broker_with):
    """RabbitMQ 4 gives every quorum queue a delivery limit of 20 (the suite's RabbitMQ 3.10 has
    none, so this runs against our broker only); -1 turns it off."""
    broker = broker_with()
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dead")
    channel.queue_bind("dead", "dlx")
    channel.queue_declare("poisoned", durable=True, arguments={"x-queue-type": "quorum",
                                                               "x-dead-letter-exchange": "dlx"})
    channel.queue_declare("unlimited", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": -1})
    for queue in ("poisoned", "unlimited"):
        channel.basic_publish("", queue, b"again")
    seen = []
    for _ in range(21):
        method, props, _ = channel.basic_get("poisoned")
        seen.append(props.headers["x-delivery-count"])
        channel.basic_reject(method.delivery_tag, requeue=True)
    assert seen == list(range(21))
    assert channel.basic_get("poisoned")[0] is None
    method, props, body = channel.basic_get("dead", auto_ack=True)
    assert body == b"again" and props.headers["x-death"][0]["reason"] == "delivery_limit"
    for _ in range(30):
        method, props, _ = channel.basic_get("unlimited")
        channel.basic_reject(method.delivery_tag, requeue=True)
    assert props.headers["x-delivery-count"] == 29 and channel.basic_get("unlimited")[0] is not None
    connection.close()
