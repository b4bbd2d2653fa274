"""After a clean restart (SIGTERM exits 0, same data directory) the queues, their data, AMQP ack
floors, Kafka group offsets and stream queues all still work across both protocols."""
from __future__ import annotations

from .helpers import (connect, consume, diff_props, expected_record_headers, full_properties, kafka_produce,
                      kafka_read, message_count, publish_confirmed, unique)
from .test_2_kafka_to_amqp import check_delivery, records

N = 200


def test_restart_keeps_queues_data_and_offsets(cross_broker, name):
    amqp_q, kafka_q, stream_q = name + "-amqp", name + "-kafka", name + "-stream"
    group = unique("restart-grp")
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(amqp_q, durable=True)
    ch.queue_declare(stream_q, durable=True, arguments={"x-queue-type": "stream"})

    # AMQP-made data: N publishes; 50 consumed (acked) over AMQP, 100 read by a Kafka group
    sent = [("", amqp_q, full_properties(i), b"restart-%d" % i) for i in range(N)]
    publish_confirmed(cross_broker, sent)
    for i in range(50):
        method, props, body = ch.basic_get(amqp_q, auto_ack=True)
        assert body == sent[i][3]
    assert [r.offset for r in kafka_read(cross_broker.bootstrap, amqp_q, 100, group=group)] == list(range(100))

    # Kafka-made data: a classic queue (40 consumed) and a stream queue
    kafka_sent = records(N)
    kafka_metas = kafka_produce(cross_broker.bootstrap, kafka_q, kafka_sent)
    ch.queue_declare(kafka_q, durable=True)
    consume(ch, kafka_q, 40, prefetch=40)
    stream_metas = kafka_produce(cross_broker.bootstrap, stream_q, kafka_sent)
    conn.close()

    cross_broker.restart()

    conn = connect(cross_broker)
    ch = conn.channel()
    for q in (amqp_q, kafka_q, stream_q):
        ch.queue_declare(q, passive=True)
    # the stream queue is still a stream (a classic redeclare would be refused 406 by RabbitMQ;
    # here: the same arguments are accepted, and it still serves x-stream-offset reads)
    ch.queue_declare(stream_q, durable=True, arguments={"x-queue-type": "stream"})

    # AMQP queue: the 150 unconsumed messages, exactly, with their properties (the redelivered
    # flag is checked by test_clean_restart_redelivered_flag)
    assert message_count(ch, amqp_q) == N - 50
    got = consume(ch, amqp_q, N - 50)
    for (method, props, body), (_, rk, sprops, sbody) in zip(got, sent[50:]):
        assert body == sbody and method.routing_key == rk
        assert not diff_props(props, sprops), diff_props(props, sprops)
    assert message_count(ch, amqp_q) == 0

    # Kafka group resumes at its committed offset 100; a new group reads everything
    rest = kafka_read(cross_broker.bootstrap, amqp_q, N - 100, group=group)
    assert [r.offset for r in rest] == list(range(100, N))
    whole = kafka_read(cross_broker.bootstrap, amqp_q, N)
    for r, (exchange, rk, props, body) in zip(whole, sent):
        assert (r.key, r.value) == (rk.encode(), body)
        assert list(r.headers) == expected_record_headers(props, exchange)

    # Kafka-made classic queue: the 160 not consumed before the restart, in offset order
    assert message_count(ch, kafka_q) == N - 40
    got = consume(ch, kafka_q, N - 40)
    for (method, props, body), rec, meta in zip(got, kafka_sent[40:], kafka_metas[40:]):
        check_delivery(method, props, body, rec, meta)

    # stream queue: offsets unchanged
    got = consume(ch, stream_q, N, prefetch=100, arguments={"x-stream-offset": "first"})
    assert [p.headers["x-stream-offset"] for _, p, _ in got] == [m.offset for m in stream_metas]
    got = consume(ch, stream_q, 10, prefetch=10, arguments={"x-stream-offset": N - 10})
    assert [p.headers["x-stream-offset"] for _, p, _ in got] == list(range(N - 10, N))

    # new traffic after the restart, both ways
    more = [("", amqp_q, full_properties(i), b"after-%d" % i) for i in range(N, N + 20)]
    publish_confirmed(cross_broker, more)
    after = kafka_read(cross_broker.bootstrap, amqp_q, 20, group=group)
    assert [r.offset for r in after] == list(range(N, N + 20))
    assert [r.value for r in after] == [m[3] for m in more]
    got = consume(ch, amqp_q, 20)
    assert [b for _, _, b in got] == [m[3] for m in more]

    later = records(20, start=N)
    metas = kafka_produce(cross_broker.bootstrap, kafka_q, later)
    got = consume(ch, kafka_q, 20)
    for (method, props, body), rec, meta in zip(got, later, metas):
        check_delivery(method, props, body, rec, meta)
    conn.close()


def test_clean_restart_redelivered_flag(cross_broker, name):
    """RabbitMQ's rule across a clean restart: a message delivered but not acked comes back
    flagged ``redelivered``; a message never delivered comes back unflagged."""
    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    sent = [("", name, full_properties(i), b"flag-%d" % i) for i in range(10)]
    publish_confirmed(cross_broker, sent)
    for i in range(3):  # settled
        assert ch.basic_get(name, auto_ack=True)[2] == sent[i][3]
    for i in range(3, 5):  # delivered, not acked when the broker stops
        assert ch.basic_get(name, auto_ack=False)[2] == sent[i][3]

    cross_broker.restart()

    conn = connect(cross_broker)
    ch = conn.channel()
    got = consume(ch, name, 7)
    flags = [(b.decode(), m.redelivered) for m, _, b in got]
    want = [(f"flag-{i}", i < 5) for i in range(3, 10)]
    assert flags == want, f"(body, redelivered) after a clean restart:\n got  {flags}\n want {want}"
    conn.close()
