"""One queue, both protocols' competing consumers: a Kafka share group named like an AMQP queue.

pika consumers and confluent-kafka ``ShareConsumer``s (group id = the queue's name, subscribed
to the queue's topic) take messages from the same queue: each message is settled by one
consumer of either kind, a nack/requeue or a release makes it available to both, a Kafka
reject dead-letters it per the queue's arguments, and the delivery count is one count
(AMQP ``x-delivery-count`` on a quorum queue, Kafka's delivery count).
"""
from __future__ import annotations

import threading
import time

import pika
from confluent_kafka import AcknowledgeType, ShareConsumer

from .helpers import TIMEOUT, connect

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000}


def share_consumer(broker, group: str, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": f"share-{group}",
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit", **COMMON})
    c.subscribe([group])
    return c


def declare(broker, name: str, **arguments) -> None:
    conn = connect(broker)
    try:
        conn.channel().queue_declare(name, durable=True, arguments=arguments or None)
    finally:
        conn.close()


def publish(broker, queue: str, bodies: list[bytes]) -> None:
    conn = connect(broker)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    finally:
        conn.close()


def share_poll(consumer: ShareConsumer, want: int, timeout: float = TIMEOUT) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m)
    return got


def amqp_get(broker, queue: str, timeout: float = TIMEOUT):
    """basic.get until a message comes: (connection, channel, method, properties, body)."""
    conn = connect(broker)
    ch = conn.channel()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue)
        if method is not None:
            return conn, ch, method, props, body
        time.sleep(0.1)
    conn.close()
    raise AssertionError(f"nothing arrived in {queue} within {timeout} s")


class PikaWorker(threading.Thread):
    """A pika consumer (prefetch 5) acking everything it gets until told to stop."""

    def __init__(self, broker, queue: str, limit: int | None = None):
        super().__init__(daemon=True)
        self.broker, self.queue, self.limit = broker, queue, limit
        self.acked: list[bytes] = []
        self.halt = threading.Event()
        self.consuming = threading.Event()  # its basic.consume is done (or it failed)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = connect(self.broker)
            ch = conn.channel()
            ch.basic_qos(prefetch_count=5)

            def on_message(c, method, props, body):
                if self.limit is not None and len(self.acked) >= self.limit:
                    return  # left unacked: back to the queue when the connection closes
                c.basic_ack(method.delivery_tag)
                self.acked.append(body)
                time.sleep(0.002)  # a worker that does some work, so the share consumer gets its part

            ch.basic_consume(self.queue, on_message)
            self.consuming.set()
            while not self.halt.is_set():
                conn.process_data_events(time_limit=0.1)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc
            self.consuming.set()


def split(broker, queue: str, bodies: set[bytes], timeout: float = 60, until: int | None = None):
    """A pika worker and a share consumer drain ``queue`` together (or take ``until`` messages, give
    or take what is in flight): (pika's, Kafka's)."""
    worker = PikaWorker(broker, queue, None if until is None else until // 2)
    worker.start()
    # on a loaded machine the share consumer, started first, could take everything before the
    # worker's connection is even open: both kinds must be competing for the test to mean anything
    assert worker.consuming.wait(30), "the pika worker did not start consuming within 30 s"
    consumer = share_consumer(broker, queue)
    kafka: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (len(worker.acked) + len(kafka) < len(bodies) if until is None
                                               else len(kafka) < until // 2):
            for m in consumer.poll(0.5):
                assert m.error() is None, m.error()
                kafka.append(m.value())
        consumer.commit_sync(30)  # implicit mode: what the last poll returned is accepted
    finally:
        consumer.close()
        worker.halt.set()
        worker.join(30)
    assert worker.error is None, worker.error
    return worker.acked, kafka


def test_pika_and_share_consumers_split_one_queue(cross_broker, name):
    declare(cross_broker, name, **{"x-queue-type": "quorum"})
    bodies = [b"job-%04d" % i for i in range(600)]
    publish(cross_broker, name, bodies)
    amqp, kafka = split(cross_broker, name, set(bodies))
    assert not set(amqp) & set(kafka), "a message was settled by both kinds of consumer"
    assert sorted(amqp + kafka) == sorted(bodies), "a message was lost or settled twice"
    assert amqp and kafka, f"one kind got nothing (pika {len(amqp)}, kafka {len(kafka)})"
    conn = connect(cross_broker)
    try:  # nothing left, nothing unacked
        assert conn.channel().queue_declare(name, passive=True).method.message_count == 0
    finally:
        conn.close()


def test_a_nack_and_a_release_reach_the_other_kind_with_one_delivery_count(cross_broker, name):
    declare(cross_broker, name, **{"x-queue-type": "quorum"})
    publish(cross_broker, name, [b"poison?"])
    conn, ch, method, props, body = amqp_get(cross_broker, name)
    assert body == b"poison?" and not method.redelivered
    ch.basic_nack(method.delivery_tag, requeue=True)  # AMQP gives it back ...
    conn.close()
    consumer = share_consumer(cross_broker, name, explicit=True)
    try:
        [m] = share_poll(consumer, 1)  # ... and a Kafka share consumer gets it, second delivery
        assert (m.value(), m.delivery_count()) == (b"poison?", 2)
        consumer.acknowledge(m, AcknowledgeType.RELEASE)  # Kafka gives it back ...
        consumer.commit_sync(30)
    finally:
        consumer.close()
    conn, ch, method, props, body = amqp_get(cross_broker, name)  # ... and AMQP gets it, third delivery
    try:
        assert body == b"poison?" and method.redelivered
        assert (props.headers or {}).get("x-delivery-count") == 2  # RabbitMQ counts returns: 2 before the 3rd
        ch.basic_ack(method.delivery_tag)
    finally:
        conn.close()


def test_a_kafka_reject_dead_letters_per_the_queue_arguments(cross_broker, name):
    dlq = name + "-dlq"
    declare(cross_broker, dlq)
    declare(cross_broker, name, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    publish(cross_broker, name, [b"bad", b"good"])
    consumer = share_consumer(cross_broker, name, explicit=True)
    try:
        got = share_poll(consumer, 2)
        assert sorted(m.value() for m in got) == [b"bad", b"good"]
        for m in got:
            consumer.acknowledge(m, AcknowledgeType.REJECT if m.value() == b"bad" else AcknowledgeType.ACCEPT)
        consumer.commit_sync(30)
    finally:
        consumer.close()
    conn, ch, method, props, body = amqp_get(cross_broker, dlq)
    try:
        assert body == b"bad"
        death = props.headers["x-death"][0]
        assert (death["queue"], death["reason"]) == (name, "rejected")
        ch.basic_ack(method.delivery_tag)
        assert ch.queue_declare(name, passive=True).method.message_count == 0  # "good" was accepted
    finally:
        conn.close()


def test_a_closed_share_consumer_gives_back_what_it_held(cross_broker, name):
    declare(cross_broker, name)
    publish(cross_broker, name, [b"held-%d" % i for i in range(5)])
    consumer = share_consumer(cross_broker, name, explicit=True)
    got = share_poll(consumer, 5)
    assert len(got) == 5
    for m in got[:2]:
        consumer.acknowledge(m)
    consumer.commit_sync(30)
    for m in got[2:]:  # explicit mode: the rest must be acknowledged before close; release them
        consumer.acknowledge(m, AcknowledgeType.RELEASE)
    consumer.close()
    seen = []
    conn = connect(cross_broker)
    try:
        ch = conn.channel()
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 3 and time.monotonic() < deadline:
            method, _props, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                time.sleep(0.1)
                continue
            assert method.redelivered
            seen.append(body)
    finally:
        conn.close()
    assert sorted(seen) == [m.value() for m in got[2:]]


def test_the_split_holds_across_a_restart(cross_broker, name):
    declare(cross_broker, name, **{"x-queue-type": "quorum"})
    bodies = [b"task-%04d" % i for i in range(3000)]  # a share poll takes up to 500 at once
    publish(cross_broker, name, bodies)
    amqp1, kafka1 = split(cross_broker, name, set(bodies), until=1000)  # part of it, then a restart
    assert 0 < len(amqp1) + len(kafka1) < len(bodies)
    cross_broker.restart()
    rest = set(bodies) - set(amqp1) - set(kafka1)
    amqp2, kafka2 = split(cross_broker, name, rest)
    amqp, kafka = amqp1 + amqp2, kafka1 + kafka2
    assert not set(amqp) & set(kafka), "a message was settled by both kinds of consumer"
    assert sorted(amqp + kafka) == sorted(bodies), "a message was lost or settled twice across the restart"
