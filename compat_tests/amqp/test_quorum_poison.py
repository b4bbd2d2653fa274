"""Quorum queues and poison messages: ``x-delivery-limit`` (argument or ``delivery-limit``
policy), the ``x-delivery-count`` header, and dead-lettering with reason ``delivery_limit`` once
a message has come back more often than the limit allows; counts survive a restart. The same
expectations run against RabbitMQ (``[rabbitmq]``).
"""
from __future__ import annotations

import time

import pika
import pytest

from .helpers import connect, dead_letter_target, set_policy, unique


def _quorum(ch, name: str, dlx: str | None = None, **arguments) -> None:
    args = {"x-queue-type": "quorum", **arguments}
    if dlx is not None:
        args["x-dead-letter-exchange"] = dlx
    ch.queue_declare(name, durable=True, arguments=args)


def _get(ch, queue: str, tries: int = 200):
    """basic.get, waiting a little for a requeued message to be back (RabbitMQ returns it async)."""
    for _ in range(tries):
        method, props, body = ch.basic_get(queue)
        if method is not None:
            return method, props, body
        time.sleep(0.05)
    return None, None, None


@pytest.fixture
def channel(confirm_channel):
    return confirm_channel


def test_delivery_limit_dead_letters_a_poison_message(channel):
    dlx, dlq = dead_letter_target(channel)
    q = unique("qq")
    _quorum(channel, q, dlx, **{"x-delivery-limit": 2})
    channel.basic_publish("", q, b"poison", pika.BasicProperties(headers={"a": 1}))
    counts = []
    for _ in range(3):
        method, props, body = _get(channel, q)
        assert body == b"poison"
        counts.append((method.redelivered, props.headers["x-delivery-count"]))
        channel.basic_reject(method.delivery_tag, requeue=True)
    assert counts == [(False, 0), (True, 1), (True, 2)]
    method, props, body = _get(channel, dlq)
    assert body == b"poison"
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", q, 1)
    assert props.headers["x-first-death-reason"] == "delivery_limit" and props.headers["a"] == 1
    assert channel.basic_get(q)[0] is None


def test_a_consumer_that_dies_holding_it_counts_too(amqp_broker, channel):
    q = unique("qq")
    _quorum(channel, q, **{"x-delivery-limit": 5})
    channel.basic_publish("", q, b"m")
    conn = connect(amqp_broker)
    other = conn.channel()
    assert _get(other, q)[2] == b"m"
    conn.close()  # unacked: it goes back, and counts as a delivery attempt
    method, props, _ = _get(channel, q)
    assert method.redelivered and props.headers["x-delivery-count"] == 1
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, props, _ = _get(channel, q)
    assert props.headers["x-delivery-count"] == 2
    channel.basic_ack(method.delivery_tag)


def test_delivery_limit_from_a_policy(amqp_broker, channel):
    dlx, dlq = dead_letter_target(channel)
    q = unique("polq")
    _quorum(channel, q, dlx)
    undo = set_policy(amqp_broker, f"dl-{q}", f"^{q}$", {"delivery-limit": 1})
    try:
        channel.basic_publish("", q, b"p")
        for _ in range(2):
            method, props, _ = _get(channel, q)
            channel.basic_reject(method.delivery_tag, requeue=True)
        assert _get(channel, dlq)[2] == b"p"
    finally:
        undo()


def test_only_the_highest_priority_policy_applies(amqp_broker, channel):
    """Two policies find the queue: the higher one has no delivery limit, so none applies (policies
    are not merged: the lower one's delivery-limit is not taken)."""
    dlx, dlq = dead_letter_target(channel)
    q = unique("polq")
    _quorum(channel, q, dlx)
    undo_low = set_policy(amqp_broker, f"dl-{q}", f"^{q}$", {"delivery-limit": 1})
    undo_high = set_policy(amqp_broker, f"len-{q}", f"^{q}", {"max-length": 1000}, priority=5)
    try:
        channel.basic_publish("", q, b"p")
        for _ in range(3):
            method, props, _ = _get(channel, q)
            assert method is not None, "the message was dead-lettered by the lower-priority policy's limit"
            channel.basic_reject(method.delivery_tag, requeue=True)
        assert _get(channel, q)[2] == b"p"
        assert _get(channel, dlq, tries=10)[2] is None
    finally:
        undo_high()
        undo_low()


@pytest.mark.restarts_broker
def test_counts_survive_a_restart(amqp_broker):
    conn = connect(amqp_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    dlx, dq, q = unique("dlx"), unique("dlqq"), unique("qq")
    ch.exchange_declare(dlx, "fanout", durable=True)
    ch.queue_declare(dq, durable=True, arguments={"x-queue-type": "quorum"})  # the dead letters outlive it too
    ch.queue_bind(dq, dlx)
    # at-least-once dead-lettering: RabbitMQ's default (at-most-once) may drop a dead letter, and
    # does now and then right after a restart, so only this strategy makes the last check a guarantee
    _quorum(ch, q, dlx, **{"x-delivery-limit": 3, "x-dead-letter-strategy": "at-least-once",
                           "x-overflow": "reject-publish"})
    ch.basic_publish("", q, b"survivor", pika.BasicProperties(delivery_mode=2))
    for _ in range(2):
        method, _, _ = _get(ch, q)
        ch.basic_reject(method.delivery_tag, requeue=True)
    conn.close()
    amqp_broker.restart()
    conn = connect(amqp_broker)
    ch = conn.channel()
    method, props, _ = _get(ch, q, tries=200)
    assert props.headers["x-delivery-count"] == 2
    ch.basic_reject(method.delivery_tag, requeue=True)
    method, props, _ = _get(ch, q)
    assert props.headers["x-delivery-count"] == 3
    ch.basic_reject(method.delivery_tag, requeue=True)
    assert _get(ch, dq, tries=400)[2] == b"survivor"  # RabbitMQ dead-letters asynchronously: give it time
    conn.close()
