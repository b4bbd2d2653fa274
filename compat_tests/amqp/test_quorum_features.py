"""Quorum queues, the RabbitMQ 4 features: message priorities and at-least-once dead-lettering.

Priorities, as RabbitMQ 4.3: a quorum queue needs no argument; it has 32 levels, a message's
priority clamped to 0..31 and none counting as 4, served strictly (the highest waiting level
first, the publish order within a level); a returned message comes back before any level. Those
tests run against RabbitMQ 4.3 or later only (Debian's 3.10 predates quorum-queue priorities and
delivers in order; 4.0 to 4.2 had two levels served 2:1), and always against our broker.

At-least-once dead-lettering (``x-dead-letter-strategy``, RabbitMQ 3.10+): with reject-publish
overflow a dead letter stays in its quorum queue until a target queue has it, is routed again
periodically (the RabbitMQ node of this suite retries every 2 s, see compat_tests/rabbitmq.py),
and survives a crash; without reject-publish it falls back to at-most-once.
"""
from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest

from .helpers import connect, set_policy, unique, wait_until

ALO = {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


@pytest.fixture
def channel(confirm_channel):
    return confirm_channel


# Strict quorum-queue priorities came with RabbitMQ 4.3: older nodes' cases are deselected (conftest).
priorities = pytest.mark.rabbitmq_min_version(4, 3)


def _quorum(ch, name: str, **arguments) -> None:
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", **arguments})


def _publish(ch, queue: str, body: bytes, priority: int | None = None) -> None:
    ch.basic_publish("", queue, body, pika.BasicProperties(priority=priority, delivery_mode=2))


def _get_all(ch, queue: str, expected: int) -> list[bytes]:
    got = []
    deadline = time.monotonic() + 10
    while len(got) < expected and time.monotonic() < deadline:
        method, _, body = ch.basic_get(queue)
        if method is None:
            time.sleep(0.05)
            continue
        ch.basic_ack(method.delivery_tag)
        got.append(body)
    return got


def _backlog(ch, q: str) -> None:
    """Ten messages over the levels: none (4), 0, 4, 5, 9, 5, 255 (31), 31, 3, 30."""
    for body, priority in ((b"a", None), (b"b", 0), (b"c", 4), (b"d", 5), (b"e", 9), (b"f", 5), (b"g", 255),
                           (b"h", 31), (b"i", 3), (b"j", 30)):
        _publish(ch, q, body, priority)


BACKLOG_ORDER = [b"g", b"h", b"j", b"e", b"d", b"f", b"a", b"c", b"i", b"b"]


# --- priorities ---------------------------------------------------------------------------

@priorities
def test_levels_are_served_strictly(channel):
    q = unique("qq-prio")
    _quorum(channel, q)
    _backlog(channel, q)
    assert _get_all(channel, q, 10) == BACKLOG_ORDER


@priorities
def test_a_consumer_sees_the_same_order(amqp_broker, channel):
    q = unique("qq-prio")
    _quorum(channel, q)
    _backlog(channel, q)
    conn = connect(amqp_broker)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    got = []

    def on_message(c, method, props, body):
        got.append(body)
        c.basic_ack(method.delivery_tag)

    ch.basic_consume(q, on_message)
    deadline = time.monotonic() + 10
    while len(got) < 10 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    conn.close()
    assert got == BACKLOG_ORDER


@priorities
def test_normal_messages_wait_for_every_high_one(channel):
    q = unique("qq-prio")
    _quorum(channel, q)
    _publish(channel, q, b"n", None)
    for i in range(4):
        _publish(channel, q, b"h%d" % i, 8)
    assert _get_all(channel, q, 5) == [b"h0", b"h1", b"h2", b"h3", b"n"]  # no fair turn any more


@priorities
def test_priority_is_kept_across_a_requeue(channel):
    q = unique("qq-prio")
    _quorum(channel, q)
    _publish(channel, q, b"normal")
    _publish(channel, q, b"high", 6)
    method, props, body = channel.basic_get(q)
    assert body == b"high"
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, props, body = None, None, None
    deadline = time.monotonic() + 10
    while method is None and time.monotonic() < deadline:  # RabbitMQ returns it asynchronously
        method, props, body = channel.basic_get(q)
    assert (body, method.redelivered, props.priority) == (b"high", True, 6)
    channel.basic_ack(method.delivery_tag)
    assert _get_all(channel, q, 1) == [b"normal"]


@pytest.mark.restarts_broker
@priorities
def test_priority_is_kept_across_a_restart(amqp_broker, channel):
    q = unique("qq-prio")
    _quorum(channel, q)
    for body, priority in ((b"n0", None), (b"n1", None), (b"h0", 9)):
        _publish(channel, q, body, priority)
    channel.connection.close()
    amqp_broker.restart()
    conn = connect(amqp_broker)
    try:
        assert _get_all(conn.channel(), q, 3) == [b"h0", b"n0", b"n1"]
    finally:
        conn.close()


def test_quorum_queues_refuse_x_max_priority(amqp_broker):
    conn = connect(amqp_broker)
    q = unique("qq-maxprio")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as failed:
        conn.channel().queue_declare(q, durable=True, arguments={"x-queue-type": "quorum", "x-max-priority": 5})
    conn.close()
    assert failed.value.reply_code == 406
    assert failed.value.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{q}' in vhost "
                                       f"'/' of queue type rabbit_quorum_queue")


# --- delayed retry (RabbitMQ 4.3) -----------------------------------------------------------

delayed_retry = pytest.mark.rabbitmq_min_version(4, 3)  # Debian's 3.10 returns at once


def _wait_for(ch, q: str, timeout: float = 10):
    """(seconds until basic.get had a message, method, body)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        method, _, body = ch.basic_get(q)
        if method is not None:
            return time.monotonic() - start, method, body
        time.sleep(0.05)
    return None, None, None


@delayed_retry
def test_a_nacked_message_waits_before_it_is_redelivered(channel):
    q = unique("qq-retry")
    _quorum(channel, q, **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 1000})
    _publish(channel, q, b"m")
    method, _, _ = channel.basic_get(q)
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert channel.queue_declare(q, passive=True).method.message_count == 0  # waiting: not ready
    waited, method, body = _wait_for(channel, q)
    assert body == b"m" and method.redelivered
    assert 0.8 <= waited <= 3, waited  # 1 s, give or take the broker's quarter-second tick
    channel.basic_ack(method.delivery_tag)


@delayed_retry
def test_failed_type_delays_rejects_not_nacks(channel):
    q = unique("qq-retry")
    _quorum(channel, q, **{"x-delayed-retry-type": "failed", "x-delayed-retry-min": 1000})
    _publish(channel, q, b"m")
    method, _, _ = channel.basic_get(q)
    channel.basic_nack(method.delivery_tag, requeue=True)  # "returned": not delayed
    waited, method, _ = _wait_for(channel, q)
    assert waited < 0.5, waited
    channel.basic_reject(method.delivery_tag, requeue=True)  # "failed": delayed
    waited, method, _ = _wait_for(channel, q)
    assert 0.8 <= waited <= 3, waited
    channel.basic_ack(method.delivery_tag)


# --- at-least-once dead-lettering ----------------------------------------------------------

def _reject_one(ch, q: str, body: bytes = b"precious", routing_key: str | None = None) -> None:
    if routing_key is None:
        _publish(ch, q, body)
    else:
        ch.queue_bind(q, "amq.direct", routing_key)
        ch.basic_publish("amq.direct", routing_key, body, pika.BasicProperties(delivery_mode=2))
    method = None
    deadline = time.monotonic() + 10
    while method is None and time.monotonic() < deadline:
        method, _, got = ch.basic_get(q)
    assert got == body
    ch.basic_reject(method.delivery_tag, requeue=False)


def _source(ch, dlx_type: str = "fanout", **arguments) -> tuple[str, str]:
    dlx, q = unique("dlx"), unique("src")
    ch.exchange_declare(dlx, dlx_type, durable=True)
    _quorum(ch, q, **{"x-dead-letter-exchange": dlx, **arguments})
    return dlx, q


def _wait_get(ch, q: str, timeout: float = 20.0):
    def one():
        method, props, body = ch.basic_get(q, auto_ack=True)
        return (method, props, body) if method is not None else None
    return wait_until(one, timeout, f"a message in {q}", interval=0.2)


def _held(ch, q: str) -> None:
    """The dead letter is neither ready nor delivered again."""
    time.sleep(0.5)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    assert ch.basic_get(q)[0] is None


def _target(ch, dlx: str, routing_key: str = "") -> str:
    dlq = unique("dlq")
    _quorum(ch, dlq)
    ch.queue_bind(dlq, dlx, routing_key)
    return dlq


def test_a_dead_letter_without_route_waits_for_one(channel):
    dlx, q = _source(channel, **ALO)
    _reject_one(channel, q)
    _held(channel, q)
    dlq = _target(channel, dlx)
    method, props, body = _wait_get(channel, dlq)
    death = props.headers["x-death"][0]
    assert body == b"precious" and (death["reason"], death["queue"], death["count"]) == ("rejected", q, 1)
    time.sleep(3)  # past a retry: it was settled in the source, not sent again
    assert channel.basic_get(dlq)[0] is None and channel.basic_get(q)[0] is None


def test_the_dead_letter_routing_key_is_used(channel):
    dlx, q = _source(channel, "direct", **{**ALO, "x-dead-letter-routing-key": "dead"})
    wrong = _target(channel, dlx, "other")
    _reject_one(channel, q, routing_key=unique("rk"))
    _held(channel, q)
    right = _target(channel, dlx, "dead")
    method, props, body = _wait_get(channel, right)
    assert (body, method.routing_key, method.exchange) == (b"precious", "dead", dlx)
    assert channel.basic_get(wrong)[0] is None


def test_a_policy_turns_it_on(amqp_broker, channel):
    dlx, q = _source(channel, **{"x-overflow": "reject-publish"})
    undo = set_policy(amqp_broker, f"dls-{q}", f"^{q}$", {"dead-letter-strategy": "at-least-once"})
    try:
        _reject_one(channel, q)
        _held(channel, q)
        assert _wait_get(channel, _target(channel, dlx))[2] == b"precious"
    finally:
        undo()


@pytest.mark.restarts_broker
def test_held_dead_letters_survive_a_crash(amqp_broker, channel):
    dlx, q = _source(channel, **ALO)
    _reject_one(channel, q)
    _held(channel, q)
    time.sleep(1)  # our broker saves held dead letters with the ack floors (every 0.25 s)
    channel.connection.close()
    amqp_broker.kill()
    amqp_broker.start()
    conn = connect(amqp_broker)
    try:
        ch = conn.channel()
        _held(ch, q)
        method, props, body = _wait_get(ch, _target(ch, dlx), timeout=60)
        assert body == b"precious" and props.headers["x-death"][0]["reason"] == "rejected"
    finally:
        conn.close()


def test_without_reject_publish_it_falls_back_to_at_most_once(channel):
    dlx, q = _source(channel, **{"x-dead-letter-strategy": "at-least-once"})  # drop-head, the default
    _reject_one(channel, q)
    dlq = _target(channel, dlx)
    time.sleep(4)  # past a retry on either broker: nothing was kept to retry
    assert channel.basic_get(dlq)[0] is None and channel.basic_get(q)[0] is None


@pytest.mark.parametrize("arguments, detail", [
    ({"x-dead-letter-strategy": "at-least-once"}, " of queue type rabbit_classic_queue"),
    ({"x-queue-type": "quorum", "x-dead-letter-strategy": "sometimes"}, ": invalid_dlx_strategy"),
    ({"x-queue-type": "quorum", "x-dead-letter-strategy": 1}, ": {unacceptable_type,signedint}"),
], ids=["classic", "bad-value", "bad-type"])
def test_strategy_argument_is_checked(amqp_broker, arguments, detail):
    conn = connect(amqp_broker)
    q = unique("dls")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as failed:
        conn.channel().queue_declare(q, durable=True, arguments=arguments)
    conn.close()
    assert failed.value.reply_code == 406
    assert failed.value.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for queue '{q}' "
                                       f"in vhost '/'{detail}")
