"""routing.mapping: AMQP message <-> Kafka record, byte-exact both ways."""
from __future__ import annotations

import datetime
import decimal
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import decode as pamqp_decode
from pamqp.commands import Basic

from routing import amqp_properties, mapping, message_fields
from wire.records import Header, Record

U32 = struct.Struct(">I")
NOW = 1_700_000_000_123

PROPERTY_BITS = {
    "content_type": 0x8000, "content_encoding": 0x4000, "headers": 0x2000, "delivery_mode": 0x1000,
    "priority": 0x0800, "correlation_id": 0x0400, "reply_to": 0x0200, "expiration": 0x0100,
    "message_id": 0x0080, "timestamp": 0x0040, "message_type": 0x0020, "user_id": 0x0010, "app_id": 0x0008,
    "cluster_id": 0x0004,
}


def shortstr(data: bytes) -> bytes:
    return bytes((len(data),)) + data


def longstr(data: bytes) -> bytes:
    return U32.pack(len(data)) + data


def table(*entries: tuple[bytes, bytes]) -> bytes:
    """(name, type octet + value) pairs -> a field table, length included."""
    body = b"".join(shortstr(name) + value for name, value in entries)
    return longstr(body)


def section(flags: int, *parts: bytes) -> bytes:
    return struct.pack(">H", flags) + b"".join(parts)


def to_record(result, offset: int = 0) -> Record:
    key, value, headers, timestamp = result
    return Record(offset, timestamp, key, value, headers)


def amqp_round_trip(exchange: str, routing_key: str, raw: bytes, body: bytes = b"body") -> Record:
    result = mapping.record_from_amqp(exchange, routing_key, raw, body, NOW)
    record = to_record(result)
    assert record.value == body
    assert mapping.amqp_from_record(record) == (exchange, routing_key, raw)
    assert any(h.key.startswith("amqp.") for h in record.headers)  # never mistaken for Kafka-origin
    assert record.timestamp == NOW
    return record


# --- unit examples: properties ------------------------------------------------------------

@pytest.mark.parametrize("attribute, value, header, text", [
    ("content_type", "application/json", "amqp.content-type", b"application/json"),
    ("content_encoding", "gzip", "amqp.content-encoding", b"gzip"),
    ("delivery_mode", 2, "amqp.delivery-mode", b"2"),
    ("priority", 9, "amqp.priority", b"9"),
    ("correlation_id", "c-1", "amqp.correlation-id", b"c-1"),
    ("reply_to", "amq.rabbitmq.reply-to", "amqp.reply-to", b"amq.rabbitmq.reply-to"),
    ("expiration", "60000", "amqp.expiration", b"60000"),
    ("message_id", "m-1", "amqp.message-id", b"m-1"),
    ("timestamp", 1704164645, "amqp.timestamp", b"1704164645"),
    ("message_type", "order.created", "amqp.type", b"order.created"),
    ("user_id", "guest", "amqp.user-id", b"guest"),
    ("app_id", "shop", "amqp.app-id", b"shop"),
    ("cluster_id", "c", "amqp.cluster-id", b"c"),
])
def test_each_property_is_one_readable_header(attribute, value, header, text):
    if isinstance(value, str):
        encoded = shortstr(value.encode())
    elif attribute == "timestamp":
        encoded = struct.pack(">Q", value)
    else:
        encoded = bytes((value,))
    raw = section(PROPERTY_BITS[attribute], encoded)
    if attribute != "cluster_id":  # pamqp refuses to encode cluster-id; RabbitMQ passes it on
        assert raw == Basic.Properties(**{attribute: value if attribute != "timestamp" else
                                          datetime.datetime.fromtimestamp(value, datetime.timezone.utc)}).marshal()
    record = amqp_round_trip("amq.topic", "a.b", raw)
    assert record.key == b"a.b"
    assert record.headers == (Header("amqp.exchange", b"amq.topic"), Header(header, text))


def test_all_properties_in_wire_order_and_accessors():
    raw = Basic.Properties(content_type="text/plain", content_encoding="utf-8", headers={"a": "b"},
                           delivery_mode=2, priority=5, correlation_id="c", reply_to="r", expiration="1500",
                           message_id="m", timestamp=datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
                           message_type="t", user_id="u", app_id="a").marshal()
    raw = bytes((raw[0], raw[1] | 0x04)) + raw[2:] + shortstr(b"cl")  # cluster-id (pamqp will not write it)
    record = amqp_round_trip("", "q", raw)
    assert [h.key for h in record.headers] == [
        "amqp.content-type", "amqp.content-encoding", "amqp.delivery-mode", "amqp.priority",
        "amqp.correlation-id", "amqp.reply-to", "amqp.expiration", "amqp.message-id", "amqp.timestamp",
        "amqp.type", "amqp.user-id", "amqp.app-id", "amqp.cluster-id", "a"]
    for source in (record, record.headers, raw, bytearray(raw)):
        assert message_fields.priority(source) == 5
        assert message_fields.delivery_mode(source) == 2
        assert message_fields.expiration(source) == 1500
        assert message_fields.timestamp(source) == 1577836800
    assert message_fields.headers_table(record) == message_fields.headers_table(raw) == {"a": "b"}


def test_no_properties_default_exchange_is_marked_as_amqp():
    result = mapping.record_from_amqp("", "queue", b"\x00\x00", b"hi", NOW)
    assert result == (b"queue", b"hi", (Header("amqp.exchange", b""),), NOW)
    assert mapping.amqp_from_record(to_record(result)) == ("", "queue", b"\x00\x00")
    record = amqp_round_trip("", "", b"\x00\x00")
    assert record.key is None  # the empty routing key is a null key
    for accessor in (message_fields.priority, message_fields.delivery_mode, message_fields.expiration, message_fields.timestamp):
        assert accessor(record) is None
    assert message_fields.headers_table(record) == {}


def test_string_headers_only_on_the_default_exchange_still_marked():
    raw = section(0x2000, table((b"k", b"S" + longstr(b"v"))))
    record = amqp_round_trip("", "q", raw)
    assert record.headers == (Header("amqp.exchange", b""), Header("k", b"v"))


def test_empty_headers_table_is_kept():
    raw = section(0x2000, table())
    record = amqp_round_trip("x", "", raw)
    assert record.headers == (Header("amqp.exchange", b"x"), Header("amqp.headers", b""))


def test_short_strings_are_utf8_bytes_as_sent():
    raw = section(0x8000 | 0x0080, shortstr("é".encode()), shortstr(b"x" * 255))
    record = amqp_round_trip("e", "k", raw)
    assert record.headers[1:] == (Header("amqp.content-type", "é".encode()), Header("amqp.message-id", b"x" * 255))


def test_headers_are_real_header_objects():
    raw = Basic.Properties(content_type="a", headers={"x": "y", "n": 1}).marshal()
    _, _, headers, _ = mapping.record_from_amqp("e", "k", raw, b"", NOW)
    rebuilt = tuple(Header(h.key, h.value) for h in headers)
    assert headers == rebuilt and hash(headers) == hash(rebuilt)
    assert all(type(h) is Header for h in headers)


# --- unit examples: field types -------------------------------------------------------------

@pytest.mark.parametrize("name, value, header, text", [
    (b"flag", b"t\x01", "amqp.h.t.flag", b"1"),
    (b"flag", b"t\x00", "amqp.h.t.flag", b"0"),
    (b"flag", b"t\x07", "amqp.h.t.flag", b"7"),
    (b"n", b"b\x80", "amqp.h.b.n", b"-128"),
    (b"n", b"B\xc8", "amqp.h.B.n", b"200"),
    (b"n", b"s\xff\xfe", "amqp.h.s.n", b"-2"),
    (b"n", b"u\xff\xfe", "amqp.h.u.n", b"65534"),
    (b"n", b"I" + struct.pack(">i", -5), "amqp.h.I.n", b"-5"),
    (b"n", b"i" + struct.pack(">I", 4000000000), "amqp.h.i.n", b"4000000000"),
    (b"n", b"l" + struct.pack(">q", -(1 << 63)), "amqp.h.l.n", b"-9223372036854775808"),
    (b"n", b"L" + struct.pack(">q", 7), "amqp.h.L.n", b"7"),
    (b"x", b"f" + struct.pack(">f", 1.5), "amqp.h.f.x", b"1.5"),
    (b"x", b"f" + struct.pack(">f", 0.1), "amqp.h.f.x", b"0.1"),
    (b"x", b"f" + struct.pack(">f", -0.0), "amqp.h.f.x", b"-0"),
    (b"x", b"f" + struct.pack(">f", math.inf), "amqp.h.f.x", b"inf"),
    (b"x", b"f\x7f\xc0\x00\x01", "amqp.h.f.x", b"\x7f\xc0\x00\x01"),  # a NaN with a payload: raw
    (b"x", b"d" + struct.pack(">d", 0.1), "amqp.h.d.x", b"0.1"),
    (b"x", b"d" + struct.pack(">d", -1e300), "amqp.h.d.x", b"-1e+300"),
    (b"x", b"d\xff\xf8\x00\x00\x00\x00\x00\x00", "amqp.h.d.x", b"\xff\xf8\x00\x00\x00\x00\x00\x00"),
    (b"x", b"D\x02" + struct.pack(">I", 12345), "amqp.h.D.x", b"123.45"),
    (b"x", b"D\x05" + struct.pack(">I", 12), "amqp.h.D.x", b"0.00012"),
    (b"x", b"D\x00" + struct.pack(">I", 12), "amqp.h.D.x", b"12"),
    (b"x", b"D\x03" + struct.pack(">I", 0), "amqp.h.D.x", b"0.000"),
    (b"at", b"T" + struct.pack(">Q", 1704164645), "amqp.h.T.at", b"1704164645"),
    (b"s", b"S" + longstr(b"plain"), "s", b"plain"),
    (b"amqp.priority", b"S" + longstr(b"9"), "amqp.h.S.amqp.priority", b"9"),
    (b"blob", b"x" + longstr(b"\x00\x01"), "amqp.h.x.blob", b"\x00\x01"),
    (b"none", b"V", "none", None),
    (b"amqp.none", b"V", "amqp.h.V.amqp.none", None),
    (b"tbl", b"F" + table((b"a", b"I\x00\x00\x00\x01")), "amqp.h.F.tbl", b"\x01aI\x00\x00\x00\x01"),
    (b"arr", b"A" + longstr(b"b\x01S" + longstr(b"q")), "amqp.h.A.arr", b"b\x01S\x00\x00\x00\x01q"),
    (b"", b"S" + longstr(b""), "", b""),
])
def test_each_field_type(name, value, header, text):
    raw = section(0x2000, table((name, value)))
    record = amqp_round_trip("e", "k", raw)
    assert record.headers[1:] == (Header(header, text),)


def test_entry_order_duplicates_and_widths_survive():
    raw = section(0x2000, table((b"b", b"S" + longstr(b"1")), (b"a", b"b\x01"), (b"b", b"I\x00\x00\x00\x01"),
                                (b"a", b"l" + struct.pack(">q", 1))))
    record = amqp_round_trip("e", "k", raw)
    assert [h.key for h in record.headers[1:]] == ["b", "amqp.h.b.a", "amqp.h.I.b", "amqp.h.l.a"]


def test_headers_table_decodes_like_pamqp():
    raw = Basic.Properties(headers={
        "s": "text", "n": 42, "neg": -7, "big": 1 << 40, "f": 2.5, "t": True, "v": None,
        "d": decimal.Decimal("1.25"), "ts": datetime.datetime(2021, 5, 6, tzinfo=datetime.timezone.utc),
        "tbl": {"inner": [1, "two", {"x": False}]}, "bin": bytearray(b"\xff\x00")}).marshal()
    ours = message_fields.headers_table(raw)
    _, theirs = pamqp_decode.field_table(raw[2:])
    assert ours == {k: bytes(v) if isinstance(v, bytearray) else v for k, v in theirs.items()}


# --- fallback: sections stored verbatim -----------------------------------------------------

@pytest.mark.parametrize("raw", [
    b"\x80\x01\x00\x00" + shortstr(b"text/plain"),  # a continuation flag word (empty)
    b"\x80\x03\x00\x04" + shortstr(b"text/plain") + b"extra",  # reserved bit, second word, unknown tail
    b"\x80\x00" + shortstr(b"text/plain") + b"trailing",
    b"\x00\x00junk",
    section(0x2000, table((b"\xff", b"S" + longstr(b"v")))),  # a table key that is not UTF-8
    section(0x8000, shortstr(b"\xff\xfe")),  # a short string that is not UTF-8
    section(0x2000, table((b"t", b"A" + longstr(b"F" + table((b"\x80", b"V")))))),  # a nested key, too
])
def test_unrepresentable_sections_are_stored_verbatim(raw):
    record = amqp_round_trip("", "k", raw)
    assert record.headers == (Header("amqp.exchange", b""), Header("amqp.properties", raw))
    message_fields.headers_table(record)  # decodable


def test_verbatim_sections_still_answer_accessors():
    raw = b"\x08\x01\x00\x00\x07"  # priority 7, then an empty continuation word
    record = amqp_round_trip("ex", "k", raw)
    assert message_fields.priority(record) == 7 and message_fields.priority(raw) == 7
    assert message_fields.expiration(record) is None


# --- malformed sections ---------------------------------------------------------------------

@pytest.mark.parametrize("raw, reason", [
    (b"", "no property flags"),
    (b"\x80", "no property flags"),
    (b"\x80\x00", "truncated"),
    (b"\x80\x00\x05ab", "content-type runs past the end"),
    (b"\x10\x00", "truncated"),
    (b"\x00\x40\x00\x00\x00", "truncated"),
    (b"\x20\x00\x00\x00\x00\x09\x01a", "headers table runs past the end"),
    (section(0x2000, table((b"a", b"Z")) ), "unknown field value type b'Z'"),
    (section(0x2000, table((b"a", b"U\x00\x01"))), "unknown field value type b'U'"),
    (section(0x2000, longstr(b"\x01aI\x00\x00")), "runs past its table"),
    (section(0x2000, longstr(b"\x05ab")), "entry runs past its table"),
    (section(0x2000, table((b"a", b"A" + longstr(b"Ix"))) ), "runs past its table"),
    (section(0x2000, table((b"a", b"F" + longstr(b"\x01bQ")))), "unknown field value type b'Q'"),
    (section(0x2000, table((b"a", b"S\x00\x00\x00\x09abc")) ), "runs past its table"),
    (b"\x00\x01" * 9, "too many property flag words"),
    (b"\x00\x01", "truncated property flags"),
    (b"\x00\x03\x00\x01\x00", "truncated property flags"),
])
def test_malformed_sections_raise_value_error_with_reason(raw, reason):
    with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace("'", ".")):
        mapping.record_from_amqp("", "k", raw, b"", NOW)


def test_deep_nesting_is_refused_not_a_crash():
    value = b"V"
    for _ in range(500):
        value = b"A" + longstr(value)
    with pytest.raises(ValueError, match="nested"):
        mapping.record_from_amqp("", "k", section(0x2000, table((b"a", value))), b"", NOW)


# --- Kafka-origin records -------------------------------------------------------------------

def test_kafka_record_delivery_bytes():
    record = Record(5, 1_700_000_000_123, b"order-1", b"{}", (Header("trace", b"t-1"), Header("flag", None)))
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert (exchange, routing_key) == ("", "order-1")
    expected_table = table((b"trace", b"S" + longstr(b"t-1")), (b"flag", b"V"),
                           (b"x-kafka-timestamp", b"l" + struct.pack(">q", 1_700_000_000_123)))
    assert raw == section(0x2000 | 0x0040, expected_table, struct.pack(">Q", 1_700_000_000))
    properties = Basic.Properties()
    properties.unmarshal(0x2040, raw[2:])  # a stock client reads it
    assert properties.headers == {"trace": "t-1", "flag": None, "x-kafka-timestamp": 1_700_000_000_123}
    assert properties.timestamp == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc)
    assert message_fields.headers_table(record) == properties.headers
    assert message_fields.timestamp(record) == 1_700_000_000
    assert message_fields.priority(record) is None and message_fields.expiration(record) is None
    # re-published verbatim: the same record again, create time included
    assert mapping.record_from_amqp(exchange, routing_key, raw, b"{}", NOW) == (
        b"order-1", b"{}", record.headers, 1_700_000_000_123)


@pytest.mark.parametrize("key, routing_key, marker", [
    (None, "", None),
    (b"", "", b""),
    (b"\xff\x00", "", b"\xff\x00"),
    (b"k" * 256, "", b"k" * 256),
    (b"k" * 255, "k" * 255, None),
    ("ключ".encode(), "ключ", None),
])
def test_kafka_keys(key, routing_key, marker):
    record = Record(0, 0, key, b"v", ())
    exchange, got_key, raw = mapping.amqp_from_record(record)
    assert got_key == routing_key
    headers = message_fields.headers_table(raw)
    assert headers.get("x-kafka-key") == marker
    assert mapping.record_from_amqp(exchange, got_key, raw, b"v", NOW) == (key, b"v", (), 0)


def test_kafka_tombstone_and_negative_timestamp():
    record = Record(0, -1, b"k", None, (Header("h", b"1"),))
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert raw[:2] == b"\x20\x00"  # no timestamp property for a negative timestamp
    assert message_fields.headers_table(raw)["x-kafka-tombstone"] is True
    assert mapping.record_from_amqp(exchange, routing_key, raw, b"", NOW) == (b"k", None, record.headers, -1)
    # the same properties with a body are not a tombstone: stored AMQP-form
    stored = amqp_round_trip(exchange, routing_key, raw, b"not empty")
    assert Header("amqp.h.t.x-kafka-tombstone", b"1") in stored.headers


def test_kafka_header_names_too_long_for_a_table_key():
    headers = (Header("n" * 300, b"v"), Header("short", None))
    record = Record(0, 1000, None, b"v", headers)
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert message_fields.headers_table(raw)["x-kafka-headers"] == [["n" * 300, "v"], ["short", None]]
    assert mapping.record_from_amqp(exchange, routing_key, raw, b"v", NOW) == (None, b"v", headers, 1000)


def test_kafka_lookalikes_are_stored_amqp_form():
    record = Record(0, 5000, b"k", b"v", (Header("h", b"1"),))
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    amqp_round_trip("amq.direct", routing_key, raw)  # another exchange
    # another routing key is another Kafka key (the key is not in the section)
    assert mapping.record_from_amqp("", "other", raw, b"v", NOW) == (b"other", b"v", record.headers, 5000)
    amqp_round_trip("", routing_key, raw[:-8] + struct.pack(">Q", 6))  # a timestamp not matching
    tampered = raw.replace(b"\x01hS", b"\x01hs")[:-8]  # header "h" as an int16 ... and no timestamp
    with pytest.raises(ValueError):
        mapping.record_from_amqp("", routing_key, tampered, b"v", NOW)


def test_kafka_producer_may_set_properties_with_amqp_headers():
    record = Record(0, 0, b"k", b"v", (Header("amqp.content-type", b"text/plain"), Header("amqp.priority", b"3"),
                                       Header("app", b"x"), Header("amqp.h.I.retries", b"4")))
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert (exchange, routing_key) == ("", "k")
    assert raw == Basic.Properties(content_type="text/plain", priority=3).marshal()[:2].replace(
        b"\x88", b"\xa8") + shortstr(b"text/plain") + table((b"app", b"S" + longstr(b"x")),
                                                           (b"retries", b"I\x00\x00\x00\x04")) + b"\x03"
    assert message_fields.priority(record) == 3


@pytest.mark.parametrize("header", [
    Header("amqp.priority", b"high"), Header("amqp.priority", b"03"), Header("amqp.priority", b"256"),
    Header("amqp.priority", None), Header("amqp.delivery-mode", b"-1"), Header("amqp.timestamp", b"1.5"),
    Header("amqp.h.I.n", b"99999999999"), Header("amqp.h.Z.n", b"1"), Header("amqp.h.t.n", b"true"),
    Header("amqp.h.f.n", b"1e39"), Header("amqp.h.d.n", b"0.10"), Header("amqp.h.D.n", b"1."),
    Header("amqp.h.F.n", b"\x01"), Header("amqp.h.V.n", b"x"), Header("amqp.h.S", b"x"),
    Header("amqp.unknown", b"x"), Header("amqp.exchange", b"\xff"), Header("amqp.headers", b"x"),
    Header("amqp.properties", b"\x80\x00\x09"), Header("amqp.content-type", b"x" * 256),
])
def test_reserved_headers_that_do_not_decode_become_string_entries(header):
    record = Record(0, 0, None, b"", (header,))
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert exchange == "" and routing_key == ""
    wanted = "" if header.value is None else header.value.decode("utf-8", "replace")
    got = message_fields.headers_table(raw)
    assert list(got) == [header.key] and (got[header.key] == header.value if header.value is None
                                          else got[header.key] in (header.value, wanted))
    assert message_fields.priority(record) is None


def test_duplicate_property_headers_first_valid_wins():
    record = Record(0, 0, None, b"", (Header("amqp.priority", b"x"), Header("amqp.priority", b"4"),
                                      Header("amqp.priority", b"5")))
    assert message_fields.priority(record) == 4
    raw = mapping.amqp_from_record(record)[2]
    assert message_fields.priority(raw) == 4
    assert list(message_fields.headers_table(raw)) == ["amqp.priority"]


def test_amqp_form_with_a_key_that_is_not_utf8_gets_a_lossy_routing_key():
    record = Record(0, 0, b"a\xffb" * 100, b"", (Header("amqp.exchange", b"e"),))
    exchange, routing_key, _ = mapping.amqp_from_record(record)
    assert exchange == "e" and len(routing_key.encode()) <= 255 and routing_key.startswith("a\ufffdb")


# --- dead-lettering ---------------------------------------------------------------------------

def test_dead_lettered_adds_x_death_and_drops_expiration():
    raw = Basic.Properties(content_type="a", expiration="500", priority=1,
                           headers={"keep": "me", "w": 1}).marshal()
    once = amqp_properties.dead_lettered(raw, queue="work", reason="expired", exchange="ex", routing_keys=["rk"],
                                 now_s=100)
    assert message_fields.expiration(once) is None and message_fields.priority(once) == 1
    table_ = message_fields.headers_table(once)
    assert table_["keep"] == "me" and table_["w"] == 1
    assert table_["x-death"] == [{"count": 1, "reason": "expired", "queue": "work",
                                  "time": datetime.datetime.fromtimestamp(100, datetime.timezone.utc),
                                  "exchange": "ex", "routing-keys": ["rk"], "original-expiration": "500"}]
    assert table_["x-first-death-queue"] == "work" and table_["x-last-death-reason"] == "expired"
    twice = amqp_properties.dead_lettered(once, queue="work", reason="expired", exchange="ex", routing_keys=["rk"],
                                  now_s=200)
    other = amqp_properties.dead_lettered(twice, queue="retry", reason="rejected", exchange="", routing_keys=["a", "b"],
                                  now_s=300)
    deaths = message_fields.headers_table(other)["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [("retry", "rejected", 1), ("work", "expired", 2)]
    again = amqp_properties.dead_lettered(other, queue="work", reason="expired", exchange="ex", routing_keys=["rk"],
                                  now_s=400)
    final = message_fields.headers_table(again)
    assert [(d["queue"], d["count"]) for d in final["x-death"]] == [("work", 3), ("retry", 1)]
    assert final["x-first-death-queue"] == "work" and final["x-last-death-queue"] == "work"
    assert final["x-last-death-exchange"] == "ex"
    properties = Basic.Properties()
    properties.unmarshal(struct.unpack(">H", again[:2])[0], again[2:])
    assert properties.headers["x-death"][0]["count"] == 3 and properties.expiration is None
    amqp_round_trip("dlx", "rk", again)


def test_dead_lettered_a_kafka_record_without_headers():
    record = Record(0, 5000, b"k", b"v", ())
    _, routing_key, raw = mapping.amqp_from_record(record)
    new = amqp_properties.dead_lettered(raw, queue="q", reason="maxlen", exchange="", routing_keys=[routing_key],
                                now_s=9)
    assert message_fields.headers_table(new)["x-death"][0]["reason"] == "maxlen"
    assert message_fields.timestamp(new) == 5


def test_with_headers():
    raw = b"\x81\x01\x00\x00" + shortstr(b"ct") + shortstr(b"60") + b"tail"
    new = amqp_properties.with_headers(raw, amqp_properties.encode_table([("a", "I", 1)]), drop_expiration=True)
    assert new == b"\xa0\x01\x00\x00" + shortstr(b"ct") + table((b"a", b"I\x00\x00\x00\x01")) + b"tail"
    assert amqp_properties.with_headers(raw) == raw


def test_encode_table_types():
    encoded = amqp_properties.encode_table([
        ("s", "S", "x"), ("b", "b", -1), ("t", "t", True), ("d", "D", decimal.Decimal("1.25")),
        ("T", "T", datetime.datetime(1970, 1, 1, 0, 0, 7, tzinfo=datetime.timezone.utc)), ("v", "V", None),
        ("f", "F", [("in", "l", 2)]), ("a", "A", [("S", "q"), ("u", 3)]), ("x", "x", b"\x00"),
        ("fl", "f", 0.5), ("db", "d", 0.25)])
    assert message_fields.headers_table(section(0x2000, encoded)) == {
        "s": "x", "b": -1, "t": True, "d": decimal.Decimal("1.25"),
        "T": datetime.datetime(1970, 1, 1, 0, 0, 7, tzinfo=datetime.timezone.utc), "v": None,
        "f": {"in": 2}, "a": ["q", 3], "x": b"\x00", "fl": 0.5, "db": 0.25}


# --- property tests ---------------------------------------------------------------------------

def _int_value(code: str, fmt: str, low: int, high: int):
    return st.integers(low, high).map(lambda n: code.encode() + struct.pack(fmt, n))


_SCALARS = st.one_of(
    _int_value("t", ">B", 0, 255), _int_value("b", ">b", -128, 127), _int_value("B", ">B", 0, 255),
    _int_value("s", ">h", -(1 << 15), (1 << 15) - 1), _int_value("u", ">H", 0, (1 << 16) - 1),
    _int_value("I", ">i", -(1 << 31), (1 << 31) - 1), _int_value("i", ">I", 0, (1 << 32) - 1),
    _int_value("l", ">q", -(1 << 63), (1 << 63) - 1), _int_value("L", ">q", -(1 << 63), (1 << 63) - 1),
    _int_value("T", ">Q", 0, (1 << 64) - 1),
    st.binary(min_size=4, max_size=4).map(lambda b: b"f" + b),
    st.floats(width=32).map(lambda x: b"f" + struct.pack(">f", x)),
    st.binary(min_size=8, max_size=8).map(lambda b: b"d" + b),
    st.floats().map(lambda x: b"d" + struct.pack(">d", x)),
    st.binary(min_size=5, max_size=5).map(lambda b: b"D" + b),
    st.binary(max_size=12).map(lambda b: b"S" + longstr(b)),
    st.text(max_size=8).map(lambda s: b"S" + longstr(s.encode())),
    st.binary(max_size=12).map(lambda b: b"x" + longstr(b)),
    st.just(b"V"),
)
_NESTED_NAMES = st.text(max_size=5).map(str.encode)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(st.tuples(_NESTED_NAMES, children), max_size=4).map(lambda es: b"F" + table(*es)),
        st.lists(children, max_size=4).map(lambda vs: b"A" + longstr(b"".join(vs)))),
    max_leaves=12)
_TOP_NAMES = st.one_of(
    st.text(max_size=10).map(str.encode).filter(lambda b: len(b) <= 255),
    st.sampled_from([b"", b"amqp.", b"amqp.priority", b"amqp.h.S.x", b"x-kafka-timestamp", b"x-kafka-key",
                     b"x-death"]))
_ENTRIES = st.lists(st.tuples(_TOP_NAMES, _VALUES), max_size=6)
_SHORT = st.one_of(st.text(max_size=12).map(str.encode).filter(lambda b: len(b) <= 255),
                   st.sampled_from([b"", b"x" * 255, "é".encode() * 127 + b"x"]))


@st.composite
def properties_sections(draw) -> bytes:
    flags = 0
    parts = []
    for name, bit in PROPERTY_BITS.items():
        if not draw(st.booleans()):
            continue
        flags |= bit
        if name == "headers":
            entries = draw(_ENTRIES)
            if draw(st.booleans()):  # now and then shaped like a Kafka delivery
                entries.append((b"x-kafka-timestamp", b"l" + struct.pack(">q", draw(st.integers(0, 1 << 40)))))
            parts.append(table(*entries))
        elif name in ("delivery_mode", "priority"):
            parts.append(bytes((draw(st.integers(0, 255)),)))
        elif name == "timestamp":
            parts.append(struct.pack(">Q", draw(st.integers(0, (1 << 64) - 1))))
        else:
            parts.append(shortstr(draw(_SHORT)))
    return section(flags, *parts)


_EXCHANGES = st.sampled_from(["", "amq.direct", "amq.topic", "ex-ü"])
_ROUTING_KEYS = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(exchange=_EXCHANGES, routing_key=_ROUTING_KEYS, raw=properties_sections(), body=st.binary(max_size=20))
def test_amqp_record_amqp_is_byte_exact(exchange, routing_key, raw, body):
    record = amqp_round_trip(exchange, routing_key, raw, body)
    assert not any(h.key == "amqp.properties" for h in record.headers)  # the readable form suffices
    message_fields.headers_table(record)
    # the accessors agree with the property section
    for accessor in (message_fields.priority, message_fields.delivery_mode, message_fields.expiration, message_fields.timestamp):
        assert accessor(record) == accessor(raw)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(exchange=_EXCHANGES, routing_key=_ROUTING_KEYS, raw=properties_sections(),
       extra_words=st.lists(st.integers(0, 0xFFFF), max_size=3), reserved=st.booleans(),
       tail=st.binary(max_size=6))
def test_odd_sections_round_trip_verbatim(exchange, routing_key, raw, extra_words, reserved, tail):
    flags = struct.unpack(">H", raw[:2])[0] | (2 if reserved else 0)
    words = [w | 1 for w in extra_words[:-1]] + [w & 0xFFFE for w in extra_words[-1:]]
    if words:
        flags |= 1
    odd = struct.pack(">H", flags) + b"".join(struct.pack(">H", w) for w in words) + raw[2:] + tail
    amqp_round_trip(exchange, routing_key, odd)


@settings(max_examples=500)
@given(exchange=_EXCHANGES, raw=st.binary(max_size=40))
def test_arbitrary_bytes_either_refused_or_exact(exchange, raw):
    try:
        result = mapping.record_from_amqp(exchange, "k", raw, b"", NOW)
    except ValueError:
        return
    assert mapping.amqp_from_record(to_record(result)) == (exchange, "k", raw)


_KAFKA_NAMES = st.one_of(st.text(max_size=10), st.sampled_from(["", "x-kafka-timestamp", "x-kafka-key",
                                                                 "x-kafka-tombstone", "x-kafka-headers"]))
_KAFKA_HEADERS = st.lists(
    st.builds(Header, _KAFKA_NAMES.filter(lambda s: not s.startswith("amqp.")),
              st.one_of(st.none(), st.binary(max_size=12))), max_size=6).map(tuple)


@settings(max_examples=400)
@given(key=st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=8).map(str.encode),
                     st.binary(min_size=250, max_size=300)),
       value=st.one_of(st.none(), st.binary(max_size=12)),
       headers=st.one_of(_KAFKA_HEADERS, _KAFKA_HEADERS.map(lambda hs: hs + (Header("h" * 256, b"v"),))),
       timestamp=st.integers(-(1 << 63), (1 << 63) - 1))
def test_kafka_record_amqp_record_is_exact(key, value, headers, timestamp):
    record = Record(3, timestamp, key, value, headers)
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert exchange == ""
    assert len(routing_key.encode()) <= 255
    properties = Basic.Properties()  # a stock client decodes the delivery
    properties.unmarshal(struct.unpack(">H", raw[:2])[0], raw[2:])
    assert mapping.record_from_amqp(exchange, routing_key, raw, value or b"", NOW) == (
        key, value, headers, timestamp)
    # and the delivery is itself a section that survives AMQP -> record -> AMQP
    again = to_record(mapping.record_from_amqp(exchange, routing_key, raw, value or b"", NOW))
    assert mapping.amqp_from_record(again) == (exchange, routing_key, raw)


_RESERVED_NAMES = st.sampled_from([
    "amqp.exchange", "amqp.content-type", "amqp.priority", "amqp.delivery-mode", "amqp.expiration",
    "amqp.timestamp", "amqp.headers", "amqp.properties", "amqp.h.I.n", "amqp.h.t.n", "amqp.h.f.n", "amqp.h.D.n",
    "amqp.h.F.n", "amqp.h.A.n", "amqp.h.V.n", "amqp.h.S.n", "amqp.h.Q.n", "amqp.h.", "amqp.zzz", "plain"])
_JUNK_VALUES = st.one_of(st.none(), st.binary(max_size=10), st.integers(-300, 300).map(lambda n: b"%d" % n),
                         st.sampled_from([b"", b"0", b"1.5", b"inf", b"\x80\x00\x01x", b"\x00\x00"]))


@settings(max_examples=400)
@given(headers=st.lists(st.builds(Header, _RESERVED_NAMES, _JUNK_VALUES), max_size=6).map(tuple),
       key=st.one_of(st.none(), st.binary(max_size=300)))
def test_any_record_is_deliverable(headers, key):
    record = Record(0, 0, key, b"", headers)
    exchange, routing_key, raw = mapping.amqp_from_record(record)
    assert len(exchange.encode()) <= 255 and len(routing_key.encode()) <= 255
    properties = Basic.Properties()
    try:
        properties.unmarshal(struct.unpack(">H", raw[:2])[0], raw[2:])
    except ValueError as exc:
        # junk bytes given as a field array or table may hold a timestamp after year 9999: well formed
        # AMQP, relayed as RabbitMQ relays it, but past the end of pamqp's datetime
        assert "out of range" in str(exc) and b"T" in raw, exc
    message_fields.headers_table(record)
    for accessor in (message_fields.priority, message_fields.delivery_mode, message_fields.expiration):
        assert accessor(record) == accessor(raw)
    # what a client would publish back is stored, and delivered again identically
    amqp_round_trip(exchange, routing_key, raw) if any(h.key.startswith("amqp.") for h in headers) else None


_PAMQP_SCALARS = st.one_of(
    _int_value("b", ">b", -128, 127), _int_value("B", ">B", 0, 255), _int_value("s", ">h", -(1 << 15), 32767),
    _int_value("u", ">H", 0, 65535), _int_value("I", ">i", -(1 << 31), (1 << 31) - 1),
    _int_value("i", ">I", 0, (1 << 32) - 1), _int_value("l", ">q", -(1 << 63), (1 << 63) - 1),
    _int_value("T", ">Q", 0, 0xFFFFFFFF), st.booleans().map(lambda b: b"t" + bytes((b,))),
    st.floats(allow_nan=False).map(lambda x: b"d" + struct.pack(">d", x)),
    st.text(max_size=6).map(lambda s: b"S" + longstr(s.encode())), st.just(b"V"),
    st.binary(max_size=5).map(lambda b: b"x" + longstr(b)),
    st.tuples(st.integers(0, 255), st.integers(0, (1 << 31) - 1)).map(  # pamqp reads D signed, RabbitMQ not
        lambda sv: b"D" + struct.pack(">BI", *sv)))
_PAMQP_VALUES = st.recursive(
    _PAMQP_SCALARS,
    lambda children: st.one_of(
        st.lists(st.tuples(st.text(max_size=4).map(str.encode), children), max_size=3).map(
            lambda es: b"F" + table(*es)),
        st.lists(children, max_size=3).map(lambda vs: b"A" + longstr(b"".join(vs)))),
    max_leaves=8)


def _normal(value):
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


@settings(max_examples=200)
@given(entries=st.lists(st.tuples(st.text(max_size=6).map(str.encode), _PAMQP_VALUES), max_size=5))
def test_headers_table_matches_pamqp(entries):
    encoded = table(*entries)
    _, theirs = pamqp_decode.field_table(encoded)
    assert message_fields.headers_table(section(0x2000, encoded)) == _normal(theirs)
