"""Exactly-once publishing: broker-side de-duplication (``x-message-deduplication``), with pika.

Gateway only: stock RabbitMQ has no de-duplication (the community plugin whose argument names
we follow is not in Debian's package), so there is no RabbitMQ expectation to compare with.
A publisher that retries after a lost confirm gets its confirm, and the message is stored once,
also when the retry comes after a clean restart or a crash of the broker.
"""
from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from .conftest import GatewayBroker
from .helpers import bodies, connect


@pytest.fixture(scope="module")
def amqp_broker(tmp_path_factory):
    broker = GatewayBroker(tmp_path_factory.mktemp("amqp-dedup") / "data")
    try:
        yield broker
    finally:
        broker.stop()


def _channel(broker):
    conn = connect(broker)
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def _publish(ch, exchange, routing_key, body, message_id=None, headers=None):
    # With confirms on, pika's basic_publish returns once the broker acked (raises on a nack).
    ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(message_id=message_id, headers=headers,
                                                                       delivery_mode=2))


def test_queue_drops_a_retried_message_id(amqp_broker, name):
    conn, ch = _channel(amqp_broker)
    ch.queue_declare(name, durable=True, arguments={"x-message-deduplication": True})
    for body, mid in ((b"first", "m-1"), (b"second", "m-2"), (b"retry of first", "m-1"), (b"no id", None),
                      (b"no id again", None)):
        _publish(ch, "", name, body, mid)
    assert bodies(ch, name) == [b"first", b"second", b"no id", b"no id again"]
    conn.close()


def test_key_from_a_named_header(amqp_broker, name):
    conn, ch = _channel(amqp_broker)
    ch.queue_declare(name, arguments={"x-message-deduplication": "order-id"})
    _publish(ch, "", name, b"o1", "same-id", {"order-id": 1})
    _publish(ch, "", name, b"o2", "same-id", {"order-id": 2})
    _publish(ch, "", name, b"o1 again", "other", {"order-id": 1})
    _publish(ch, "", name, b"no header", "x")
    assert bodies(ch, name) == [b"o1", b"o2", b"no header"]
    conn.close()


def test_window_by_time_and_by_size(amqp_broker, name):
    conn, ch = _channel(amqp_broker)
    ch.queue_declare(name + "-ttl", arguments={"x-message-deduplication": True, "x-cache-ttl": 800})
    _publish(ch, "", name + "-ttl", b"a", "a")
    _publish(ch, "", name + "-ttl", b"a dup", "a")
    time.sleep(1.2)
    _publish(ch, "", name + "-ttl", b"a after the window", "a")
    assert bodies(ch, name + "-ttl") == [b"a", b"a after the window"]
    ch.queue_declare(name + "-size", arguments={"x-message-deduplication": True, "x-cache-size": 2})
    for mid in ("a", "b", "c", "a", "c"):
        _publish(ch, "", name + "-size", mid.encode(), mid)
    assert bodies(ch, name + "-size") == [b"a", b"b", b"c", b"a"]  # "a" had been pushed out by "c"
    conn.close()


def test_consumed_messages_still_count(amqp_broker, name):
    conn, ch = _channel(amqp_broker)
    ch.queue_declare(name, arguments={"x-message-deduplication": True})
    _publish(ch, "", name, b"job", "job-1")
    assert bodies(ch, name) == [b"job"]  # consumed and acked
    _publish(ch, "", name, b"job", "job-1")  # the publisher retries: the consumer must not do it twice
    assert bodies(ch, name) == []
    conn.close()


def test_exchange_deduplicates_before_routing(amqp_broker, name):
    conn, ch = _channel(amqp_broker)
    ch.exchange_declare(name, "fanout", arguments={"x-message-deduplication": True})
    for suffix in ("-a", "-b"):
        ch.queue_declare(name + suffix)
        ch.queue_bind(name + suffix, name)
    for body, mid in ((b"one", "1"), (b"one again", "1"), (b"two", "2")):
        _publish(ch, name, "", body, mid)
    assert bodies(ch, name + "-a") == [b"one", b"two"]
    assert bodies(ch, name + "-b") == [b"one", b"two"]
    conn.close()


@pytest.mark.parametrize("stop", ["restart", "kill"])
def test_window_survives_the_broker(amqp_broker, name, stop):
    conn, ch = _channel(amqp_broker)
    ch.queue_declare(name, durable=True, arguments={"x-message-deduplication": True})
    ch.exchange_declare(name + "-x", "direct", durable=True, arguments={"x-message-deduplication": True})
    ch.queue_declare(name + "-via-x", durable=True)
    ch.queue_bind(name + "-via-x", name + "-x", "k")
    _publish(ch, "", name, b"before", "m-1")
    _publish(ch, name + "-x", "k", b"before", "x-1")
    conn.close()
    if stop == "restart":
        amqp_broker.restart()
    else:
        amqp_broker.kill()
        amqp_broker.start()
    conn, ch = _channel(amqp_broker)
    _publish(ch, "", name, b"retry", "m-1")
    _publish(ch, "", name, b"after", "m-2")
    _publish(ch, name + "-x", "k", b"retry", "x-1")
    _publish(ch, name + "-x", "k", b"after", "x-2")
    assert bodies(ch, name) == [b"before", b"after"]
    assert bodies(ch, name + "-via-x") == [b"before", b"after"]
    conn.close()


@pytest.mark.parametrize("arguments", [{"x-message-deduplication": 5},
                                       {"x-message-deduplication": True, "x-cache-size": 0},
                                       {"x-message-deduplication": True, "x-cache-ttl": "1s"}])
def test_bad_arguments_are_refused(amqp_broker, name, arguments):
    conn = connect(amqp_broker)
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as raised:
        ch.queue_declare(name, arguments=arguments)
    assert raised.value.reply_code == 406 and "x-" in raised.value.reply_text
    conn.close()
