"""Helpers of the cross-protocol suite: pika, kafka-python and confluent-kafka side by side.

Nothing here imports the broker; every check goes through a real client over a socket.
"""
from __future__ import annotations

import datetime
import decimal
import os
import time

import pika
import pika.data

from compat_tests.amqp.helpers import connect, parameters, unique  # noqa: F401 (the cross tests import them from here)

TIMEOUT = 20.0  # seconds for one awaited event (a whole batch of reads counts as one)


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default





# ----------------------------------------------------------------------------- AMQP (pika)



def publish_confirmed(broker, messages, window: int = 1000, timeout: float = 120.0) -> float:
    """Publish ``messages`` (``(exchange, routing_key, BasicProperties, body)``) with a pika
    SelectConnection in confirm mode, up to ``window`` unconfirmed; every one must be acked
    (basic.ack, not nack, no basic.return: ``mandatory`` is set). Returns the seconds taken."""
    messages = list(messages)
    n = len(messages)
    state = {"next": 0, "outstanding": set(), "acked": 0, "nacked": [], "returned": [], "error": None}
    began = time.monotonic()

    def publish_more(ch):
        while state["next"] < n and len(state["outstanding"]) < window:
            exchange, rk, props, body = messages[state["next"]]
            ch.basic_publish(exchange, rk, body, props, mandatory=True)
            state["next"] += 1
            state["outstanding"].add(state["next"])  # delivery tags count from 1

    def on_confirm(frame, ch):
        method = frame.method
        tag = method.delivery_tag
        if method.multiple:
            done = {t for t in state["outstanding"] if t <= tag}
        else:
            done = {tag} & state["outstanding"]
        state["outstanding"] -= done
        if isinstance(method, pika.spec.Basic.Ack):
            state["acked"] += len(done)
        else:
            state["nacked"].extend(sorted(done))
        if state["acked"] + len(state["nacked"]) == n:
            ch.connection.close()
        else:
            publish_more(ch)

    def on_return(ch, method, props, body):
        state["returned"].append((method.reply_code, method.routing_key))

    def on_channel(ch):
        ch.add_on_return_callback(on_return)
        ch.confirm_delivery(lambda frame: on_confirm(frame, ch), callback=lambda _f: publish_more(ch))

    def on_open_error(conn, err):
        state["error"] = f"connection failed: {err!r}"
        conn.ioloop.stop()

    def on_closed(conn, reason):
        if state["acked"] + len(state["nacked"]) != n:
            state["error"] = f"connection closed early: {reason!r}"
        conn.ioloop.stop()

    conn = pika.SelectConnection(parameters(broker),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_open_error_callback=on_open_error, on_close_callback=on_closed)

    def on_timeout():
        state["error"] = (f"timed out after {timeout}s: published {state['next']} of {n}, "
                          f"acked {state['acked']}, outstanding {len(state['outstanding'])}")
        if conn.is_open:
            conn.close()
        else:
            conn.ioloop.stop()

    conn.ioloop.call_later(timeout, on_timeout)
    conn.ioloop.start()
    assert state["error"] is None, state["error"]
    assert not state["nacked"], f"{len(state['nacked'])} publishes were nacked, first tags {state['nacked'][:10]}"
    assert not state["returned"], f"{len(state['returned'])} publishes were returned: {state['returned'][:5]}"
    assert state["acked"] == n, f"acked {state['acked']} of {n}"
    return time.monotonic() - began


def consume(channel, queue: str, n: int, timeout: float = TIMEOUT, prefetch: int = 500,
            arguments: dict | None = None, ack_every: int = 100) -> list[tuple]:
    """Consume exactly ``n`` deliveries (manual acks, ``prefetch``) from ``queue``; ``[(method,
    properties, body)]``. Fails after ``timeout`` seconds without progress naming what it got."""
    channel.basic_qos(prefetch_count=prefetch)
    got = []
    last_progress = time.monotonic()
    unacked = 0
    for method, props, body in channel.consume(queue, auto_ack=False, inactivity_timeout=0.1,
                                               arguments=arguments or {}):
        if method is not None:
            got.append((method, props, body))
            unacked += 1
            last_progress = time.monotonic()
            if unacked >= ack_every or len(got) == n:
                channel.basic_ack(method.delivery_tag, multiple=True)
                unacked = 0
            if len(got) == n:
                break
        elif time.monotonic() - last_progress > timeout:
            channel.cancel()
            raise AssertionError(f"got {len(got)} of {n} deliveries from {queue!r} (no new one within "
                                 f"{timeout}s); last bodies {[b[:40] for _, _, b in got[-3:]]}")
    channel.cancel()
    return got


def message_count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def diff_props(got: pika.BasicProperties, want: pika.BasicProperties) -> str:
    """'' when every property is equal, else the differing fields (and header entries)."""
    g, w = props_dict(got), props_dict(want)
    out = [f"{k}: got {g[k]!r} want {w[k]!r}" for k in g if k != "headers" and g[k] != w[k]]
    gh, wh = g["headers"] or {}, w["headers"] or {}
    if gh != wh:
        if list(gh) != list(wh):
            out.append(f"header names: got {list(gh)} want {list(wh)}")
        out += [f"headers[{k!r}]: got {gh.get(k)!r} want {wh[k]!r}" for k in wh if gh.get(k) != wh[k]]
    return "; ".join(out)


def props_dict(props: pika.BasicProperties) -> dict:
    """Every BasicProperties field, for equality checks with a readable diff."""
    return {k: getattr(props, k) for k in (
        "content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
        "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id")}


# ----------------------------------------------------------------------------- the full property set

WHEN = datetime.datetime(2024, 2, 29, 12, 34, 56, tzinfo=datetime.timezone.utc)  # pika decodes T as aware UTC
NESTED = {"a": 1, "b": "two", "c": [1, "x", True], "d": {"deep": b"\x01\x02"}}
LISTED = [1, "two", False, {"k": "v"}, [3, None]]


def full_headers(i: int) -> dict:
    """A headers table with every field type pika can send (floats excepted)."""
    return {
        "str": f"value-{i}",
        "unicode": "h\u00e9llo \u2713",
        "small": 7,
        "negative": -i - 1,
        "large": 2 ** 40 + i,
        "yes": True,
        "no": False,
        "dec": decimal.Decimal("123.45"),
        "when": WHEN,
        "raw": b"\x00\xff raw " + str(i).encode(),
        "nothing": None,
        "nested": NESTED,
        "listed": LISTED,
        "amqp.reserved": "kept",
    }


def full_properties(i: int) -> pika.BasicProperties:
    return pika.BasicProperties(
        content_type="application/json", content_encoding="gzip", headers=full_headers(i),
        delivery_mode=2, priority=5, correlation_id=f"corr-{i}", reply_to="reply.queue",
        expiration="3600000", message_id=f"msg-{i}", timestamp=1_700_000_000 + i, type="cross.type",
        user_id="guest", app_id="cross-app")


def _table_body(value) -> bytes:
    pieces: list[bytes] = []
    pika.data.encode_value(pieces, value)
    raw = b"".join(pieces)
    return raw[5:]  # type octet and 4-byte length


def expected_record_headers(props: pika.BasicProperties, exchange: str = "") -> list[tuple[str, bytes | None]]:
    """The record headers README's table gives for a publish of ``props`` (see routing/mapping.py)."""
    out: list[tuple[str, bytes | None]] = []
    if exchange:
        out.append(("amqp.exchange", exchange.encode()))
    for attr in ("content_type", "content_encoding"):
        v = getattr(props, attr)
        if v is not None:
            out.append(("amqp." + attr.replace("_", "-"), v.encode()))
    if props.delivery_mode is not None:
        out.append(("amqp.delivery-mode", b"%d" % props.delivery_mode))
    if props.priority is not None:
        out.append(("amqp.priority", b"%d" % props.priority))
    for attr in ("correlation_id", "reply_to", "expiration", "message_id"):
        v = getattr(props, attr)
        if v is not None:
            out.append(("amqp." + attr.replace("_", "-"), v.encode()))
    if props.timestamp is not None:
        out.append(("amqp.timestamp", b"%d" % props.timestamp))
    for attr in ("type", "user_id", "app_id", "cluster_id"):
        v = getattr(props, attr)
        if v is not None:
            out.append(("amqp." + attr.replace("_", "-"), v.encode()))
    for name, value in (props.headers or {}).items():
        if isinstance(value, str):
            out.append(("amqp.h.S." + name if name.startswith("amqp.") else name, value.encode()))
        elif value is None:
            out.append((name, None))
        elif isinstance(value, bool):
            out.append((f"amqp.h.t.{name}", b"1" if value else b"0"))
        elif isinstance(value, int):
            t = "I" if -2 ** 31 <= value < 2 ** 31 else "l"
            out.append((f"amqp.h.{t}.{name}", b"%d" % value))
        elif isinstance(value, decimal.Decimal):
            out.append((f"amqp.h.D.{name}", str(value).encode()))
        elif isinstance(value, datetime.datetime):
            secs = int(value.timestamp())
            out.append((f"amqp.h.T.{name}", b"%d" % secs))
        elif isinstance(value, bytes):
            out.append((f"amqp.h.x.{name}", value))
        elif isinstance(value, dict):
            out.append((f"amqp.h.F.{name}", _table_body(value)))
        elif isinstance(value, list):
            out.append((f"amqp.h.A.{name}", _table_body(value)))
        else:
            raise TypeError(f"no expectation for {type(value)}")
    return out


# ----------------------------------------------------------------------------- Kafka

def kafka_read(bootstrap: str, topic: str, n: int, group: str | None = None, timeout: float = TIMEOUT,
               **config) -> list:
    """kafka-python KafkaConsumer (group, earliest): the first ``n`` records of ``topic``."""
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group or unique("grp"),
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             request_timeout_ms=30000, **config)
    got = []
    last_progress = time.monotonic()
    try:
        while len(got) < n:
            batch = consumer.poll(timeout_ms=200)
            for records in batch.values():
                got.extend(records)
                last_progress = time.monotonic()
            if time.monotonic() - last_progress > timeout:
                raise AssertionError(f"kafka-python read {len(got)} of {n} records of {topic!r} "
                                     f"(nothing new within {timeout}s)")
        if len(got) > n:
            got = got[:n]
        from kafka import OffsetAndMetadata, TopicPartition
        # commit exactly past the n-th record (a poll may have returned more)
        last = {}
        for r in got:
            last[(r.topic, r.partition)] = r.offset
        consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o + 1, "", -1) for (t, p), o in last.items()})
    finally:
        consumer.close()
    return got


def kafka_produce(bootstrap: str, topic: str, records, timeout: float = 60.0) -> list:
    """kafka-python KafkaProducer (acks=all): send ``records`` (dicts of ``send`` kwargs) in order;
    returns their RecordMetadata (offset, timestamp) in order."""
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_in_flight_requests_per_connection=1,
                             linger_ms=5)
    try:
        futures = [producer.send(topic, **r) for r in records]
        producer.flush(timeout)
        return [f.get(timeout) for f in futures]
    finally:
        producer.close(5)
