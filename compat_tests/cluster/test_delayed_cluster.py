"""Delayed messages in AMQP cluster mode 'spread'.

A delayed-message exchange's held messages are a replicated log (like a quorum queue's) led by one
broker; a publish with ``x-delay`` on any other broker is forwarded there and held; the leader
routes each message once it is due, to queues led anywhere. Kill -9 the log's leader while
messages are held: an in-sync replica takes over, and every confirmed message is delivered once,
none early, the ones released before the kill not again.
"""
from __future__ import annotations

import time

import pika

from compat_tests.cluster.clients import amqp_connection, amqp_knows
from compat_tests.cluster.cluster import metadata, partition_view
from compat_tests.support import wait_until

DELAY_TOPIC = "amq.delayed.later"  # the delay log's topic: its queue-topic name (vhost '/')


def _leader(cluster, topic: str) -> int:
    md = metadata(cluster.bootstrap())
    return partition_view(md, topic)[0][0] if topic in md.topics else -1


def _declare(broker, queue: str, arguments: dict | None = None) -> None:
    connection = amqp_connection(broker)
    ch = connection.channel()
    ch.queue_declare(queue, durable=True, arguments=arguments)
    connection.close()


def _publish(broker, messages: list[tuple[str, int]]) -> None:
    """Publish (body, delay in ms) to the exchange with confirms; every one must be confirmed."""
    connection = amqp_connection(broker)
    ch = connection.channel()
    ch.confirm_delivery()
    for body, delay in messages:
        ch.basic_publish("later", "k", body.encode(),
                         pika.BasicProperties(delivery_mode=2, headers={"x-delay": delay}))
    connection.close()


def _drain(broker, queue: str, want: int, timeout: float) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    connection = amqp_connection(broker)
    ch = connection.channel()
    while len(got) < want and time.monotonic() < deadline:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.1)
            continue
        got.append(body.decode())
    time.sleep(1.5)  # anything more (a duplicate) would come now
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append(body.decode())
    connection.close()
    return got


def _knows_exchange(broker, name: str) -> bool:
    return amqp_knows(broker, lambda ch: ch.exchange_declare(name, passive=True))


def _exchange_on_broker_1(spread, queue: str) -> None:
    b1, b2, b3 = spread.brokers
    connection = amqp_connection(b1)
    ch = connection.channel()
    ch.exchange_declare("later", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    connection.close()
    for other in (b2, b3):  # they apply the definition from their replica of the state topic
        wait_until(lambda: _knows_exchange(other, "later"), 30, f"broker {other.node_id} knowing the exchange")
    _declare(b2, queue, {"x-queue-type": "quorum"})  # client-local: led by broker 2
    connection = amqp_connection(b2)
    connection.channel().queue_bind(queue, "later", "k")
    connection.close()
    assert wait_until(lambda: _leader(spread, DELAY_TOPIC) == 1, 30, "broker 1 leading the delay log")
    spread.wait_isr_full(DELAY_TOPIC)
    wait_until(lambda: _leader(spread, queue) == 2, 30, f"broker 2 leading {queue}")


def test_a_message_held_on_another_broker_is_routed_when_due(spread):
    b1, b2, b3 = spread.brokers
    _exchange_on_broker_1(spread, "due")
    time.sleep(1)  # broker 3 learns the binding (routing is done at the leader: not needed, but realistic)
    start = time.monotonic()
    _publish(b3, [(f"m{i}", 2500) for i in range(20)])
    connection = amqp_connection(b2)
    early = connection.channel().queue_declare("due", passive=True).method.message_count
    connection.close()
    got = _drain(b3, "due", 20, 30)
    assert early == 0 and time.monotonic() - start >= 2.5
    assert got == [f"m{i}" for i in range(20)]


def test_held_messages_survive_the_kill_of_the_delay_logs_leader_and_come_once(spread):
    b1, b2, b3 = spread.brokers
    _exchange_on_broker_1(spread, "after-kill")
    time.sleep(1)
    _publish(b3, [(f"soon{i}", 300) for i in range(10)] + [(f"late{i}", 6000) for i in range(20)])
    released = _drain(b2, "after-kill", 10, 30)
    assert released == [f"soon{i}" for i in range(10)]
    time.sleep(1)  # the leader's floor of released messages reaches the state topic (every 250 ms)
    b1.kill()
    assert wait_until(lambda: _leader(spread, DELAY_TOPIC) in (2, 3), 60, "a new leader of the delay log")
    got = _drain(b3, "after-kill", 20, 90)
    assert sorted(got) == sorted(f"late{i}" for i in range(20)), got


def test_a_due_message_waits_for_its_queues_unreachable_leader(spread):
    """Released while the only broker of its target queue is down: the copy cannot be forwarded,
    so the message stays held and is routed again until the queue's broker is back; then it
    comes once."""
    b1, b2, b3 = spread.brokers
    connection = amqp_connection(b1)
    ch = connection.channel()
    ch.exchange_declare("later", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    connection.close()
    wait_until(lambda: _knows_exchange(b2, "later"), 30, "broker 2 knowing the exchange")
    _declare(b2, "one-replica")  # a classic queue: led by broker 2 (client-local), its only replica
    connection = amqp_connection(b2)
    connection.channel().queue_bind("one-replica", "later", "k")
    connection.close()
    assert wait_until(lambda: _leader(spread, DELAY_TOPIC) == 1, 30, "broker 1 leading the delay log")
    wait_until(lambda: _leader(spread, "one-replica") == 2, 30, "broker 2 leading one-replica")
    time.sleep(1)  # broker 1 applies the binding from its replica of the state topic
    _publish(b3, [(f"held{i}", 2000) for i in range(10)])
    b2.kill()
    time.sleep(5)  # due meanwhile: broker 1 routes them, the forwards to broker 2 fail
    b2.start()
    got = _drain(b2, "one-replica", 10, 60)
    assert sorted(got) == sorted(f"held{i}" for i in range(10)), got
