"""wire.amqp10: the AMQP 1.0 type system and message sections, against the spec's encodings and
rstream's independent encoder."""
from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rstream import AMQPMessage, amqp_decoder
from rstream._pyamqp.message import Header as RHeader
from rstream._pyamqp.message import Properties as RProperties

from wire.amqp10 import (
    AMQP10Error, Array, Described, Message, Symbol, Typed, decode_message, encode_message, encode_value, value_end,
)

U = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")


def value_of(encoded: bytes):
    """The value of an amqp-value section holding ``encoded``."""
    msg = decode_message(b"\x00\x53\x77" + encoded)
    assert msg.body_kind == "value"
    return msg.body[0]


# --- every primitive, from the spec's encodings ------------------------------------------------

PRIMITIVES = [
    ("40", None),
    ("41", True), ("42", False), ("5601", Typed(0x56, True)), ("5600", Typed(0x56, False)),
    ("50ff", Typed(0x50, 255)), ("60ffff", Typed(0x60, 65535)),
    ("43", Typed(0x70, 0)), ("5207", Typed(0x70, 7)), ("70ffffffff", Typed(0x70, 2**32 - 1)),
    ("44", Typed(0x80, 0)), ("5307", Typed(0x80, 7)), ("80ffffffffffffffff", Typed(0x80, 2**64 - 1)),
    ("51ff", Typed(0x51, -1)), ("618000", Typed(0x61, -32768)),
    ("54fe", Typed(0x71, -2)), ("7180000000", Typed(0x71, -2**31)),
    ("5580", Typed(0x81, -128)), ("817fffffffffffffff", Typed(0x81, 2**63 - 1)),
    ("723fc00000", Typed(0x72, 1.5)), ("82bff8000000000000", -1.5),
    ("7401020304", Typed(0x74, b"\x01\x02\x03\x04")), ("84" + "01" * 8, Typed(0x84, b"\x01" * 8)),
    ("94" + "02" * 16, Typed(0x94, b"\x02" * 16)),
    ("730001f600", Typed(0x73, "\U0001f600")),
    ("830000018bcfe5687b", Typed(0x83, 1700000000123)),
    ("98" + U.hex, U),
    ("a003616263", b"abc"), ("b000000003616263", b"abc"),
    ("a102c3a9", "\u00e9"), ("b100000002c3a9", "\u00e9"),
    ("a303666f6f", Symbol("foo")), ("b300000003666f6f", Symbol("foo")),
    ("45", []), ("c004025401 41", [Typed(0x71, 1), True]),
    ("d0 00000007 00000002 5401 41", [Typed(0x71, 1), True]),
    ("c1 06 02 a30161 5207", {Symbol("a"): Typed(0x70, 7)}),
    ("d1 00000009 00000002 a30161 5207", {Symbol("a"): Typed(0x70, 7)}),
    ("e0 04 02 52 01 02", Array(0x70, [1, 2])),  # smalluint elements: canonically uint
    ("f0 0000000d 00000002 70 00000001 00000002", Array(0x70, [1, 2])),
    ("e0 02 01 41", Array(0x56, [True])),
    ("e0 06 02 a1 0161 0162", Array(0xa1, ["a", "b"])),
    ("e0 02 01 40", Array(0x40, [None])),
    ("00 53 74 a1 01 78", Described(0x74, "x")),
    ("00 a3 04 666f6f2e 40", Described(Symbol("foo."), None)),
]


@pytest.mark.parametrize("encoded, expected", PRIMITIVES)
def test_decodes_every_primitive(encoded, expected):
    got = value_of(bytes.fromhex(encoded.replace(" ", "")))
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("encoded, expected", PRIMITIVES)
def test_reencodes_with_the_same_type(encoded, expected):
    assert value_of(encode_value(expected)) == expected


def test_arrays_of_described_and_compound_elements():
    described = value_of(bytes.fromhex("e00902005375a0") + b"\x01a\x01b")  # array of described binaries
    assert described == Array(0xa0, [b"a", b"b"], descriptor=0x75)
    assert value_of(encode_value(described)) == described
    lists = value_of(encode_value(Array(0xc0, [[Typed(0x71, 1)], []])))
    assert lists == Array(0xc0, [[Typed(0x71, 1)], []])
    maps = Array(0xc1, [{Symbol("k"): "v"}])
    assert value_of(encode_value(maps)) == maps
    assert value_of(bytes.fromhex("e0020041")) == Array(0x56, [])  # no elements, still a constructor


def test_compact_encodings():
    assert encode_value(Typed(0x70, 0)) == b"\x43"
    assert encode_value(Typed(0x70, 255)) == b"\x52\xff"
    assert encode_value(Typed(0x70, 256)) == b"\x70\x00\x00\x01\x00"
    assert encode_value(Typed(0x80, 0)) == b"\x44"
    assert encode_value(Typed(0x80, 5)) == b"\x53\x05"
    assert encode_value(Typed(0x71, -128)) == b"\x54\x80"
    assert encode_value(Typed(0x81, 127)) == b"\x55\x7f"
    assert encode_value(1) == b"\x54\x01" and encode_value(1 << 40) == b"\x81" + struct.pack(">q", 1 << 40)
    assert encode_value(True) == b"\x41" and encode_value(Typed(0x56, True)) == b"\x56\x01"
    assert encode_value([]) == b"\x45"
    assert encode_value("x" * 255)[:2] == b"\xa1\xff" and encode_value("x" * 256)[:5] == b"\xb1\x00\x00\x01\x00"
    assert encode_value(Symbol("s")) == b"\xa3\x01s" and encode_value(b"") == b"\xa0\x00"
    assert encode_value([None] * 254)[:3] == b"\xc0\xff\xfe"
    assert encode_value([None] * 255)[:1] == b"\xd0"  # size 256 does not fit an octet
    assert encode_value({}) == b"\xc1\x01\x00"
    assert encode_value(Described(0x70, [])) == b"\x00\x53\x70\x45"


@pytest.mark.parametrize("bad", [
    Typed(0x50, 256), Typed(0x70, -1), Typed(0x80, 1 << 64), Typed(0x71, 1 << 31), Typed(0x73, "ab"),
    Typed(0x74, b"\x00"), Typed(0x99, 1), 1 << 64, object(), Array(0x70, [-1]), Array(0x99, []),
    Array(0xc0, [{}]), Array(0x40, [1]), Array(0x98, [b"short"]),
])
def test_unencodable_values_raise_amqp10error(bad):
    with pytest.raises(AMQP10Error):
        encode_value(bad)


# --- messages --------------------------------------------------------------------------------

def test_a_message_with_every_section():
    msg = Message(header=[Typed(0x56, True), Typed(0x50, 4)], delivery_annotations={Symbol("x-d"): 1},
                  message_annotations={Symbol("x-opt"): "a"}, properties=["id", None, "to"],
                  application_properties={"k": Typed(0x71, 5)}, body_kind="data", body=[b"one", b"two"],
                  footer={Symbol("x-f"): b"\x00"})
    data = encode_message(msg)
    assert [data[p + 2] for p in section_starts(data)] == [0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x75, 0x78]
    back = decode_message(data)
    msg.delivery_annotations = {Symbol("x-d"): Typed(0x71, 1)}
    assert back == msg and encode_message(back) == data


def section_starts(data: bytes) -> list[int]:
    out, p = [], 0
    while p < len(data):
        out.append(p)
        p = value_end(data, p)
    return out


def test_symbolic_descriptors_and_body_kinds():
    data = (b"\x00\xa3\x14amqp:properties:list" + b"\xc0\x03\x01\xa1\x00"
            + b"\x00\xa3\x17amqp:amqp-sequence:list" + b"\x45" + b"\x00\x53\x76\xc0\x02\x01\x40")
    msg = decode_message(data)
    assert msg.properties == [""] and msg.body_kind == "sequence" and msg.body == [[], [None]]
    assert decode_message(b"\x00\x53\x77\x40").body == [None]
    assert decode_message(b"\x00\x53\x73\x45") == Message(properties=[])  # no body section: allowed


def test_rstream_messages_decode_and_reencode_byte_for_byte():
    m = AMQPMessage(
        body=b"hello", header=RHeader(durable=True, priority=3, ttl=60000),
        message_annotations={"x-routing-key": "rk", "x-n": 7},
        properties=RProperties(message_id=U, correlation_id=42, content_type="text/plain", subject="s",
                               reply_to="r", creation_time=1700000000123, group_id="g", group_sequence=9,
                               user_id=b"me", to="dest"),
        application_properties={"k": "v", "n": 1, "b": True, "f": 1.5, "big": 1 << 40, "bin": b"\x00\xff",
                                "none": None, "u": U, "t": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)})
    data = bytes(m)
    msg = decode_message(data)
    assert encode_message(msg) == data
    assert msg.header == [Typed(0x56, True), Typed(0x50, 3), Typed(0x70, 60000), None, None]
    assert msg.properties[:6] == [U, b"me", "dest", "s", "r", Typed(0x80, 42)]
    assert msg.properties[6] == "text/plain" and type(msg.properties[6]) is Symbol
    assert msg.properties[9] == Typed(0x83, 1700000000123)
    assert msg.application_properties["n"] == Typed(0x71, 1)
    assert msg.application_properties["big"] == Typed(0x81, 1 << 40)
    assert msg.application_properties["t"] == Typed(0x83, 1704067200000)
    assert msg.message_annotations == {Symbol("x-routing-key"): "rk", Symbol("x-n"): Typed(0x71, 7)}
    assert msg.body_kind == "data" and msg.body == [b"hello"]


def test_our_encoding_decodes_with_rstream():
    msg = Message(header=[Typed(0x56, True), Typed(0x50, 9)], message_annotations={Symbol("x-a"): Typed(0x81, -5)},
                  properties=["id", None, None, "subj", None, U, Symbol("text/plain")],
                  application_properties={"s": "é" * 200, "i": Typed(0x71, 70000), "l": [Typed(0x51, -1)]},
                  body_kind="data", body=[b"x" * 300])
    theirs = amqp_decoder(encode_message(msg))
    assert theirs.body == b"x" * 300 and theirs.header.durable is True and theirs.header.priority == 9
    assert theirs.properties.message_id == b"id" and theirs.properties.subject == b"subj"
    assert theirs.properties.correlation_id == U and theirs.properties.content_type == b"text/plain"
    assert theirs.application_properties == {b"s": "é".encode() * 200, b"i": 70000, b"l": [-1]}
    assert theirs.message_annotations == {b"x-a": -5}


# --- malformed input -------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    b"", b"\x40", b"\x00", b"\x00\x53", b"\x00\x53\x75", b"\x00\x53\x75\xa0\x05abc",  # truncated
    b"\x00\x53\x75\x40",  # data section that is not binary
    b"\x00\x53\x70\xc1\x01\x00",  # header that is not a list
    b"\x00\x53\x74\xc0\x01\x00",  # application properties that are not a map
    b"\x00\x53\x76\x40",  # amqp-sequence that is not a list
    b"\x00\x53\x79\x40", b"\x00\x53\x6f\x45", b"\x00\xa1\x01x\x40",  # unknown sections
    b"\x00\x53\x73\x45\x00\x53\x70\x45",  # out of order
    b"\x00\x53\x77\x40\x00\x53\x77\x40",  # two amqp-value sections
    b"\x00\x53\x75\xa0\x00\x00\x53\x77\x40",  # mixed body kinds
    b"\x00\x53\x77\x40\x01",  # trailing garbage
    b"\x00\x53\x77\x01", b"\x00\x53\x77\xff",  # unknown constructors
    b"\x00\x53\x77\x56\x02",  # boolean octet 2
    b"\x00\x53\x77\x73\x00\x11\x00\x00",  # char beyond U+10FFFF
    b"\x00\x53\x77\xa1\x02\xc3\x28",  # invalid UTF-8
    b"\x00\x53\x77\xc1\x03\x01\x40",  # odd map count
    b"\x00\x53\x77\xc1\x05\x02\x45\x40\x40",  # map key that is a list (unhashable)
    b"\x00\x53\x77\xc0\x03\x01\x40\x40",  # list size larger than its items
    b"\x00\x53\x77\xc0\x01\x02",  # list count larger than its items
    b"\x00\x53\x77\xc0\x00",  # list too small for its count
    b"\x00\x53\x77\xe0\x01\x01",  # array without an element constructor
    b"\x00\x53\x77\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40",  # 4 billion zero-width elements
    b"\x00\x53\x77\xe0\x04\x02\x00\x00\x53",  # nested descriptor in an array constructor
    b"\x00\x53\x77" + b"\xc0\x03\x01" * 100 + b"\x40",  # nested too deep (and sizes wrong)
    b"\x00\x53\x77" + b"\x00" * 5000 + b"\x40\x40",  # descriptors nested deeper than the stack
])
def test_malformed_messages_raise_amqp10error(data):
    with pytest.raises(AMQP10Error):
        decode_message(data)


def test_amqp10error_is_a_valueerror():
    assert issubclass(AMQP10Error, ValueError)


# --- hypothesis ------------------------------------------------------------------------------

INTS = {0x50: (0, 255), 0x60: (0, 65535), 0x70: (0, 2**32 - 1), 0x80: (0, 2**64 - 1),
        0x51: (-128, 127), 0x61: (-32768, 32767), 0x71: (-2**31, 2**31 - 1), 0x81: (-2**63, 2**63 - 1)}
float32 = st.floats(width=32, allow_nan=False)
text = st.text(max_size=20)
SCALAR_ITEMS = {  # array element type -> strategy of plain items
    0x40: st.none(), 0x56: st.booleans(), **{c: st.integers(lo, hi) for c, (lo, hi) in INTS.items()},
    0x72: float32, 0x82: st.floats(allow_nan=False), 0x83: st.integers(-2**63, 2**63 - 1),
    0x73: st.characters(), 0x98: st.uuids(), 0xa0: st.binary(max_size=300), 0xa1: text, 0xa3: text.map(Symbol),
    0x74: st.binary(min_size=4, max_size=4), 0x84: st.binary(min_size=8, max_size=8),
}
scalars = st.one_of(
    st.none(), st.booleans(), st.booleans().map(lambda b: Typed(0x56, b)),
    *(st.integers(lo, hi).map(lambda n, c=c: Typed(c, n)) for c, (lo, hi) in INTS.items()),
    float32.map(lambda x: Typed(0x72, x)), st.floats(allow_nan=False),
    st.binary(min_size=16, max_size=16).map(lambda b: Typed(0x94, b)),
    st.characters().map(lambda c: Typed(0x73, c)), st.integers(-2**63, 2**63 - 1).map(lambda n: Typed(0x83, n)),
    st.uuids(), st.binary(max_size=300), text, text.map(Symbol),
)
arrays = st.sampled_from(sorted(SCALAR_ITEMS)).flatmap(
    lambda c: st.lists(SCALAR_ITEMS[c], max_size=5).map(lambda items: Array(c, items)))
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(scalars, inner, max_size=5),
        st.builds(Described, st.one_of(st.integers(0, 2**64 - 1), text.map(Symbol)), inner),
        st.lists(st.lists(scalars, max_size=3), max_size=3).map(lambda ls: Array(0xc0, ls)),
    ),
    max_leaves=20,
)
annotations = st.dictionaries(text.map(Symbol), values, max_size=4)


@st.composite
def messages(draw):
    kind = draw(st.sampled_from(["data", "sequence", "value", None]))
    body = {"data": st.lists(st.binary(max_size=400), min_size=1, max_size=3),
            "sequence": st.lists(st.lists(values, max_size=3), min_size=1, max_size=3),
            "value": values.map(lambda v: [v]), None: st.just([])}[kind]
    msg = Message(
        header=draw(st.none() | st.lists(values, max_size=5)),
        delivery_annotations=draw(st.none() | annotations),
        message_annotations=draw(st.none() | annotations),
        properties=draw(st.none() | st.lists(values, max_size=13)),
        application_properties=draw(st.none() | st.dictionaries(text, scalars, max_size=5)),
        body_kind=kind, body=draw(body), footer=draw(st.none() | annotations))
    if msg == Message():
        msg.body_kind, msg.body = "data", [b""]
    return msg


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_round_trip_keeps_every_type(msg):
    data = encode_message(msg)
    back = decode_message(data)
    assert back == msg
    assert encode_message(back) == data
    assert section_starts(data)[-1] < len(data)


@settings(max_examples=300)
@given(values)
def test_value_end_agrees_with_the_encoding(v):
    data = encode_value(v) + b"tail"
    assert value_end(data) == len(data) - 4


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.data())
def test_corrupted_messages_decode_or_raise_amqp10error_only(msg, data):
    encoded = bytearray(encode_message(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(encoded) - 1))
        encoded[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    for candidate in (bytes(encoded), bytes(encoded[:cut])):
        try:
            decode_message(candidate)
        except AMQP10Error:
            pass


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_amqp10error_only(data):
    try:
        decode_message(data)
    except AMQP10Error:
        pass
    try:
        value_end(data)
    except AMQP10Error:
        pass


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={
    "message_id": st.one_of(text, st.integers(0, 2**64 - 1), st.uuids(), st.binary(max_size=20)),
    "user_id": st.binary(max_size=20), "to": text, "subject": text, "reply_to": text,
    "correlation_id": text, "content_type": text, "content_encoding": text,
    "absolute_expiry_time": st.integers(0, 2**62), "creation_time": st.integers(0, 2**62), "group_id": text,
    "group_sequence": st.integers(0, 2**32 - 1), "reply_to_group_id": text}),
    st.dictionaries(text, st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
                                    text, st.binary(max_size=300)), max_size=5),
    st.binary(max_size=600))
def test_any_rstream_message_reencodes_byte_for_byte(props, app, body):
    data = bytes(AMQPMessage(body=body, properties=RProperties(**props) if props else None,
                             application_properties=app or None))
    if not data:
        return  # rstream writes nothing for an empty message
    msg = decode_message(data)
    assert encode_message(msg) == data
    assert msg.body == ([body] if body else [])
