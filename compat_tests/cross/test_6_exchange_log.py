"""Exchange logs: a Kafka consumer group taps everything published to an `x-log` exchange while
AMQP consumers drain its bound queues; Kafka records written to the log are routed through the
exchange; the namespace is shared; all of it again after a restart."""
from __future__ import annotations

import time

import pika
import pytest

from .helpers import connect, consume, env_int, kafka_produce, kafka_read

N = env_int("CROSS_MESSAGES", 2000)


def _declare(ch, exchange: str, queues: dict[str, str]) -> None:
    ch.exchange_declare(exchange, "topic", durable=True, arguments={"x-log": True})
    for queue, pattern in queues.items():
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange, pattern)


def test_exchange_log_tap_and_kafka_publish_through_it(cross_broker, name):
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    evens, odds = f"{name}-even", f"{name}-odd"
    _declare(ch, name, {evens: "even.*", odds: "odd.*"})
    for i in range(N):
        key = ("even" if i % 2 == 0 else "odd") + f".{i}"
        ch.basic_publish(name, key, b"m%d" % i, pika.BasicProperties(delivery_mode=2, message_id=str(i)))
    ch.basic_publish(name, "nobody.listens", b"unrouted")  # logged, though no queue takes it

    # AMQP consumers drain the bound queues while a Kafka group reads the exchange's log.
    got_even = consume(conn.channel(), evens, N // 2)
    records = kafka_read(cross_broker.bootstrap, name, N + 1)
    got_odd = consume(conn.channel(), odds, N - N // 2)
    assert [b for _, _, b in got_even] == [b"m%d" % i for i in range(0, N, 2)]
    assert [b for _, _, b in got_odd] == [b"m%d" % i for i in range(1, N, 2)]
    assert [r.offset for r in records] == list(range(N + 1))
    assert records[-1].value == b"unrouted" and records[-1].key == b"nobody.listens"
    assert (records[0].key, records[0].value) == (b"even.0", b"m0")
    assert ("amqp.exchange", name.encode()) in records[0].headers
    assert ("amqp.message-id", b"0") in records[0].headers

    # A Kafka producer writing to the log publishes through the exchange.
    kafka_produce(cross_broker.bootstrap, name, [{"key": b"odd.kafka", "value": b"from-kafka",
                                                  "headers": [("origin", b"kafka")]}])
    (method, props, body), = consume(conn.channel(), odds, 1)
    assert (body, method.routing_key, props.headers["origin"]) == (b"from-kafka", "odd.kafka", "kafka")
    conn.close()


def test_exchange_log_namespace_is_shared(cross_broker, name):
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.exchange_declare(name, "fanout", arguments={"x-log": True})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(name)
    assert info.value.reply_code == 406 and f"topic '{name}' is the log of exchange '{name}'" in info.value.reply_text
    ch = conn.channel()
    queue = f"{name}-q"
    ch.queue_declare(queue)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(queue, "fanout", arguments={"x-log": True})
    assert info.value.reply_code == 406 and f"is the topic of queue '{queue}'" in info.value.reply_text
    conn.close()


def test_exchange_log_after_restart(cross_broker, name):
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    bound = f"{name}-all"
    _declare(ch, name, {bound: "#"})
    ch.basic_publish(name, "a.b", b"before", pika.BasicProperties(delivery_mode=2))
    conn.close()

    cross_broker.restart()

    conn = connect(cross_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(name, "a.c", b"after", pika.BasicProperties(delivery_mode=2))
    kafka_produce(cross_broker.bootstrap, name, [{"key": b"a.k", "value": b"kafka-after"}])
    got = consume(conn.channel(), bound, 3)
    assert [b for _, _, b in got] == [b"before", b"after", b"kafka-after"]
    records = kafka_read(cross_broker.bootstrap, name, 3)
    assert [r.value for r in records] == [b"before", b"after", b"kafka-after"]
    conn.close()


def test_deleting_a_queue_topic_through_kafka_deletes_the_queue(cross_broker, name):
    from kafka.admin import KafkaAdminClient
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(name, lambda *args: None)
    admin = KafkaAdminClient(bootstrap_servers=cross_broker.bootstrap)
    try:
        admin.delete_topics([name])
    finally:
        admin.close()
    deadline = time.monotonic() + 10
    while not cancelled and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert cancelled == [tag]  # consumer_cancel_notify, as when the queue is deleted over AMQP
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_declare(name, passive=True)
    assert info.value.reply_code == 404
    conn.close()
