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


def _hold_one_unacked(host, port, queue: str, arguments: dict | None = None):
    """A consumer that takes one message and never acks it; returns (connection, channel, closed-by info)."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    channel.queue_declare(queue, arguments=arguments or {})
    channel.basic_publish("", queue, b"slow")
    channel.basic_qos(prefetch_count=1)
    got = []
    channel.basic_consume(queue, lambda ch, method, props, body: got.append(body))
    return connection, channel, got


@pytest.mark.parametrize("where", ["setting", "queue argument"])
def test_consumer_timeout_closes_the_channel_and_returns_the_message(broker_with, where):
    """RabbitMQ's consumer_timeout (and x-consumer-timeout, 3.12+): a delivery left unacked past
    the timeout closes its channel with 406; the message goes back to the queue."""
    broker = broker_with(GATEWAY_CONSUMER_TIMEOUT_MS=1500) if where == "setting" else broker_with()
    host, port = broker.address("amqp")
    connection, channel, got = _hold_one_unacked(host, port, "slowpoke",
                                                 None if where == "setting" else {"x-consumer-timeout": 1500})
    reasons = []
    channel._impl.add_on_close_callback(lambda ch, reason: reasons.append(reason))  # pika's Channel API
    started = time.monotonic()
    while not reasons and time.monotonic() - started < 10:
        connection.process_data_events(time_limit=0.05)
    closed_after = time.monotonic() - started
    assert got == [b"slow"] and reasons and 1.5 <= closed_after < 4.0, (closed_after, reasons)
    assert isinstance(reasons[0], pika.exceptions.ChannelClosedByBroker)
    assert reasons[0].reply_code == 406 and "timed out. Timeout value used: 1500 ms" in reasons[0].reply_text
    other = connection.channel()
    method, _, body = other.basic_get("slowpoke", auto_ack=True)
    assert body == b"slow" and method.redelivered
    connection.close()


def test_consumer_timeout_spares_a_consumer_that_acks(broker_with):
    broker = broker_with(GATEWAY_CONSUMER_TIMEOUT_MS=1000)
    host, port = broker.address("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    channel.queue_declare("steady")
    acked = []

    def on_message(ch, method, props, body):
        ch.basic_ack(method.delivery_tag)
        acked.append(body)
    channel.basic_consume("steady", on_message)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        channel.basic_publish("", "steady", b"m")
        connection.process_data_events(time_limit=0.2)
    assert channel.is_open and len(acked) >= 10
    connection.close()
