"""routing.stream_message: stream-protocol (AMQP 1.0) messages <-> records, with rstream's encoder
and decoder as the independent client side and pika's property encoding as the AMQP 0-9-1 one."""
from __future__ import annotations

import datetime
import uuid

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import decode as pamqp_decode
from pamqp.commands import Basic
from rbfly.amqp._message import MessageCtx, decode_amqp, encode_amqp
from rstream import AMQPMessage, amqp_decoder
from rstream._pyamqp.message import Header as RHeader
from rstream._pyamqp.message import Properties as RProperties

from routing import mapping, stream_delivery, stream_message
from routing.amqp_properties import _entries, _split
from routing.stream_message import STREAM_ONLY_HEADERS, record_from_stream, stream_from_record
from wire.amqp10 import Message, Symbol, Typed, decode_message, encode_message
from wire.records import Header, Record

NOW = 1_700_000_000_999
U = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")


def store(message: bytes) -> Record:
    key, value, headers, timestamp = record_from_stream(message, NOW)
    return Record(7, timestamp, key, value, headers)


def names(record: Record) -> list[str]:
    return [h.key for h in record.headers]


def verbatim(record: Record) -> bool:
    return "x-stream-message" in names(record)


def amqp_view(record: Record):
    """(exchange, routing key, pika BasicProperties, {header name: field type octet}) of a delivery;
    header values as pamqp decodes them (pika reads doubles as integers)."""
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    props = pika.spec.BasicProperties()
    props.decode(raw)
    _, _, spans, _ = _split(raw)
    types = {}
    if spans[2] is not None:
        start, end = spans[2]
        types = {name.decode(): chr(t) for name, t, _, _ in _entries(raw, start + 4, end)}
        props.headers = pamqp_decode.field_table(raw[start:end])[1]
    return exchange, routing_key, props, types


def pika_section(**kwargs) -> bytes:
    return b"".join(pika.spec.BasicProperties(**kwargs).encode())


# --- rstream shapes: stored, and delivered back byte for byte by re-encoding ------------------

RSTREAM_SHAPES = {
    "data only": AMQPMessage(body=b"hello"),
    "the brief's example": AMQPMessage(
        body=b"payload", properties=RProperties(
            message_id="m-1", correlation_id="c-1", content_type="application/json", subject="greeting",
            reply_to="replies", creation_time=1700000000123, group_id="g"),
        application_properties={"k": "v", "n": 1}),
    "whole-second creation time, every simple type": AMQPMessage(
        body=b"x" * 1000, properties=RProperties(creation_time=1700000000000, content_encoding="gzip",
                                                 user_id=b"guest", to="/queues/q", reply_to_group_id="rg",
                                                 group_sequence=12, absolute_expiry_time=1800000000456),
        application_properties={"s": "é", "i": -70000, "small": -3, "big": 1 << 40, "t": True, "f": False,
                                "d": 2.5, "b": b"\x00\xff", "none": None, "long": "z" * 300}),
    "header and routing annotations": AMQPMessage(
        body=b"b", header=RHeader(durable=True, priority=7, ttl=60000),
        message_annotations={"x-exchange": "amq.topic", "x-routing-key": "a.b", "x-origin": "eu", "x-n": 3},
        properties=RProperties(message_id=U, correlation_id=b"\x01\x02")),
    "transient, long ids": AMQPMessage(body=b"t", header=RHeader(durable=False),
                                       properties=RProperties(message_id="m" * 300, correlation_id="c" * 256)),
    "amqp-value body": AMQPMessage(value={"a": [1, 2]}, properties=RProperties(content_type="application/x")),
    "amqp-sequence body": AMQPMessage(sequence=[[1, "two"], [None]]),
}


@pytest.mark.parametrize("name", sorted(RSTREAM_SHAPES))
def test_rstream_message_comes_back_byte_for_byte_without_a_copy(name):
    data = bytes(RSTREAM_SHAPES[name])
    record = store(data)
    assert not verbatim(record), names(record)
    assert stream_from_record(record) == data
    assert any(k.startswith("amqp.") for k in names(record))


def test_the_record_of_the_briefs_example():
    data = bytes(RSTREAM_SHAPES["the brief's example"])
    record = store(data)
    assert record.key is None and record.value == b"payload" and record.timestamp == NOW
    assert list(record.headers) == [
        Header("amqp.content-type", b"application/json"), Header("amqp.correlation-id", b"c-1"),
        Header("amqp.reply-to", b"replies"), Header("amqp.message-id", b"m-1"),
        Header("amqp.timestamp", b"1700000000"), Header("amqp.app-id", b"g"),
        Header("amqp.h.l.x-amqp-creation-time", b"1700000000123"), Header("x-amqp-subject", b"greeting"),
        Header("k", b"v"), Header("amqp.h.I.n", b"1"),
    ]


def test_the_amqp_view_of_a_stream_published_record():
    data = bytes(RSTREAM_SHAPES["whole-second creation time, every simple type"])
    exchange, routing_key, props, types = amqp_view(store(data))
    assert (exchange, routing_key) == ("", "")
    assert props.content_encoding == "gzip" and props.user_id == "guest" and props.timestamp == 1700000000
    assert props.headers["s"] == "é" and props.headers["long"] == "z" * 300 and props.headers["b"] == b"\x00\xff"
    assert props.headers["i"] == -70000 and props.headers["small"] == -3 and props.headers["big"] == 1 << 40
    assert props.headers["t"] is True and props.headers["d"] == 2.5 and props.headers["none"] is None
    assert props.headers["x-amqp-to"] == "/queues/q" and props.headers["x-amqp-absolute-expiry-time"] == 1800000000456
    assert props.headers["x-amqp-group-sequence"] == 12
    assert types == {"x-amqp-to": "S", "x-amqp-absolute-expiry-time": "l", "x-amqp-group-sequence": "i",
                     "x-amqp-reply-to-group-id": "S", "s": "S", "i": "I", "small": "I", "big": "l", "t": "t",
                     "f": "t", "d": "d", "b": "x", "none": "V", "long": "S"}

    data = bytes(RSTREAM_SHAPES["header and routing annotations"])
    record = store(data)
    exchange, routing_key, props, types = amqp_view(record)
    assert (exchange, routing_key, record.key) == ("amq.topic", "a.b", b"a.b")
    assert props.delivery_mode == 2 and props.priority == 7 and props.expiration == "60000"
    assert props.message_id == "urn:uuid:" + str(U)
    assert props.headers["x-correlation-id"] == b"\x01\x02" and types["x-correlation-id"] == "x"
    assert types["x-origin"] == "S" and types["x-n"] == "I"

    exchange, routing_key, props, types = amqp_view(store(bytes(RSTREAM_SHAPES["the brief's example"])))
    assert props.content_type == "application/json" and props.message_id == "m-1"
    assert props.correlation_id == "c-1" and props.reply_to == "replies" and props.app_id == "g"
    assert props.headers["n"] == 1 and types["n"] == "I"  # an int application property: signed 32-bit

    _, _, props, types = amqp_view(store(bytes(RSTREAM_SHAPES["transient, long ids"])))
    assert props.delivery_mode == 1 and props.message_id is None
    assert types["x-message-id"] == "S" and types["x-correlation-id"] == "S"


def test_amqp_value_bodies_are_stored_encoded_and_typed_as_rabbitmq_does():
    data = bytes(RSTREAM_SHAPES["amqp-value body"])
    record = store(data)
    _, _, props, _ = amqp_view(record)
    assert props.type == "amqp-1.0" and props.content_type == "application/x"
    assert decode_message(record.value).body == [{"a": [Typed(0x71, 1), Typed(0x71, 2)]}]


# --- what does not map: the original bytes ride along -------------------------------------------

FALLBACKS = {
    "ulong message id": bytes(AMQPMessage(body=b"b", properties=RProperties(message_id=5))),
    "string id in urn:uuid form (comes back a uuid)": bytes(AMQPMessage(
        body=b"b", properties=RProperties(message_id="urn:uuid:" + str(U)))),
    "timestamp application property": bytes(AMQPMessage(
        body=b"b", application_properties={"at": datetime.datetime(2024, 1, 1, 0, 0, 0, 5000, datetime.timezone.utc)})),
    "uuid application property": bytes(AMQPMessage(body=b"b", application_properties={"u": U})),
    "empty body (rstream writes no data section)": bytes(AMQPMessage(body=b"", application_properties={"a": "b"})),
    "footer": encode_message(Message(body_kind="data", body=[b"b"], footer={Symbol("x-sig"): b"s"})),
    "delivery annotations": encode_message(Message(delivery_annotations={Symbol("x-d"): 1}, body_kind="data", body=[b"b"])),
    "two data sections": encode_message(Message(body_kind="data", body=[b"a", b"b"])),
    "vbin32 for a short body": b"\x00\x53\x75\xb0\x00\x00\x00\x02hi",
    "symbol application property": encode_message(Message(application_properties={"s": Symbol("sym")},
                                                           body_kind="data", body=[b"b"])),
    "trimmed properties list": encode_message(Message(properties=["id"], body_kind="data", body=[b"b"])),
    "compact boolean": encode_message(Message(header=[True], body_kind="data", body=[b"b"])),
    "map32 application properties (rbfly)": b"\x00\x53\x74\xd1\x00\x00\x00\x0c\x00\x00\x00\x02\xa1\x01k\x71\x00\x00\x00\x01"
                                            b"\x00\x53\x75\xa0\x01b",
    "x- application property (an annotation on the way back)": bytes(AMQPMessage(
        body=b"b", application_properties={"x-k": "v"})),
    "stream-only name as an application property": bytes(AMQPMessage(
        body=b"b", application_properties={"x-stream-filter-value": "v"})),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_what_does_not_map_is_delivered_verbatim(name):
    data = FALLBACKS[name]
    decode_message(data)  # a valid message
    record = store(data)
    assert verbatim(record)
    assert [h.value for h in record.headers if h.key == "x-stream-message"] == [data]
    assert names(record).count("x-stream-message") == 1 and "x-stream-raw" not in names(record)
    assert stream_from_record(record) == data


def test_a_verbatim_record_still_maps_what_it_can():
    record = store(FALLBACKS["ulong message id"])
    assert record.value == b"b"
    _, _, props, _ = amqp_view(record)
    assert props.message_id == "5"


# --- raw bytes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"hello", b"", b"\x00", b"\x00\x53\x75\xa0\x05abc", b"{\"json\": 1}"])
def test_raw_bytes_are_stored_as_the_value_and_delivered_as_is(data):
    key, value, headers, timestamp = record_from_stream(data, NOW)
    assert (key, value, headers, timestamp) == (None, data, (Header("x-stream-raw", None),), NOW)
    record = Record(0, timestamp, key, value, headers)
    assert stream_from_record(record) == data
    exchange, routing_key, raw = mapping.amqp_from_record(record)  # an AMQP consumer gets the bytes as the body
    props = pika.spec.BasicProperties()
    props.decode(raw)
    assert props.headers["x-stream-raw"] is None


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_any_bytes_come_back_as_they_were(data):
    record = store(data)
    assert stream_from_record(record) == data
    assert stream_from_record(record) == data  # and again, from the caches


# --- the front door's headers ------------------------------------------------------------------

@pytest.mark.parametrize("data", [bytes(RSTREAM_SHAPES["the brief's example"]), FALLBACKS["footer"], b"raw"])
def test_front_door_headers_are_ignored(data):
    record = store(data)
    extra = (Header("x-stream-filter-value", b"eu"), Header("x-stream-writer", b"\x00\x01writer"))
    tagged = Record(record.offset, record.timestamp, record.key, record.value, record.headers + extra)
    assert stream_from_record(tagged) == data
    exchange, routing_key, raw = mapping.amqp_from_record(tagged)  # 0-9-1 consumers see plain headers
    props = pika.spec.BasicProperties()
    props.decode(raw)
    assert props.headers["x-stream-filter-value"] in (b"eu", "eu") and "x-stream-writer" in props.headers


def test_stream_only_headers_never_become_application_properties():
    assert STREAM_ONLY_HEADERS == {"x-stream-filter-value", "x-stream-writer", "x-stream-message", "x-stream-raw"}
    record = Record(0, NOW, b"k", b"v", (Header("x-stream-filter-value", b"f"), Header("x-stream-writer", None),
                                        Header("h", b"1")))
    msg = amqp_decoder(stream_from_record(record))
    assert msg.application_properties == {b"h": b"1"}


# --- AMQP 0-9-1 (pika) and Kafka records to stream consumers -----------------------------------

def test_a_pika_message_decodes_with_rstream():
    raw = pika_section(content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=5,
                       correlation_id="urn:uuid:" + str(U), reply_to="rq", expiration="30000", message_id="m-9",
                       timestamp=1700000000, type="order.created", user_id="guest", app_id="shop",
                       headers={"n": 5, "s": "text", "big": 1 << 40, "t": True, "nul": None,
                                "list": [1, 2], "table": {"a": 1}, "x-custom": "xv",
                                "when": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)})
    key, value, headers, timestamp = mapping.record_from_amqp("orders", "eu.created", raw, b"{}", NOW)
    record = Record(3, timestamp, key, value, headers)
    msg = amqp_decoder(stream_from_record(record))
    assert msg.body == b"{}"
    assert msg.header.durable is True and msg.header.priority == 5 and msg.header.ttl == 30000
    p = msg.properties
    assert p.message_id == b"m-9" and p.correlation_id == U and p.reply_to == b"rq"
    assert p.content_type == b"application/json" and p.content_encoding == b"utf-8"
    assert p.creation_time == 1700000000000 and p.group_id == b"shop" and p.user_id == b"guest"
    assert msg.message_annotations == {b"x-exchange": b"orders", b"x-routing-key": b"eu.created",
                                       b"x-basic-type": b"order.created", b"x-custom": b"xv"}
    assert msg.application_properties == {b"n": 5, b"s": b"text", b"big": 1 << 40, b"t": True, b"nul": None,
                                          b"when": 1704067200000}  # no list or table: RabbitMQ's rule


def test_a_pika_message_with_no_properties():
    record = Record(0, NOW, None, b"body", mapping.record_from_amqp("", "", b"\x00\x00", b"body", NOW)[2])
    assert stream_from_record(record) == b"\x00\x53\x75\xa0\x04body"


def test_a_kafka_record_becomes_application_properties():
    record = Record(0, NOW, b"user-42", b"value", (Header("trace", b"abc"), Header("bin", b"\xff\xfe"),
                                                   Header("none", None), Header("x-kafka-like", b"1")))
    msg = amqp_decoder(stream_from_record(record))
    assert msg.body == b"value"
    assert msg.application_properties == {b"trace": b"abc", b"bin": b"\xff\xfe", b"none": None, b"x-kafka-like": b"1"}
    assert msg.message_annotations == {b"x-routing-key": b"user-42"}
    assert msg.properties.creation_time == NOW
    ours = decode_message(stream_from_record(record)).application_properties
    assert ours == {"trace": "abc", "bin": b"\xff\xfe", "none": None, "x-kafka-like": "1"}  # string if UTF-8


def test_a_kafka_key_that_cannot_be_a_routing_key_and_a_tombstone():
    record = Record(0, -1, b"\xff" * 300, None, (Header("h" * 300, b"long name"),))
    msg = decode_message(stream_from_record(record))
    assert msg.body == [b""] and msg.message_annotations is None and msg.properties is None
    assert msg.application_properties == {"h" * 300: "long name", "x-kafka-key": b"\xff" * 300,
                                          "x-kafka-tombstone": Typed(0x56, True)}


def rbfly_bytes(body, app_properties=None) -> bytes:
    buffer = bytearray(1 << 16)
    n = encode_amqp(buffer, MessageCtx(body, None, None, None, None, app_properties, None))
    return bytes(buffer[:n])


def test_rbfly_messages_round_trip_and_our_messages_decode_with_rbfly():
    plain, text = rbfly_bytes(b"hello"), rbfly_bytes("a str body is an amqp-value")
    for data in (plain, text):
        record = store(data)
        assert not verbatim(record) and stream_from_record(record) == data
    with_app = rbfly_bytes(b"x", {"k": "v", "n": 1})  # rbfly writes map32 and 32-bit ints: kept verbatim
    record = store(with_app)
    assert verbatim(record) and stream_from_record(record) == with_app
    _, _, props, types = amqp_view(record)
    assert props.headers == {"k": "v", "n": 1, "x-stream-message": with_app} and types["n"] == "I"

    raw = pika_section(content_type="text/plain", delivery_mode=2, timestamp=1700000000, headers={"n": 5, "s": "t"})
    key, value, headers, timestamp = mapping.record_from_amqp("ex", "rk", raw, b"body", NOW)
    msg = decode_amqp(stream_from_record(Record(0, timestamp, key, value, headers)))
    assert msg.body == b"body" and msg.app_properties == {"n": 5, "s": "t"} and msg.header.durable is True
    assert msg.properties.content_type.name == "text/plain"  # rbfly's own Symbol type
    assert {k.name: v for k, v in msg.annotations.items()} == {"x-exchange": "ex", "x-routing-key": "rk"}


# --- caching and speed ---------------------------------------------------------------------------

def test_cached_prefix_still_checks_each_messages_data_section():
    short = bytes(AMQPMessage(body=b"ab", application_properties={"k": "v"}))
    assert not verbatim(store(short))
    wide = short[:-7] + b"\x00\x53\x75\xb0\x00\x00\x00\x02ab"  # same prefix, non-compact data section
    record = store(wide)
    assert verbatim(record) and stream_from_record(record) == wide
    long = bytes(AMQPMessage(body=b"y" * 70000, application_properties={"k": "v"}))
    record = store(long)
    assert not verbatim(record) and stream_from_record(record) == long and record.value == b"y" * 70000


def test_cached_prefix_remembers_a_prefix_that_does_not_map():
    data = FALLBACKS["symbol application property"]
    for body in (b"1", b"22"):
        message = data[:-6] + b"\x00\x53\x75\xa0" + bytes((len(body),)) + body
        record = store(message)
        assert verbatim(record) and stream_from_record(record) == message and record.value == body


def test_a_prefix_mapping_turns_into_a_kafka_tombstone_is_not_trusted_from_the_cache():
    # annotations that read back as mapping's Kafka-record markers: with an empty body, mapping stores
    # a Kafka tombstone (value None) instead of an AMQP-form record
    annotations = {Symbol("x-kafka-tombstone"): Typed(0x56, True), Symbol("x-kafka-timestamp"): Typed(0x81, -5)}
    with_body = encode_message(Message(message_annotations=annotations, body_kind="data", body=[b"x"]))
    empty = encode_message(Message(message_annotations=annotations, body_kind="data", body=[b""]))
    assert stream_from_record(store(with_body)) == with_body
    record = store(empty)
    assert record.value is None and verbatim(record) and stream_from_record(record) == empty


@pytest.mark.parametrize("shape", ["repeated sections", "unique properties"])
def test_ten_thousand_messages_round_trip_without_the_verbatim_copy(shape):
    """The conversion is exact for rstream's shapes whether or not its caches help (speed is
    measured by the stream benchmark, not here)."""
    def message(i):
        if shape == "repeated sections":  # a publisher's usual case: only the body changes
            return AMQPMessage(body=b"m%05d" % i, properties=RProperties(content_type="text/plain"),
                               application_properties={"k": "v", "n": 1})
        return AMQPMessage(body=b"m%05d" % i, properties=RProperties(  # nothing cached helps
            message_id="id-%d" % i, content_type="text/plain", creation_time=1700000000000 + i),
            application_properties={"k": "v", "n": i % 3})

    messages = [bytes(message(i)) for i in range(10_000)]
    records = [Record(i, t, k, v, h) for i, (k, v, h, t) in
               enumerate(record_from_stream(m, NOW) for m in messages)]
    assert [stream_from_record(r) for r in records] == messages
    assert not any(verbatim(r) for r in records)


def test_caches_are_bounded():
    for i in range(stream_message._CACHE_MAX + 10):
        data = bytes(AMQPMessage(body=b"b", application_properties={"i": i}))
        assert stream_from_record(store(data)) == data
    assert len(stream_message._IN) <= stream_message._CACHE_MAX
    assert len(stream_delivery._OUT) <= stream_message._CACHE_MAX


# --- hypothesis: any rstream message --------------------------------------------------------------

text = st.text(max_size=12)
simple = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), text,
                   st.binary(max_size=40), st.uuids())


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={
    "message_id": st.one_of(text, st.integers(0, 2**64 - 1), st.uuids(), st.binary(max_size=20)),
    "user_id": st.binary(max_size=20), "to": text, "subject": text, "reply_to": text,
    "correlation_id": st.one_of(text, st.uuids(), st.binary(max_size=20)), "content_type": text,
    "content_encoding": text, "absolute_expiry_time": st.integers(0, 2**62), "creation_time": st.integers(0, 2**50),
    "group_id": text, "group_sequence": st.integers(0, 2**32 - 1), "reply_to_group_id": text}),
    st.dictionaries(text, simple, max_size=5), st.dictionaries(text.map(lambda s: "x-" + s), simple, max_size=3),
    st.none() | st.builds(RHeader, st.none() | st.booleans(), st.none() | st.integers(0, 255),
                          st.none() | st.integers(0, 2**32 - 1), st.none(), st.none()),
    st.binary(min_size=1, max_size=600))
def test_any_rstream_message_round_trips(props, app, annotations, header, body):
    data = bytes(AMQPMessage(body=body, properties=RProperties(**props) if props else None,
                             application_properties=app or None, message_annotations=annotations or None,
                             header=header))
    record = store(data)
    assert stream_from_record(record) == data
    assert record.value == body
    if not verbatim(record):  # re-encoded: rstream decodes the same
        assert amqp_decoder(stream_from_record(record)).application_properties == amqp_decoder(data).application_properties


def _data_start_by_value_end(data: bytes) -> int:
    """The data section's offset found by walking every section with value_end (the reference)."""
    from wire.amqp10 import AMQP10Error, value_end
    p = 0
    try:
        while p < len(data):
            if data.startswith(b"\x00\x53\x75", p):
                return p if data[p + 3:p + 4] in (b"\xa0", b"\xb0") and value_end(data, p) == len(data) else -1
            p = value_end(data, p)
    except AMQP10Error:
        pass
    return -1


@given(st.data())
def test_data_body_skips_sections_as_value_end_measures_them(data):
    msg = Message(header=data.draw(st.sampled_from([None, [True], [True, Typed(0x50, 4)]])),
                  message_annotations=data.draw(st.sampled_from([None, {Symbol("x-a"): "v" * 300}])),
                  properties=data.draw(st.sampled_from([None, ["id", None, "to"]])),
                  application_properties=data.draw(st.sampled_from([None, {"k": "v"}, {"k": "v" * 400}])),
                  body_kind="data", body=[data.draw(st.binary(max_size=300))])
    raw = bytearray(encode_message(msg))
    for _ in range(data.draw(st.integers(0, 3))):  # and mutated: both must still agree
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    raw = bytes(raw)
    expected = _data_start_by_value_end(raw)
    got = stream_message.data_body(raw)
    assert (got[0] if got is not None else -1) == expected


# --- Direct Reply-To addresses ------------------------------------------------------------------

REPLY_NAME = "amq.rabbitmq.reply-to.__________AAAAAAAAAAAAAAAAAAAAAA"


def pika_properties(raw: bytes) -> pika.spec.BasicProperties:
    props = pika.spec.BasicProperties()
    props.decode(raw)
    return props


def test_direct_reply_to_address_converts_between_the_protocols():
    """As RabbitMQ 4.2: an AMQP 1.0 reply-to ``/queues/amq.rabbitmq.reply-to.<suffix>`` is the
    0-9-1 ``reply_to`` a responder publishes to, and back; other reply-tos pass as they are."""
    for reply_to, expected in (("/queues/" + REPLY_NAME, REPLY_NAME), ("/queues/q", "/queues/q"), ("rq", "rq")):
        sent = encode_message(Message(properties=[None, None, None, None, reply_to], body_kind="data", body=[b"x"]))
        _, _, _, props, body = stream_message.amqp091_from_amqp10(sent)
        assert pika_properties(props).reply_to == expected
        back = decode_message(stream_message.amqp10_from_amqp091("", "rk", props, body))
        assert back.properties[4] == reply_to and back.body == [b"x"]
    raw = pika_section(reply_to=REPLY_NAME, correlation_id="c-1")
    delivered = decode_message(stream_message.amqp10_from_amqp091("", "rk", raw, b"body"))
    assert delivered.properties[4] == "/queues/" + REPLY_NAME and delivered.properties[5] == "c-1"
    assert delivered.body == [b"body"]


def test_a_delivery_by_shared_headers_equals_the_one_worked_out():
    raw = Basic.Properties(content_type="text/plain", delivery_mode=2, headers={"h": "v"}).marshal()
    key, value, headers, timestamp, _ = mapping.stored_form("amq.topic", "a.b", raw, b"abc", NOW)
    assert type(headers) is tuple
    records = [Record(1, timestamp, key, value, headers), Record(2, timestamp, b"c.d", b"xyz" * 100, headers),
               Record(3, timestamp, key, b"", headers)]
    first = [stream_from_record(r) for r in records]  # worked out, then kept
    again = [stream_from_record(r) for r in records]  # from what was kept
    stream_delivery._BY_HEADERS.clear()
    worked_out = [stream_from_record(Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
                  for r in records]
    assert first == again == worked_out
    assert decode_message(again[1]).message_annotations[Symbol("x-routing-key")] == "c.d"
    assert decode_message(again[1]).body == [b"xyz" * 100]
