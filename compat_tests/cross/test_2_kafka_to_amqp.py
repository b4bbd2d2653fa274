"""kafka-python produces keyed records with headers; pika reads them from a classic queue (in
offset order, README's Kafka-origin delivery form) and from a stream queue at every kind of
``x-stream-offset``."""
from __future__ import annotations

import datetime
import time

from .helpers import connect, consume, env_int, kafka_produce, message_count

N = env_int("CROSS_MESSAGES", 2000)
# ms; record i gets BASE_TS + 1000 * i, the last an hour ago. Not a fixed date: older than retention (7 days)
# the retention pass may delete them mid-test
BASE_TS = (int(time.time()) - 3600 - N) * 1000


def records(n: int, start: int = 0, prefix: str = "k"):
    return [dict(key=f"{prefix}.{i}".encode(), value=b"kafka-value-%d" % i,
                 headers=[("trace", f"t-{i}".encode()), ("kind", b"cross"), ("utf8", "\u00fc".encode())],
                 timestamp_ms=BASE_TS + 1000 * i)
            for i in range(start, start + n)]


def expected_headers(rec) -> dict:
    want = {k: v.decode() for k, v in rec["headers"]}
    want["x-kafka-timestamp"] = rec["timestamp_ms"]
    return want


def check_delivery(method, props, body, rec, meta):
    assert body == rec["value"]
    assert method.exchange == ""
    assert method.routing_key == rec["key"].decode()
    assert props.headers == expected_headers(rec), (meta.offset, props.headers)
    assert list(props.headers) == [k for k, _ in rec["headers"]] + ["x-kafka-timestamp"]
    assert props.timestamp == meta.timestamp // 1000
    for attr in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                 "reply_to", "expiration", "message_id", "type", "user_id", "app_id", "cluster_id"):
        assert getattr(props, attr) is None, f"{attr} = {getattr(props, attr)!r} on a Kafka-origin delivery"


def test_kafka_produce_pika_consumes_classic_queue(cross_broker, name):
    sent = records(N)
    metas = kafka_produce(cross_broker.bootstrap, name, sent)
    assert [m.offset for m in metas] == list(range(N))
    assert [m.timestamp for m in metas] == [r["timestamp_ms"] for r in sent]

    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    assert message_count(ch, name) == N
    began = time.monotonic()
    got = consume(ch, name, N)
    print(f"\npika consumed {N} Kafka-made records: {time.monotonic() - began:.2f}s")
    for idx, ((method, props, body), rec, meta) in enumerate(zip(got, sent, metas)):
        check_delivery(method, props, body, rec, meta)  # also: delivery idx is offset idx
    assert message_count(ch, name) == 0

    # records produced while a consumer is attached arrive too, in order
    more = records(50, start=N)
    metas2 = kafka_produce(cross_broker.bootstrap, name, more)
    assert [m.offset for m in metas2] == list(range(N, N + 50))
    got2 = consume(ch, name, 50)
    for (method, props, body), rec, meta in zip(got2, more, metas2):
        check_delivery(method, props, body, rec, meta)
    conn.close()


def stream_read(ch, queue, n, offset_spec):
    got = consume(ch, queue, n, prefetch=200, arguments={"x-stream-offset": offset_spec})
    return [(props.headers.get("x-stream-offset"), method, props, body) for method, props, body in got]


def test_kafka_produce_pika_reads_stream_queue(cross_broker, name):
    first = records(300)
    metas = kafka_produce(cross_broker.bootstrap, name, first)
    assert [m.offset for m in metas] == list(range(300))

    conn = connect(cross_broker)
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})

    def check(read, recs, meta_list, start):
        offsets = [o for o, *_ in read]
        assert offsets == list(range(start, start + len(read))), f"x-stream-offset headers {offsets[:10]}..."
        for (o, method, props, body), rec, meta in zip(read, recs, meta_list):
            assert meta.offset == o
            headers = dict(props.headers)
            del headers["x-stream-offset"]
            props.headers = headers
            check_delivery(method, props, body, rec, meta)

    # "first": everything, twice (non-destructive)
    for _ in range(2):
        check(stream_read(ch, name, 300, "first"), first, metas, 0)

    # numeric offset
    check(stream_read(ch, name, 300 - 123, 123), first[123:], metas[123:], 123)

    # timestamp: the first record at or after it (record i has BASE_TS + 1000 i ms)
    when = datetime.datetime.fromtimestamp((BASE_TS + 1000 * 200) / 1000, tz=datetime.timezone.utc)
    check(stream_read(ch, name, 100, when), first[200:], metas[200:], 200)

    # "next": attach, then produce; only the new records arrive
    ch.basic_qos(prefetch_count=50)
    got = []
    tag = ch.basic_consume(name, lambda c, m, p, b: got.append((p.headers.get("x-stream-offset"), m, p, b)),
                           arguments={"x-stream-offset": "next"})
    conn.process_data_events(time_limit=0)
    later = records(20, start=300, prefix="later")
    metas2 = kafka_produce(cross_broker.bootstrap, name, later)
    assert [m.offset for m in metas2] == list(range(300, 320))
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
        if got:
            ch.basic_ack(got[-1][1].delivery_tag, multiple=True)
    assert len(got) == 20, f"'next' consumer got {len(got)} of 20: offsets {[o for o, *_ in got]}"
    check(got, later, metas2, 300)
    ch.basic_cancel(tag)
    conn.close()
