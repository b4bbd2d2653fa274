"""wire.amqp10_frames: performatives round-trip with their typed fields, a frame arrives whole
whatever the chunking, and any bytes (random, or a valid session mutated) fail only with
FrameError: the door turns that into an ``amqp:decode-error`` close."""
from __future__ import annotations

import struct

from hypothesis import given, strategies as st

from wire.amqp10 import Described, Symbol, Typed, encode_value
from wire.amqp10_frames import (
    HEADER_AMQP, HEADER_SASL, NEED_DATA, SASL_FRAME, Accepted, Attach, Begin, Close, Detach, Disposition, End, Error,
    Flow, Frame, FrameError, FrameReader, Heartbeat, Modified, Open, ProtocolHeader, Rejected, SaslInit, SaslOutcome,
    Source, Target, Transfer, decode_body, decode_transfer, encode_delivery, encode_frame, encode_heartbeat,
    encode_transfer,
)

uint = st.integers(0, 2**32 - 1)
ushort = st.integers(0, 2**16 - 1)
text = st.text(max_size=20)
maybe = st.none

SESSION = [
    (0, SaslInit(mechanism="PLAIN", initial_response=b"\0guest\0guest"), SASL_FRAME),
    (0, Open(container_id="c", max_frame_size=65536, channel_max=7, idle_time_out=30000,
             properties={Symbol("product"): "x"}), 0),
    (1, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100), 0),
    (1, Attach(name="l", handle=0, role=True, snd_settle_mode=0, rcv_settle_mode=0,
               source=Source(address="/queues/q", filter={Symbol("f"): "first"}), target=Target()), 0),
    (1, Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0, outgoing_window=100, handle=0,
             delivery_count=0, link_credit=10, drain=False), 0),
    (1, Transfer(handle=0, delivery_id=0, delivery_tag=b"\0\0\0\1", message_format=0, settled=False, more=False), 0),
    (1, Disposition(role=True, first=0, last=3, settled=True,
                    state=Modified(delivery_failed=True, undeliverable_here=False)), 0),
    (1, Detach(handle=0, closed=True, error=Error(condition="amqp:not-found", description="gone")), 0),
    (1, End(), 0),
    (0, Close(error=Error(condition="amqp:decode-error")), 0),
]


def _session_bytes() -> bytes:
    out = HEADER_SASL
    for channel, body, kind in SESSION:
        out += encode_frame(channel, body, b"payload" if isinstance(body, Transfer) else b"", type_=kind)
        if kind == SASL_FRAME:
            out += HEADER_AMQP
    return out


def _events(data: bytes, chunk: int = 1 << 20) -> list:
    reader = FrameReader(1 << 20)
    out = []
    for i in range(0, len(data), chunk):
        reader.receive_data(data[i:i + chunk])
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                break
            out.append(event)
            if isinstance(event, Frame) and isinstance(event.body, SaslInit):
                reader.expect_header = True
    return out


def test_a_session_decodes_as_sent_in_any_chunking():
    data = _session_bytes()
    for chunk in (1, 3, 64, len(data)):
        events = _events(data, chunk)
        frames = [e for e in events if isinstance(e, Frame)]
        assert [f.body for f in frames] == [body for _, body, _ in SESSION]
        assert [f.channel for f in frames] == [channel for channel, _, _ in SESSION]
        assert frames[5].payload == b"payload"
        assert [e.data for e in events if isinstance(e, ProtocolHeader)] == [HEADER_SASL, HEADER_AMQP]


def test_heartbeat_and_typed_fields():
    reader = FrameReader()
    reader.expect_header = False
    reader.receive_data(encode_heartbeat())
    assert isinstance(reader.next_event(), Heartbeat)
    # a uint field is sent as a uint, whatever int it holds (0 as uint0, small as smalluint)
    encoded = encode_frame(0, Flow(next_incoming_id=0, incoming_window=5, next_outgoing_id=300,
                                   outgoing_window=2**32 - 1))
    assert b"\x43" in encoded and b"\x52\x05" in encoded and b"\x70\x00\x00\x01\x2c" in encoded
    assert Open(container_id="x").fields() == ["x"]  # trailing nulls left off


def test_frame_over_max_frame_size_and_bad_bodies():
    reader = FrameReader(512)
    reader.expect_header = False
    reader.receive_data(encode_frame(0, Attach(name="x" * 600, handle=0, role=False)))
    try:
        reader.next_event()
    except FrameError as exc:
        assert exc.condition == "amqp:frame-size-too-small"
    else:
        raise AssertionError("a frame over max-frame-size was read")
    bodies = (encode_value(5), encode_value([1, 2]), b"\x00\x53\x99\x45", b"\x00\x53\x10\xc0\x05\x01",
              b"\x00\x45\x45", b"\x00\xc1\x01\x00\x45", b"\x00\x52\x10\x45")  # descriptors: list, map, uint
    for body in bodies:
        reader = FrameReader(4096)
        reader.expect_header = False
        reader.receive_data(len(body).__add__(8).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body)
        try:
            reader.next_event()
        except FrameError as exc:
            assert exc.condition == "amqp:decode-error"
        else:
            raise AssertionError(f"body {body!r} was read as a performative")


def test_fields_of_the_wrong_type_are_decode_errors():
    """The door does arithmetic on integer fields and reads the fields of termini and errors: a value
    of another type there (a decimal's octets, a string for binary, a list for a source) is refused
    by the codec, never met by the door."""
    bad = [
        (0, Described(0x13, [Typed(0x70, 0), Typed(0x74, b"\x00\x00\x00\x01"), Typed(0x70, 0), Typed(0x70, 0)])),
        (0, Described(0x13, [Typed(0x70, 0), Typed(0x80, 1 << 40), Typed(0x70, 0), Typed(0x70, 0)])),
        (0, Described(0x13, [Typed(0x70, 0), 1.5, Typed(0x70, 0), Typed(0x70, 0)])),
        (1, Described(0x41, [Symbol("PLAIN"), "\x00guest\x00guest"])),
        (0, Described(0x12, ["x", Typed(0x70, 0), True, None, None, [1, 2]])),
        (0, Described(0x12, ["x", Typed(0x70, 0), False, None, None, None, Described(0x28, [])])),
        (0, Described(0x18, [Described(0x10, [])])),  # an open where a close's error goes
        (0, Described(0x10, ["c", None, None, None, None, None, None, [1]])),  # capabilities that are no symbols
        (0, Described(0x10, [b"c"])),  # binary container-id
    ]
    for kind, performative in bad:
        body = encode_value(performative)
        reader = FrameReader(4096)
        reader.expect_header = False
        reader.receive_data((len(body) + 8).to_bytes(4, "big") + bytes([2, kind, 0, 0]) + body)
        try:
            event = reader.next_event()
        except FrameError as exc:
            assert exc.condition == "amqp:decode-error"
        else:
            raise AssertionError(f"{performative!r} was read as {event.body!r}")


@given(name=text, handle=uint, role=st.booleans(), credit=uint, delivery_id=uint, tag=st.binary(max_size=32),
       channel=ushort, settled=st.booleans() | maybe(), address=text | maybe())
def test_performatives_round_trip(name, handle, role, credit, delivery_id, tag, channel, settled, address):
    bodies = [
        Attach(name=name, handle=handle, role=role, source=Source(address=address), target=Target(address=address),
               initial_delivery_count=credit, max_message_size=2**40),
        Flow(next_incoming_id=credit, incoming_window=credit, next_outgoing_id=delivery_id, outgoing_window=0,
             handle=handle, delivery_count=0, link_credit=credit, drain=role, echo=not role),
        Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag, message_format=0, settled=settled,
                 more=role, state=Accepted()),
        Disposition(role=role, first=delivery_id, last=delivery_id, settled=settled,
                    state=Rejected(error=Error(condition=Symbol("amqp:x"), description=name))),
        SaslOutcome(code=1, additional_data=tag),
    ]
    for body in bodies:
        kind = SASL_FRAME if isinstance(body, SaslOutcome) else 0
        reader = FrameReader(1 << 20)
        reader.expect_header = False
        reader.receive_data(encode_frame(channel, body, type_=kind))
        frame = reader.next_event()
        assert (frame.channel, frame.body) == (channel, body)


@given(st.binary(max_size=512))
def test_any_bytes_fail_only_with_frame_error(data):
    reader = FrameReader(4096)
    reader.receive_data(data)
    try:
        while reader.next_event() is not NEED_DATA:
            pass
    except FrameError:
        pass


@given(st.data())
def test_a_mutated_session_fails_only_with_frame_error(data):
    session = bytearray(_session_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(session) - 1))
        session[i] = data.draw(st.integers(0, 255))
    try:
        _events(bytes(session))
    except FrameError:
        pass


def test_typed_values_decode_to_plain_ints():
    reader = FrameReader()
    reader.expect_header = False
    reader.receive_data(encode_frame(0, Begin(remote_channel=Typed(0x60, 3), next_outgoing_id=1, incoming_window=2,
                                              outgoing_window=3)))
    body = reader.next_event().body
    assert (body.remote_channel, body.next_outgoing_id, body.incoming_window) == (3, 1, 2)


def _generic(body: bytes):
    """decode_body's answer for a frame body: (performative, payload), or the FrameError."""
    try:
        return decode_body(0, body)
    except FrameError as exc:
        return exc


def _fast(body: bytes):
    return decode_transfer(body, 0, len(body))


# a transfer's fields in the forms clients write them, and in forms the fast path leaves to the
# generic decoder (wide uints, ubyte where a uint goes, 0x56 booleans, a state, extra fields)
_uint_forms = st.one_of(uint.map(lambda v: Typed(0x70, v)), st.integers(0, 300).map(lambda v: Typed(0x70, v)),
                        st.none(), st.integers(0, 255), st.integers(0, 255).map(lambda v: Typed(0x50, v)),
                        uint.map(lambda v: Typed(0x80, v)))
_bool_forms = st.one_of(st.booleans(), st.none(), st.booleans().map(lambda v: Typed(0x56, v)))


@given(handle=_uint_forms, delivery_id=_uint_forms, tag=st.binary(max_size=300) | st.none(), fmt=_uint_forms,
       settled=_bool_forms, more=_bool_forms, mode=st.sampled_from([None, Typed(0x50, 0), Typed(0x50, 1)]),
       state=st.sampled_from([None, Accepted()]), tail=_bool_forms, payload=st.binary(max_size=40),
       extra=st.integers(0, 2), wide=st.booleans())
def test_transfer_fast_path_equals_the_generic_decode(handle, delivery_id, tag, fmt, settled, more, mode, state,
                                                       tail, payload, extra, wide):
    fields = [handle, delivery_id, tag, fmt, settled, more, mode, state and state.described(), tail, tail, tail]
    fields += [None] * extra
    body = encode_value(Described(0x14, fields)) + payload
    if wide:  # the list32 form (0xd0) some clients use whatever the size
        items = body[6:6 + body[4] - 1]
        body = body[:3] + b"\xd0" + struct.pack(">II", len(items) + 4, body[5]) + items + body[5 + body[4]:]
    fast, generic = _fast(body), _generic(body)
    if fast is not None:
        assert not isinstance(generic, FrameError) and fast == generic
    uints = all(v is None or (type(v) is Typed and v.code == 0x70) for v in (handle, delivery_id, fmt))
    if uints and Typed not in (type(settled), type(more), type(tail)) and state is None and extra == 0 \
            and (tag is None or len(tag) < 256):
        assert fast is not None  # the forms clients write are the fast path's


@given(st.data())
def test_a_mutated_transfer_decodes_alike_on_both_paths(data):
    body = bytearray(encode_frame(0, Transfer(handle=1, delivery_id=Typed(0x70, 9), delivery_tag=b"tag",
                                              message_format=0, settled=True, more=False), b"payload")[8:])
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    body = bytes(body)
    if body[:3] != b"\x00\x53\x14":
        return
    fast, generic = _fast(body), _generic(body)
    if fast is not None:
        assert not isinstance(generic, FrameError) and fast == generic


def test_frame_reader_takes_the_fast_path_for_a_plain_transfer():
    reader = FrameReader(1 << 20)
    reader.expect_header = False
    t = Transfer(handle=3, delivery_id=5, delivery_tag=b"\0\0\0\5", message_format=0, settled=True)
    frame = encode_frame(2, t, b"message")
    assert _fast(frame[8:]) is not None
    reader.receive_data(frame + encode_heartbeat() + frame)
    events = [reader.next_event() for _ in range(3)]
    assert [type(e) for e in events] == [Frame, Heartbeat, Frame]
    for e in (events[0], events[2]):
        assert (e.channel, e.body, e.payload) == (2, t, b"message")


@given(channel=ushort, handle=uint, delivery_id=uint, tag=st.binary(max_size=40), settled=st.booleans(),
       more=st.booleans(), payload=st.binary(max_size=40))
def test_encode_transfer_makes_the_generic_encoders_bytes(channel, handle, delivery_id, tag, settled, more, payload):
    t = Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag, message_format=0, settled=settled, more=more)
    assert encode_transfer(channel, handle, delivery_id, tag, settled, more, payload) \
        == encode_frame(channel, t, payload)


@given(channel=ushort, handle=uint, delivery_id=uint, settled=st.booleans(), payload=st.binary(max_size=300))
def test_encode_delivery_reads_back_as_its_transfer_on_both_paths(channel, handle, delivery_id, settled, payload):
    frame = encode_delivery(channel, handle, delivery_id, settled, payload)
    expected = Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=delivery_id.to_bytes(4, "big"),
                        message_format=0, settled=settled, more=False)
    assert struct.unpack_from(">IBBH", frame) == (len(frame), 2, 0, channel)
    assert _generic(frame[8:]) == (expected, payload)
    assert _fast(frame[8:]) == (expected, payload)
