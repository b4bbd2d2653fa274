"""Delayed messages: exchanges of type ``x-delayed-message`` (RabbitMQ's delayed-message plugin,
which Debian's rabbitmq-server does not ship, so these run against our broker only).

A message published with ``x-delay: N`` is routed (as the exchange's ``x-delayed-type``) N ms
after it was published: not before, and also when the broker restarts or is killed meanwhile.
"""
from __future__ import annotations

import time

import pika
import pytest

from tests.brokerproc import start_broker

from .conftest import GatewayBroker
from .helpers import connect, unique


@pytest.fixture(scope="module")
def amqp_broker(tmp_path_factory):
    broker = GatewayBroker(tmp_path_factory.mktemp("amqp-delayed") / "data")
    try:
        yield broker
    finally:
        broker.stop()


def _setup(ch, kind: str = "direct", key: str = "k") -> tuple[str, str]:
    x, q = unique("delayed"), unique("q")
    ch.exchange_declare(x, "x-delayed-message", durable=True, arguments={"x-delayed-type": kind})
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, x, key)
    return x, q


def _publish(ch, x: str, body: bytes, delay: int | None, key: str = "k") -> None:
    headers = {"x-delay": delay} if delay is not None else {}
    ch.basic_publish(x, key, body, pika.BasicProperties(headers=headers, delivery_mode=2))


def _wait_for(ch, q: str, count: int, timeout: float) -> tuple[list[bytes], float]:
    """Bodies got from ``q`` until ``count`` arrived or ``timeout``; and when the last came."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        method, _, body = ch.basic_get(q, auto_ack=True)
        if method is None:
            time.sleep(0.02)
            continue
        got.append(body)
    return got, time.monotonic()


def test_a_delayed_message_arrives_after_its_delay_and_not_before(amqp_broker):
    conn = connect(amqp_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    x, q = _setup(ch)
    started = time.monotonic()
    _publish(ch, x, b"later", 1500)
    _publish(ch, x, b"now", None)
    _publish(ch, x, b"negative", -100)  # RabbitMQ's plugin: zero or negative is no delay
    got, _ = _wait_for(ch, q, 2, 1.0)
    assert sorted(got) == [b"negative", b"now"]
    assert ch.basic_get(q)[0] is None and time.monotonic() - started < 1.4
    got, arrived = _wait_for(ch, q, 1, 5.0)
    assert got == [b"later"]
    assert 1.45 <= arrived - started < 3.0, arrived - started
    conn.close()


def test_equal_delays_keep_publish_order_and_routing_follows_the_delayed_type(amqp_broker):
    conn = connect(amqp_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    x, q = _setup(ch, "topic", "orders.*")
    for i in range(5):
        _publish(ch, x, b"m%d" % i, 300, key="orders.new")
    _publish(ch, x, b"unmatched", 300, key="payments.new")
    got, _ = _wait_for(ch, q, 5, 5.0)
    assert got == [b"m%d" % i for i in range(5)]
    time.sleep(0.3)
    assert ch.basic_get(q)[0] is None  # the topic binding did not match it
    conn.close()


def test_the_delayed_type_is_required_and_reported(amqp_broker):
    conn = connect(amqp_broker)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(unique("bad"), "x-delayed-message")
    assert info.value.reply_code == 406 and "x-delayed-type" in info.value.reply_text
    ch = conn.channel()
    x, _ = _setup(ch, "fanout")
    ch.exchange_declare(x, "x-delayed-message", durable=True, arguments={"x-delayed-type": "fanout"})  # same: ok
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(x, "fanout", durable=True)
    assert info.value.reply_code == 406 and "inequivalent arg 'type'" in info.value.reply_text
    conn.close()


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_held_messages_survive_a_restart_and_a_crash(amqp_broker, how):
    conn = connect(amqp_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    x, q = _setup(ch)
    published = time.monotonic()
    _publish(ch, x, b"held", 2500)  # confirmed: in the delay log and fsync'd
    conn.close()
    if how == "restart":
        amqp_broker.restart()
    else:
        amqp_broker.kill()
        amqp_broker.start()
    conn = connect(amqp_broker)
    ch = conn.channel()
    early = ch.basic_get(q, auto_ack=True)
    assert early[0] is None or time.monotonic() - published >= 2.5, "delivered before its delay"
    got, arrived = _wait_for(ch, q, 1, 10.0) if early[0] is None else ([early[2]], time.monotonic())
    assert got == [b"held"] and arrived - published >= 2.45
    time.sleep(0.5)
    assert ch.basic_get(q)[0] is None  # released once
    conn.close()


def test_a_bound_on_held_messages(tmp_path):
    proc = start_broker(tmp_path / "data", "--delayed-messages-max", "3")
    try:
        host, port = proc.address("amqp")
        conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
        ch = conn.channel()
        ch.confirm_delivery()  # a confirmed publish waits for the broker's answer: here, the refusal
        x, q = _setup(ch)
        for i in range(3):
            _publish(ch, x, b"%d" % i, 60_000)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            _publish(ch, x, b"one too many", 60_000)
        assert info.value.reply_code == 406 and "--delayed-messages-max" in info.value.reply_text
        ch = conn.channel()
        _publish(ch, x, b"undelayed", None)  # not held: routed at once, the bound does not apply
        assert _wait_for(ch, q, 1, 2.0)[0] == [b"undelayed"]
        conn.close()
    finally:
        proc.stop()
