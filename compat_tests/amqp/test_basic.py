"""The basic class: publish (mandatory returns), consume (no-ack, exclusive, tags, cancel both
ways), get, ack/nack/reject/recover, prefetch, and every property round-tripping exactly."""
from __future__ import annotations

import datetime
import decimal
import struct
import time

import pika
import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from .helpers import TIMEOUT, RawAMQP, bodies, connect, consume_n, declare_ok, wait_until


@pytest.fixture
def pub(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


@pytest.fixture
def queue(connection):
    return connection.channel().queue_declare("", exclusive=True).method.queue


def _closed_with(excinfo, code: int, text: str) -> None:
    assert (excinfo.value.reply_code, excinfo.value.reply_text) == (code, text)


def _pump(connection, predicate, what: str, timeout: float = TIMEOUT):
    """Run pika's I/O loop until ``predicate()``."""
    return wait_until(lambda: connection.process_data_events(0.02) or predicate(), timeout, what)


def _settle(connection, seconds: float = 0.3) -> None:
    """Keep pika's I/O loop running for a moment: for checks that nothing more arrives."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection.process_data_events(0.02)


# ------------------------------------------------------------------------ publish / return

def test_mandatory_unroutable_is_returned_312(connection, name):
    ch = connection.channel()
    returned = []
    ch.add_on_return_callback(lambda c, method, props, body: returned.append((method, props, body)))
    ch.exchange_declare(name, "direct")
    props = pika.BasicProperties(message_id="ret-1", headers={"h": 1})
    ch.basic_publish(name, "nowhere", b"come back", props, mandatory=True)
    ch.basic_publish(name, "nowhere", b"dropped silently", mandatory=False)
    _pump(connection, lambda: returned, "basic.return")
    _settle(connection, 0.2)
    assert len(returned) == 1
    method, rprops, body = returned[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key) == (name, "nowhere")
    assert body == b"come back" and rprops.message_id == "ret-1" and rprops.headers == {"h": 1}
    ch.exchange_delete(name)


def test_mandatory_with_confirms_returns_then_acks(connection, name):
    ch = connection.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        ch.basic_publish("", name, b"no such queue", mandatory=True)
    (msg,) = info.value.messages
    assert msg.body == b"no such queue" and msg.method.reply_code == 312
    assert ch.is_open


def test_immediate_flag_is_540_not_implemented(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Basic.Publish(exchange="", routing_key="x", immediate=True), 1)
        raw.send(ContentHeader(body_size=0, properties=commands.Basic.Properties()), 1)
        close = raw.expect(commands.Connection.Close, channel=0)
        assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")


def test_user_id_must_match_the_connection_user(connection, queue):
    ch = connection.channel()
    ch.basic_publish("", queue, b"x", pika.BasicProperties(user_id="bob"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    _closed_with(info, 406, "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'")


# ------------------------------------------------------------------------ consume

def test_consume_no_ack(connection, pub, queue):
    ch = connection.channel()
    for i in range(5):
        pub.basic_publish("", queue, b"%d" % i)
    got = consume_n(ch, queue, 5, auto_ack=True)
    assert [b for _, _, b in got] == [b"%d" % i for i in range(5)]
    assert [m.delivery_tag for m, _, _ in got] == [1, 2, 3, 4, 5]
    assert not any(m.redelivered for m, _, _ in got)
    assert all(m.exchange == "" and m.routing_key == queue for m, _, _ in got)
    assert declare_ok(ch, queue).message_count == 0  # nothing waits for an ack


def test_consumer_tags(connection, pub, queue):
    ch = connection.channel()
    seen = []
    tag = ch.basic_consume(queue, lambda c, m, p, b: seen.append(m.consumer_tag), auto_ack=True,
                           consumer_tag="my-tag-1")
    assert tag == "my-tag-1"
    generated = ch.basic_consume(queue, lambda c, m, p, b: seen.append(m.consumer_tag), auto_ack=True)
    assert generated.startswith("ctag") or generated.startswith("amq.ctag-")  # pika makes its own
    for i in range(4):
        pub.basic_publish("", queue, b"x")
    _pump(connection, lambda: len(seen) == 4, "4 deliveries")
    assert set(seen) <= {"my-tag-1", generated} and "my-tag-1" in seen


def test_server_generated_consumer_tag(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = raw.expect(commands.Queue.DeclareOk).queue
        raw.send(commands.Basic.Consume(queue=q, consumer_tag=""), 1)
        tag = raw.expect(commands.Basic.ConsumeOk, channel=1).consumer_tag
        assert tag.startswith("amq.ctag-") and len(tag) > len("amq.ctag-")
        # an empty queue name means the channel's last declared queue
        raw.send(commands.Basic.Consume(queue=""), 1)
        raw.expect(commands.Basic.ConsumeOk, channel=1)


def test_consume_with_no_queue_declared_is_404(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Basic.Consume(queue=""), 1)
        close = raw.expect(commands.Channel.Close, channel=1)
        assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no previously declared queue")


def test_duplicate_consumer_tag_is_530(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = raw.expect(commands.Queue.DeclareOk).queue
        raw.send(commands.Basic.Consume(queue=q, consumer_tag="dup"), 1)
        raw.expect(commands.Basic.ConsumeOk, channel=1)
        raw.send(commands.Basic.Consume(queue=q, consumer_tag="dup"), 1)
        close = raw.expect(commands.Connection.Close, channel=0)
        assert (close.reply_code, close.reply_text) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")


def test_consume_missing_queue_is_404(channel, name):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.basic_consume(name, lambda *a: None)
    _closed_with(info, 404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


@pytest.mark.parametrize("first_exclusive", [True, False], ids=["exclusive-first", "exclusive-second"])
def test_exclusive_consumer_refuses_others_403(connection, queue, first_exclusive):
    connection.channel().basic_consume(queue, lambda *a: None, exclusive=first_exclusive)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().basic_consume(queue, lambda *a: None, exclusive=not first_exclusive)
    _closed_with(info, 403, f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use")


def test_exclusive_consumer_gets_everything(connection, pub, queue):
    ch = connection.channel()
    for i in range(3):
        pub.basic_publish("", queue, b"%d" % i)
    got = consume_n(ch, queue, 3, exclusive=True)
    assert [b for _, _, b in got] == [b"0", b"1", b"2"]


def test_basic_cancel_stops_deliveries(connection, pub, queue):
    ch = connection.channel()
    seen = []
    tag = ch.basic_consume(queue, lambda c, m, p, b: seen.append(b), auto_ack=True)
    pub.basic_publish("", queue, b"before")
    _pump(connection, lambda: seen == [b"before"], "the first delivery")
    ch.basic_cancel(tag)
    assert tag not in ch.consumer_tags
    pub.basic_publish("", queue, b"after")
    _settle(connection, 0.2)
    assert seen == [b"before"]
    assert bodies(ch, queue) == [b"after"]


def test_cancel_unknown_tag_is_cancel_ok(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Basic.Cancel(consumer_tag="never-was"), 1)
        assert raw.expect(commands.Basic.CancelOk, channel=1).consumer_tag == "never-was"


def test_server_cancel_when_queue_deleted_blocking(connection, name):
    ch = connection.channel()
    ch.queue_declare(name)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(name, lambda *a: None)
    connection.channel().queue_delete(name)
    _pump(connection, lambda: cancelled, "basic.cancel from the server")
    assert cancelled == [tag]
    assert ch.is_open and tag not in ch.consumer_tags


def test_server_cancel_when_queue_deleted_select_connection(amqp_broker, name):
    """pika SelectConnection: on_cancel callback fires, the channel stays open."""
    params = pika.ConnectionParameters(host=amqp_broker.host, port=amqp_broker.port, connection_attempts=1)
    state = {"tag": None, "cancelled": [], "error": None, "channel_open_after": None}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        ch.add_on_cancel_callback(lambda frame: on_cancel(ch, frame))
        ch.queue_declare(name, callback=lambda _f: on_declared(ch))

    def on_declared(ch):
        state["tag"] = ch.basic_consume(name, lambda *a: None, callback=lambda _f: delete_queue(ch))

    def delete_queue(ch):
        ch.connection.channel(on_open_callback=lambda other: other.queue_delete(name))

    def on_cancel(ch, frame):
        state["cancelled"].append(frame.method.consumer_tag)
        # the channel must still work: declare and delete a queue on it
        ch.queue_declare("", exclusive=True, callback=lambda f: finish(ch))

    def finish(ch):
        state["channel_open_after"] = ch.is_open
        ch.connection.close()

    conn = pika.SelectConnection(params, on_open_callback=on_open,
                                 on_open_error_callback=lambda c, e: (state.update(error=e), c.ioloop.stop()),
                                 on_close_callback=lambda c, reason: c.ioloop.stop())
    timer = conn.ioloop.call_later(TIMEOUT, lambda: (state.update(error="timeout"), conn.close()))
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    assert state["error"] is None, state
    assert state["cancelled"] == [state["tag"]] and state["channel_open_after"] is True


# ------------------------------------------------------------------------ get / ack / nack

def test_basic_get_and_get_empty(connection, pub, queue):
    ch = connection.channel()
    assert ch.basic_get(queue) == (None, None, None)
    for i in range(3):
        pub.basic_publish("", queue, b"%d" % i)
    method, _, body = ch.basic_get(queue)
    assert body == b"0" and method.message_count == 2 and not method.redelivered
    assert method.delivery_tag == 1 and method.exchange == "" and method.routing_key == queue
    ch.basic_ack(method.delivery_tag)
    method, _, body = ch.basic_get(queue, auto_ack=True)
    assert body == b"1" and method.message_count == 1 and method.delivery_tag == 2
    assert declare_ok(ch, queue).message_count == 1


def test_get_missing_queue_is_404(channel, name):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.basic_get(name)
    _closed_with(info, 404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


def test_ack_multiple(connection, pub, queue):
    ch = connection.channel()
    for i in range(5):
        pub.basic_publish("", queue, b"%d" % i)
    tags = [ch.basic_get(queue)[0].delivery_tag for _ in range(5)]
    assert tags == [1, 2, 3, 4, 5]
    ch.basic_ack(3, multiple=True)  # 1..3
    ch.close()  # 4 and 5 go back
    ch = connection.channel()
    wait_until(lambda: declare_ok(ch, queue).message_count == 2, what="2 unacked messages back in the queue")
    got = [(m.redelivered, b) for m, _, b in (ch.basic_get(queue, auto_ack=True) for _ in range(2))]
    assert got == [(True, b"3"), (True, b"4")]


def test_ack_zero_multiple_acks_everything(connection, pub, queue):
    ch = connection.channel()
    for i in range(3):
        pub.basic_publish("", queue, b"%d" % i)
    for _ in range(3):
        ch.basic_get(queue)
    ch.basic_ack(0, multiple=True)
    ch.close()
    assert declare_ok(connection.channel(), queue).message_count == 0


@pytest.mark.parametrize("case", ["unknown", "twice", "auto-acked"])
def test_ack_of_unknown_tag_is_406(connection, pub, queue, case):
    pub.basic_publish("", queue, b"x")
    ch = connection.channel()
    if case == "unknown":
        tag = 99
    elif case == "twice":
        tag = ch.basic_get(queue)[0].delivery_tag
        ch.basic_ack(tag)
    else:
        tag = ch.basic_get(queue, auto_ack=True)[0].delivery_tag
    ch.basic_ack(tag)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    _closed_with(info, 406, f"PRECONDITION_FAILED - unknown delivery tag {tag}")


@pytest.mark.parametrize("how", ["reject", "nack", "nack-multiple"])
def test_requeue_sets_redelivered(connection, pub, queue, how):
    ch = connection.channel()
    pub.basic_publish("", queue, b"a")
    pub.basic_publish("", queue, b"b")
    m1 = ch.basic_get(queue)[0]
    m2 = ch.basic_get(queue)[0]
    if how == "reject":
        ch.basic_reject(m1.delivery_tag, requeue=True)
        ch.basic_reject(m2.delivery_tag, requeue=True)
    elif how == "nack":
        ch.basic_nack(m1.delivery_tag, requeue=True)
        ch.basic_nack(m2.delivery_tag, requeue=True)
    else:
        ch.basic_nack(m2.delivery_tag, multiple=True, requeue=True)
    got = [ch.basic_get(queue, auto_ack=True) for _ in range(2)]
    assert [(m.redelivered, b) for m, _, b in got] == [(True, b"a"), (True, b"b")]  # original order
    assert got[0][0].delivery_tag == 3


def test_reject_without_requeue_drops(connection, pub, queue):
    ch = connection.channel()
    pub.basic_publish("", queue, b"gone")
    ch.basic_reject(ch.basic_get(queue)[0].delivery_tag, requeue=False)
    assert ch.basic_get(queue) == (None, None, None)


def test_recover_redelivers_unacked(connection, pub, queue):
    ch = connection.channel()
    for i in range(3):
        pub.basic_publish("", queue, b"%d" % i)
    seen = []
    ch.basic_consume(queue, lambda c, m, p, b: seen.append((m.redelivered, b)))
    _pump(connection, lambda: len(seen) == 3, "3 deliveries")
    ch.basic_recover(requeue=True)
    _pump(connection, lambda: len(seen) == 6, "3 redeliveries after basic.recover")
    assert seen[3:] == [(True, b"0"), (True, b"1"), (True, b"2")]


def test_recover_without_requeue_is_540(connection):
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.basic_recover(requeue=False)
    _closed_with(info, 540, "NOT_IMPLEMENTED - requeue=false")


# ------------------------------------------------------------------------ prefetch

def test_prefetch_count_limits_unacked(connection, pub, queue):
    ch = connection.channel()
    ch.basic_qos(prefetch_count=3)
    for i in range(10):
        pub.basic_publish("", queue, b"%d" % i)
    seen = []
    ch.basic_consume(queue, lambda c, m, p, b: seen.append(m.delivery_tag))
    _pump(connection, lambda: len(seen) >= 3, "3 deliveries")
    _settle(connection)
    assert len(seen) == 3 and declare_ok(connection.channel(), queue).message_count == 7
    ch.basic_ack(seen[0])
    _pump(connection, lambda: len(seen) >= 4, "one more delivery after one ack")
    _settle(connection)
    assert len(seen) == 4
    ch.basic_ack(seen[-1], multiple=True)
    _pump(connection, lambda: len(seen) >= 7, "three more after acking everything")
    _settle(connection)
    assert len(seen) == 7


def test_global_qos_shared_by_consumers(connection, pub):
    ch = connection.channel()
    qa = ch.queue_declare("", exclusive=True).method.queue
    qb = ch.queue_declare("", exclusive=True).method.queue
    for i in range(10):
        pub.basic_publish("", qa, b"a%d" % i)
        pub.basic_publish("", qb, b"b%d" % i)
    ch.basic_qos(prefetch_count=2, global_qos=False)  # per consumer
    ch.basic_qos(prefetch_count=3, global_qos=True)   # for the whole channel
    seen = {"a": 0, "b": 0}
    ch.basic_consume(qa, lambda c, m, p, b: seen.__setitem__("a", seen["a"] + 1))
    ch.basic_consume(qb, lambda c, m, p, b: seen.__setitem__("b", seen["b"] + 1))
    _pump(connection, lambda: sum(seen.values()) >= 3, "3 deliveries")
    _settle(connection)
    assert sum(seen.values()) == 3 and max(seen.values()) == 2, seen


def test_prefetch_does_not_limit_no_ack_consumers(connection, pub, queue):
    ch = connection.channel()
    ch.basic_qos(prefetch_count=1)
    for i in range(20):
        pub.basic_publish("", queue, b"%d" % i)
    assert len(consume_n(ch, queue, 20, auto_ack=True)) == 20


# ------------------------------------------------------------------------ properties and bodies

HEADERS = {
    "str": "text with ünïcode",
    "bytes": b"\x00\x01\xfe\xff",
    "int": 7,
    "negative": -123456,
    "int32-max": 2 ** 31 - 1,
    "int64": 2 ** 40 + 3,
    "int64-min": -(2 ** 63),
    "true": True,
    "false": False,
    "none": None,
    "decimal": decimal.Decimal("3.14"),
    "timestamp": datetime.datetime(2024, 2, 29, 12, 30, 45, tzinfo=datetime.timezone.utc),
    "table": {"nested": {"deeper": {"n": 1, "s": "x"}}, "list": [1, "two"]},
    "array": [1, "a", [2, [3]], {"k": "v"}, None, True, b"\xff", decimal.Decimal("-0.5")],
    "empty-table": {},
    "empty-array": [],
    "": "empty key",
}


def _all_properties(headers=HEADERS) -> pika.BasicProperties:
    return pika.BasicProperties(
        content_type="application/x-test", content_encoding="gzip", headers=headers,
        delivery_mode=2, priority=7, correlation_id="corr-1", reply_to="reply.queue",
        expiration="600000", message_id="msg-1", timestamp=1700000000, type="test.type",
        user_id="guest", app_id="compat-tests")


FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
          "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id")


@pytest.mark.parametrize("via", ["get", "consume"])
def test_all_properties_round_trip(connection, pub, queue, via):
    sent = _all_properties()
    pub.basic_publish("", queue, b"payload", sent)
    ch = connection.channel()
    if via == "get":
        _, props, body = ch.basic_get(queue, auto_ack=True)
    else:
        ((_, props, body),) = consume_n(ch, queue, 1)
    assert body == b"payload"
    for field in FIELDS:
        assert getattr(props, field) == getattr(sent, field), field
    assert props.cluster_id is None


def test_no_properties_stay_absent(connection, pub, queue):
    pub.basic_publish("", queue, b"bare")
    _, props, _ = connection.channel().basic_get(queue, auto_ack=True)
    assert all(getattr(props, f) is None for f in FIELDS), {f: getattr(props, f) for f in FIELDS}


def _field_table(pairs) -> bytes:
    body = b"".join(bytes([len(k)]) + k + v for k, v in pairs)
    return struct.pack(">I", len(body)) + body


# Every field type RabbitMQ knows, encoded by hand (pika only writes a few of them).
RAW_TABLE = _field_table([
    (b"t", b"t\x01"),
    (b"b", b"b" + struct.pack(">b", -5)),
    (b"B", b"B" + struct.pack(">B", 250)),
    (b"s", b"s" + struct.pack(">h", -30000)),
    (b"u", b"u" + struct.pack(">H", 60000)),
    (b"I", b"I" + struct.pack(">i", -2000000000)),
    (b"i", b"i" + struct.pack(">I", 4000000000)),
    (b"l", b"l" + struct.pack(">q", -(2 ** 62))),
    (b"f", b"f" + struct.pack(">f", 2.0)),  # whole numbers: pika truncates floats to ints
    (b"d", b"d" + struct.pack(">d", -4.0)),
    (b"D", b"D" + struct.pack(">Bi", 2, 314)),
    (b"S", b"S" + struct.pack(">I", 5) + b"hello"),
    (b"x", b"x" + struct.pack(">I", 3) + b"\x00\xff\x7f"),
    (b"T", b"T" + struct.pack(">Q", 1700000000)),
    (b"V", b"V"),
    (b"F", b"F" + _field_table([(b"in", b"b\x01"), (b"deep", b"F" + _field_table([(b"x", b"V")]))])),
    (b"A", b"A" + struct.pack(">I", 2 + 3 + 10) + b"b\x07" + b"s\x01\x02" + b"S" + struct.pack(">I", 5) + b"array"),
])


def _shortstr(s: bytes) -> bytes:
    return bytes([len(s)]) + s


def _raw_properties() -> bytes:
    """flags + property list with all 13 properties (cluster-id absent), bytes chosen by us."""
    flags = 0xFFF8 & ~(1 << 2)  # bits 15..3 set, cluster-id (bit 2) clear
    return (struct.pack(">H", flags) + _shortstr(b"text/plain") + _shortstr(b"utf-8") + RAW_TABLE
            + bytes([2]) + bytes([3]) + _shortstr(b"corr") + _shortstr(b"reply") + _shortstr(b"60000")
            + _shortstr(b"id-1") + struct.pack(">Q", 1234567890) + _shortstr(b"kind")
            + _shortstr(b"guest") + _shortstr(b"app"))


def test_raw_property_bytes_round_trip_exactly(amqp_broker):
    """Content header properties come back byte for byte: field types (b, B, s, u, I, i, l, f, d,
    D, S, x, t, T, V, F, A), their order, nesting, every basic property."""
    props = _raw_properties()
    body = b"raw body"
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = raw.expect(commands.Queue.DeclareOk).queue
        header_payload = struct.pack(">HHQ", 60, 0, len(body)) + props
        raw.send(commands.Basic.Publish(exchange="", routing_key=q), 1)
        raw.send_bytes(struct.pack(">BHI", 2, 1, len(header_payload)) + header_payload + b"\xce")
        raw.send_bytes(struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce")
        raw.send(commands.Basic.Get(queue=q, no_ack=True), 1)
        raw.expect(commands.Basic.GetOk, channel=1)
        frame_type, channel, size = struct.unpack(">BHI", raw.recv_bytes(7))
        payload = raw.recv_bytes(size + 1)[:-1]
        assert (frame_type, channel) == (2, 1)
        assert struct.unpack(">HHQ", payload[:12]) == (60, 0, len(body))
        assert payload[12:] == props
        _, got_body = raw.recv_method()
        assert got_body.value == body


def test_raw_field_types_decoded_by_pika(amqp_broker, connection):
    """The same hand-made table, read by pika: each value as its type says."""
    q = connection.channel().queue_declare("", exclusive=True).method.queue
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Confirm.Select(), 1)
        raw.expect(commands.Confirm.SelectOk)
        header_payload = struct.pack(">HHQ", 60, 0, 0) + struct.pack(">H", 1 << 13) + RAW_TABLE
        raw.send(commands.Basic.Publish(exchange="", routing_key=q), 1)
        raw.send_bytes(struct.pack(">BHI", 2, 1, len(header_payload)) + header_payload + b"\xce")
        raw.expect(commands.Basic.Ack, channel=1)
    _, props, body = connection.channel().basic_get(q, auto_ack=True)
    h = props.headers
    assert body == b""
    assert (h["t"], h["b"], h["B"], h["s"], h["u"]) == (True, -5, 250, -30000, 60000)
    assert (h["I"], h["i"], h["l"]) == (-2000000000, 4000000000, -(2 ** 62))
    assert (h["f"], h["d"], h["D"]) == (2.0, -4.0, decimal.Decimal("3.14"))
    assert (h["S"], h["x"], h["V"]) == ("hello", b"\x00\xff\x7f", None)
    assert h["T"] == datetime.datetime.fromtimestamp(1700000000, datetime.timezone.utc)
    assert h["F"] == {"in": 1, "deep": {"x": None}}
    assert h["A"] == [7, 258, "array"]


@pytest.mark.parametrize("size", [0, 5 * 1024 * 1024], ids=["empty", "5MB"])
def test_body_sizes_round_trip(connection, pub, queue, size):
    body = (bytes(range(256)) * (size // 256 + 1))[:size]
    pub.basic_publish("", queue, body, pika.BasicProperties(content_type="application/octet-stream"))
    ch = connection.channel()
    method, props, got = ch.basic_get(queue, auto_ack=True)
    assert method is not None and props.content_type == "application/octet-stream"
    assert len(got) == size and got == body
    pub.basic_publish("", queue, body)
    ((_, _, got),) = consume_n(ch, queue, 1)
    assert len(got) == size and got == body


def test_delivery_tags_count_per_channel(connection, pub, queue):
    for i in range(4):
        pub.basic_publish("", queue, b"%d" % i)
    ch = connection.channel()
    assert ch.basic_get(queue)[0].delivery_tag == 1
    got = consume_n(ch, queue, 3, auto_ack=False)
    assert [m.delivery_tag for m, _, _ in got] == [2, 3, 4]
    other = connection.channel()
    pub.basic_publish("", queue, b"again")
    assert other.basic_get(queue, auto_ack=True)[0].delivery_tag == 1


def test_prefetch_size_is_540_not_implemented(connection):
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().basic_qos(prefetch_size=1)
    _closed_with(info, 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1)")


def test_consumer_priorities(connection, pub, queue):
    """Deliveries go to the highest x-priority consumer that has prefetch room, then lower ones."""
    got = []
    high, low = connection.channel(), connection.channel()
    high.basic_qos(prefetch_count=2)
    low.basic_qos(prefetch_count=100)
    high.basic_consume(queue, lambda c, m, p, b: got.append(("high", b)), arguments={"x-priority": 10})
    low.basic_consume(queue, lambda c, m, p, b: got.append(("low", b)), arguments={"x-priority": 1})
    for i in range(6):
        pub.basic_publish("", queue, b"%d" % i)
    _pump(connection, lambda: len(got) == 6, "6 deliveries")
    assert got == [("high", b"0"), ("high", b"1"), ("low", b"2"), ("low", b"3"), ("low", b"4"), ("low", b"5")]


def test_nowait_declare_and_bind(amqp_broker):
    """queue.declare and queue.bind with no-wait get no answer, and take effect in order."""
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        q = "nowait-" + str(id(raw))
        raw.send(commands.Queue.Declare(queue=q, exclusive=True, nowait=True), 1)
        raw.send(commands.Queue.Bind(queue=q, exchange="amq.direct", routing_key=q, nowait=True), 1)
        raw.publish(1, "amq.direct", q, b"hello")
        raw.send(commands.Basic.Get(queue=q, no_ack=True), 1)
        ok = raw.expect(commands.Basic.GetOk, channel=1)  # not a declare-ok or bind-ok first
        assert (ok.exchange, ok.routing_key) == ("amq.direct", q)


def test_qos_applies_to_consumers_started_after_it(connection, pub, queue):
    """RabbitMQ: a per-consumer prefetch set later does not limit an existing consumer."""
    ch = connection.channel()
    seen = []
    ch.basic_consume(queue, lambda c, m, p, b: seen.append(m.delivery_tag))
    ch.basic_qos(prefetch_count=1)
    for i in range(10):
        pub.basic_publish("", queue, b"%d" % i)
    _pump(connection, lambda: len(seen) == 10, "10 unacked deliveries to the consumer started before basic.qos")


def test_publishes_before_connection_close_are_not_lost(amqp_broker, connection, queue):
    other = connect(amqp_broker)
    ch = other.channel()
    for i in range(500):
        ch.basic_publish("", queue, b"%03d" % i)
    other.close()  # no confirms: connection.close-ok must come after the publishes are routed
    reader = connection.channel()
    wait_until(lambda: declare_ok(reader, queue).message_count == 500, what="500 messages")
    assert bodies(reader, queue) == [b"%03d" % i for i in range(500)]
