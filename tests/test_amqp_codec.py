"""wire.amqp: the server-side AMQP 0-9-1 codec, fed like a socket would feed it."""
import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.commands import Basic, Channel, Confirm, Connection, Exchange, Queue, Tx
from pamqp.header import ContentHeader

from wire.amqp import (
    COMMAND_INVALID, FRAME_ERROR, NEED_DATA, PROTOCOL_HEADER, UNEXPECTED_FRAME, AmqpFrameError, Heartbeat,
    Message, MethodFrame, ProtocolHeader, ServerCodec, encode_heartbeat, encode_message, encode_method,
    encode_properties,
)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------ helpers

def raw_frame(ftype, channel, payload, end=b"\xce"):
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + end


def header_payload(body_size, props=b"\x00\x00", class_id=60, weight=0):
    return struct.pack(">HHQ", class_id, weight, body_size) + props


def opened(frame_max=131072, **kw):
    codec = ServerCodec(frame_max=frame_max, **kw)
    codec.receive_data(PROTOCOL_HEADER)
    assert codec.next_event() == ProtocolHeader(True, PROTOCOL_HEADER)
    return codec


def drain(codec):
    events = []
    while (event := codec.next_event()) is not NEED_DATA:
        events.append(event)
    return events


def feed_all(data, frame_max=131072, chunks=None):
    codec = opened(frame_max)
    events = []
    if chunks is None:
        codec.receive_data(data)
        return drain(codec)
    pos, i = 0, 0
    while pos < len(data):
        step = chunks[i % len(chunks)]
        codec.receive_data(data[pos:pos + step])
        events += drain(codec)
        pos, i = pos + step, i + 1
    return events


def fields(obj):
    return type(obj), dict(obj)


def expect_error(data, code, text=None, class_method=None, frame_max=131072):
    codec = opened(frame_max)
    codec.receive_data(data)
    with pytest.raises(AmqpFrameError) as info:
        drain(codec)
    error = info.value
    assert error.reply_code == code, error
    if text is not None:
        assert error.reply_text == text
    if class_method is not None:
        assert (error.class_id, error.method_id) == class_method
    with pytest.raises(AmqpFrameError):  # broken for good
        codec.next_event()
    return error


PUBLISH = Basic.Publish(exchange="amq.topic", routing_key="a.b.c", mandatory=True)
PROPS = Basic.Properties(content_type="application/json", content_encoding="utf-8",
                         headers={"k": "v", "n": 7, "t": True, "nested": {"a": [1, "b"]}},
                         delivery_mode=2, priority=5, correlation_id="c1", reply_to="amq.rabbitmq.reply-to",
                         expiration="60000", message_id="m1",
                         timestamp=datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc),
                         message_type="t", user_id="guest", app_id="app")


# ----------------------------------------------------------------------------- protocol header

def test_protocol_header_waits_for_eight_bytes():
    codec = ServerCodec()
    for byte in PROTOCOL_HEADER[:-1]:
        codec.receive_data(bytes([byte]))
        assert codec.next_event() is NEED_DATA
    codec.receive_data(PROTOCOL_HEADER[-1:])
    assert codec.next_event() == ProtocolHeader(True, PROTOCOL_HEADER)
    assert codec.next_event() is NEED_DATA


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x09\x00", b"AMQP\x00\x01\x00\x00", b"GET / HT", b"\x16\x03\x01\x02\x00\x01\x00\x01"])
def test_wrong_protocol_header_is_refused(header):
    codec = ServerCodec()
    codec.receive_data(header + b"more bytes")
    assert codec.next_event() == ProtocolHeader(False, header)
    codec.receive_data(b"anything")
    assert codec.next_event() is NEED_DATA


def test_amqp_0_9_header_is_accepted_as_rabbitmq_does():
    codec = ServerCodec()
    codec.receive_data(b"AMQP\x01\x01\x00\x09")
    assert codec.next_event().ok


# ------------------------------------------------------------------------ client methods round trip

CLIENT_METHODS = [
    Connection.StartOk(client_properties={"product": "pika", "capabilities": {"publisher_confirms": True}},
                       mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"),
    Connection.SecureOk(response="secret"),
    Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
    Connection.Open(virtual_host="/"),
    Connection.Close(reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0),
    Connection.CloseOk(),
    Connection.UpdateSecret(new_secret="tok", reason="refresh"),
    Channel.Open(),
    Channel.Flow(active=False),
    Channel.FlowOk(active=True),
    Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
    Channel.CloseOk(),
    Exchange.Declare(exchange="logs", exchange_type="topic", passive=False, durable=True, auto_delete=True,
                     internal=True, nowait=False, arguments={"alternate-exchange": "ae"}),
    Exchange.Delete(exchange="logs", if_unused=True, nowait=True),
    Exchange.Bind(destination="d", source="s", routing_key="a.*", nowait=False, arguments={"x": 1}),
    Exchange.Unbind(destination="d", source="s", routing_key="a.*", nowait=True, arguments={}),
    Queue.Declare(queue="q1", passive=False, durable=True, exclusive=True, auto_delete=False, nowait=False,
                  arguments={"x-message-ttl": 60000, "x-queue-type": "quorum", "x-max-length": 10}),
    Queue.Declare(queue="", exclusive=True),
    Queue.Bind(queue="q1", exchange="logs", routing_key="#", nowait=False, arguments={"x-match": "any"}),
    Queue.Purge(queue="q1", nowait=True),
    Queue.Delete(queue="q1", if_unused=True, if_empty=True, nowait=False),
    Queue.Unbind(queue="q1", exchange="logs", routing_key="#", arguments={}),
    Basic.Qos(prefetch_size=0, prefetch_count=50, global_=True),
    Basic.Consume(queue="q1", consumer_tag="ctag", no_local=False, no_ack=True, exclusive=True, nowait=False,
                  arguments={"x-priority": 10}),
    Basic.Cancel(consumer_tag="ctag", nowait=True),
    Basic.Get(queue="q1", no_ack=True),
    Basic.Ack(delivery_tag=2**40, multiple=True),
    Basic.Reject(delivery_tag=3, requeue=False),
    Basic.RecoverAsync(requeue=True),
    Basic.Recover(requeue=False),
    Basic.Nack(delivery_tag=9, multiple=True, requeue=True),
    Confirm.Select(nowait=False),
    Tx.Select(), Tx.Commit(), Tx.Rollback(),
]


@pytest.mark.parametrize("method", CLIENT_METHODS, ids=lambda m: m.name)
def test_client_method_round_trips(method):
    data = encode_method(5, method)
    assert data == pamqp_frame.marshal(method, 5)
    [event] = feed_all(data)
    assert isinstance(event, MethodFrame) and event.channel == 5
    assert fields(event.method) == fields(method)


def test_all_client_methods_in_one_stream_one_byte_at_a_time():
    data = b"".join(encode_method(i % 3, m) for i, m in enumerate(CLIENT_METHODS))
    events = feed_all(data, chunks=[1])
    assert [(e.channel, fields(e.method)) for e in events] == [(i % 3, fields(m)) for i, m in enumerate(CLIENT_METHODS)]


def test_heartbeat():
    assert feed_all(encode_heartbeat() * 2) == [Heartbeat(), Heartbeat()]
    assert encode_heartbeat() == b"\x08\x00\x00\x00\x00\x00\x00\xce"


# ----------------------------------------------------------------------------- publish assembly

def assert_message(event, channel, body, publish=PUBLISH, props=PROPS):
    assert isinstance(event, Message)
    assert event.channel == channel and event.body == body
    assert fields(event.publish) == fields(publish)
    assert event.properties == props
    assert event.properties_raw == encode_properties(props)


def test_publish_assembled_one_byte_at_a_time():
    data = encode_message(1, PUBLISH, PROPS, b"hello")
    [event] = feed_all(data, chunks=[1])
    assert_message(event, 1, b"hello")


@FAST
@given(bodies=st.lists(st.binary(max_size=3000), min_size=1, max_size=5),
       cuts=st.lists(st.integers(1, 700), min_size=1, max_size=10),
       frame_max=st.sampled_from([0, 4096, 4097, 131072]))
def test_publish_assembled_from_any_chunking(bodies, cuts, frame_max):
    data = b"".join(encode_message(3, PUBLISH, PROPS, body, frame_max) for body in bodies)
    events = feed_all(data, frame_max=frame_max, chunks=cuts)
    assert len(events) == len(bodies)
    for event, body in zip(events, bodies):
        assert_message(event, 3, body)


def test_multi_frame_body_is_split_at_frame_max():
    body = bytes(range(256)) * 100  # 25,600 bytes
    data = encode_message(2, PUBLISH, PROPS, body, frame_max=4096)
    sizes, pos = [], 0
    while pos < len(data):
        ftype, _, size = struct.unpack_from(">BHI", data, pos)
        if ftype == 3:
            sizes.append(size)
        pos += 8 + size
    assert all(s <= 4096 - 8 for s in sizes) and sum(sizes) == len(body) and len(sizes) == 7
    [event] = feed_all(data, frame_max=4096)
    assert_message(event, 2, body)


def test_zero_length_body_has_no_body_frame():
    data = encode_message(1, PUBLISH, None, b"")
    assert data.count(b"\xce") == 2  # method + header
    [event] = feed_all(data)
    assert event.body == b"" and event.properties == Basic.Properties()


def test_content_frames_interleave_across_channels():
    pub2 = Basic.Publish(exchange="", routing_key="q2")
    props2 = Basic.Properties(delivery_mode=1)
    one = Basic.Publish(exchange="amq.topic", routing_key="a.b.c", mandatory=True)
    stream = b"".join([
        encode_method(1, one), encode_method(2, pub2),
        raw_frame(2, 2, header_payload(3, encode_properties(props2))),
        raw_frame(2, 1, header_payload(6, encode_properties(PROPS))),
        raw_frame(3, 1, b"abc"), encode_method(3, Basic.Ack(1)),  # a third channel carries on meanwhile
        raw_frame(3, 2, b"xyz"), raw_frame(3, 1, b"def"),
    ])
    events = feed_all(stream, chunks=[5])
    assert [type(e) for e in events] == [MethodFrame, Message, Message]
    assert_message(events[1], 2, b"xyz", pub2, props2)
    assert_message(events[2], 1, b"abcdef", one)


def test_publish_on_channel_zero_is_left_to_the_gateway():
    [event] = feed_all(encode_method(0, PUBLISH))
    assert isinstance(event, MethodFrame) and event.channel == 0


def test_publish_names_are_not_validated():
    publish = Basic.Publish.__new__(Basic.Publish)
    publish.ticket, publish.exchange, publish.routing_key, publish.mandatory, publish.immediate = 0, "ünï cödé!", "k", False, True
    payload = struct.pack(">HHH", 60, 40, 0) + bytes([len("ünï cödé!".encode())]) + "ünï cödé!".encode() + b"\x01k\x02"
    [event] = feed_all(raw_frame(1, 1, payload) + raw_frame(2, 1, header_payload(0)))
    assert fields(event.publish) == fields(publish)


# ------------------------------------------------------------------------------- hot encoders

tags = st.integers(0, 2**63 - 1)  # pamqp packs longlong signed; the hand encoders unsigned
short = st.text(max_size=40)
names = st.from_regex(r"[a-zA-Z0-9-_.:@#,/+ ]{0,40}", fullmatch=True)  # what pamqp's validate() allows


@FAST
@given(ctag=short, tag=tags, redelivered=st.booleans(), exchange=names, key=short, count=st.integers(0, 2**32 - 1),
       multiple=st.booleans(), requeue=st.booleans())
def test_hot_encoders_match_pamqp(ctag, tag, redelivered, exchange, key, count, multiple, requeue):
    for method in (Basic.Deliver.__new__(Basic.Deliver), Basic.GetOk.__new__(Basic.GetOk)):
        method.delivery_tag, method.redelivered, method.exchange, method.routing_key = tag, redelivered, exchange, key
        if isinstance(method, Basic.Deliver):
            method.consumer_tag = ctag
        else:
            method.message_count = count
        assert encode_method(7, method) == pamqp_frame.marshal(method, 7)
    for method in (Basic.Ack(tag, multiple), Basic.Nack(tag, multiple, requeue)):
        assert encode_method(7, method) == pamqp_frame.marshal(method, 7)


def test_encode_message_matches_pamqp_frames():
    deliver = Basic.Deliver("ctag", 42, True, "amq.topic", "a.b")
    body = b"x" * 10000
    expected = (pamqp_frame.marshal(deliver, 4)
                + pamqp_frame.marshal(ContentHeader(0, len(body), PROPS), 4)
                + b"".join(pamqp_frame.marshal(ContentBody(body[i:i + 4088]), 4) for i in range(0, len(body), 4088)))
    assert encode_message(4, deliver, PROPS, body, frame_max=4096) == expected
    assert encode_message(4, deliver, encode_properties(PROPS), body, frame_max=4096) == expected


SERVER_METHODS = [
    Connection.Start(server_properties={"product": "gateway", "capabilities": {"basic.nack": True}},
                     mechanisms="PLAIN AMQPLAIN", locales="en_US"),
    Connection.Tune(channel_max=2047, frame_max=131072, heartbeat=60), Connection.OpenOk(),
    Connection.Blocked(reason="low on memory"), Connection.Unblocked(),
    Channel.OpenOk(), Exchange.DeclareOk(), Queue.DeclareOk(queue="amq.gen-x", message_count=3, consumer_count=1),
    Queue.PurgeOk(message_count=2), Basic.ConsumeOk(consumer_tag="ctag"), Basic.CancelOk(consumer_tag="ctag"),
    Basic.Cancel(consumer_tag="ctag", nowait=True), Basic.GetEmpty(), Basic.QosOk(),
    Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="amq.direct", routing_key="nowhere"),
    Confirm.SelectOk(), Tx.SelectOk(),
]


@pytest.mark.parametrize("method", CLIENT_METHODS + SERVER_METHODS, ids=lambda m: m.name)
def test_generic_encoder_matches_pamqp(method):
    assert encode_method(9, method) == pamqp_frame.marshal(method, 9)


def test_names_pamqp_would_refuse_are_encoded_and_decoded():
    # RabbitMQ accepts any UTF-8 name; pamqp's validate() would raise on these
    ret = Basic.Return(312, "NO_ROUTE", "", "k")
    ret.exchange = "ex with 'quotes' & ünïcode!"
    deliver = Basic.Deliver("ctag", 1, False, "", "k")
    deliver.exchange = ret.exchange
    declare_ok = Queue.DeclareOk("q", 0, 0)
    declare_ok.queue = "queue?with=odd*chars"
    for method in (ret, deliver, declare_ok):
        [event] = feed_all(encode_method(1, method))
        assert fields(event.method) == fields(method)


def test_oversize_short_string_is_refused():
    with pytest.raises(ValueError):
        encode_method(1, Basic.Deliver("c" * 256, 1, False, "", "k"))


# ------------------------------------------------------------------------------------- errors

def test_bad_frame_end():
    data = encode_method(1, Channel.Open())
    error = expect_error(data[:-1] + b"\x00", FRAME_ERROR)
    assert "{invalid_frame_end_marker,0}" in error.reply_text and error.reply_text.startswith("FRAME_ERROR - type 1, ")


def test_frame_larger_than_frame_max_is_refused_from_its_header():
    codec = opened(frame_max=4096)
    codec.receive_data(struct.pack(">BHI", 3, 1, 4097))  # no payload yet
    with pytest.raises(AmqpFrameError) as info:
        codec.next_event()
    assert info.value.reply_code == FRAME_ERROR
    assert info.value.reply_text == "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}"


def test_frame_of_exactly_frame_max_payload_is_accepted_like_rabbitmq():
    # RabbitMQ tolerates payloads up to frame_max (a fudge of 8 for clients that get it wrong)
    data = encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(4096)) + raw_frame(3, 1, b"z" * 4096)
    [event] = feed_all(data, frame_max=4096)
    assert event.body == b"z" * 4096


@pytest.mark.parametrize("data", [
    raw_frame(9, 0, b""),  # unknown frame type
    raw_frame(8, 0, b"\x00"),  # heartbeat with a payload
    raw_frame(1, 1, b"\x00\x14"),  # method frame too short for class and method ids
    raw_frame(2, 1, b"\x00\x3c\x00\x00"),  # content header too short
])
def test_malformed_frames_are_frame_errors(data):
    error = expect_error(data, FRAME_ERROR)
    assert error.reply_text.endswith(": unknown_frame")


def test_heartbeat_on_a_channel_is_unexpected():
    expect_error(raw_frame(8, 1, b""), UNEXPECTED_FRAME, "UNEXPECTED_FRAME - type 8, all octets = <<>>")


@pytest.mark.parametrize("ftype,payload", [(2, header_payload(3)), (3, b"abc")])
def test_content_without_publish(ftype, payload):
    expect_error(raw_frame(ftype, 1, payload), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0))


def test_content_on_channel_zero():
    error = expect_error(raw_frame(3, 0, b"abc"), UNEXPECTED_FRAME)
    assert error.reply_text == 'UNEXPECTED_FRAME - type 3, all octets = <<"abc">>'


def test_method_instead_of_content_header():
    expect_error(encode_method(1, PUBLISH) + encode_method(1, Basic.Ack(1)), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
                 (60, 40))


def test_body_instead_of_content_header():
    expect_error(encode_method(1, PUBLISH) + raw_frame(3, 1, b"abc"), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead")


def test_method_in_the_middle_of_a_body():
    data = encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(10)) + raw_frame(3, 1, b"abc")
    expect_error(data + encode_method(1, PUBLISH), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected content body, got non content body frame instead", (60, 40))
    expect_error(data + raw_frame(2, 1, header_payload(3)), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected content body, got non content body frame instead")


def test_content_header_of_another_class():
    expect_error(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(3, class_id=50)), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead")


def test_content_header_with_a_weight():
    expect_error(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(3, weight=1)), UNEXPECTED_FRAME,
                 "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead")


def test_body_longer_than_the_header_said():
    data = encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(5)) + raw_frame(3, 1, b"abc")
    expect_error(data + raw_frame(3, 1, b"def"), FRAME_ERROR,
                 "FRAME_ERROR - content body frame exceeds remaining content size", (60, 40))


def test_body_size_above_the_maximum():
    expect_error(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(2**63)), FRAME_ERROR,
                 f"FRAME_ERROR - content body size {2**63} exceeds maximum allowed size {512 * 1024 * 1024}")


@pytest.mark.parametrize("class_id,method_id", [(60, 255), (99, 10), (0, 0), (10, 12)])
def test_unknown_method_is_command_invalid(class_id, method_id):
    error = expect_error(raw_frame(1, 1, struct.pack(">HH", class_id, method_id) + b"\x00" * 8), COMMAND_INVALID,
                         f"COMMAND_INVALID - unknown method {{{class_id},{method_id}}}")
    assert (error.class_id, error.method_id, error.channel) == (class_id, method_id, 1)


@pytest.mark.parametrize("method", [Queue.Declare(queue="abc", arguments={"a": "b"}), PUBLISH,
                                    Basic.Ack(5), Connection.StartOk({"a": 1}, "PLAIN", "x", "en_US")])
def test_truncated_method_fields_are_frame_errors(method):
    payload = encode_method(1, method)[7:-1]
    for cut in range(5, len(payload) - 1):
        truncated = payload[:cut]
        codec = opened()
        codec.receive_data(raw_frame(1, 1, truncated))
        try:
            drain(codec)
        except AmqpFrameError as error:
            assert error.reply_code == FRAME_ERROR
            assert (error.class_id, error.method_id) == (method.index >> 16, method.index & 0xFFFF)


def test_truncated_publish_is_a_frame_error():
    payload = encode_method(1, PUBLISH)[7:-1]
    for cut in range(4, len(payload)):
        expect_error(raw_frame(1, 1, payload[:cut]), FRAME_ERROR, class_method=(60, 40))


def test_undecodable_properties_are_a_frame_error():
    timestamp_out_of_range = b"\x00\x40" + b"\xff" * 8  # pamqp raises OverflowError/OSError here
    expect_error(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(0, timestamp_out_of_range)),
                 FRAME_ERROR, class_method=(60, 40))
    table_overrun = b"\x20\x00" + struct.pack(">I", 100) + b"\x01kS"
    expect_error(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(0, table_overrun)),
                 FRAME_ERROR, class_method=(60, 40))


# --------------------------------------------------------------------------------------- fuzz

def _assert_only_frame_errors(data, frame_max=131072):
    codec = opened(frame_max)
    codec.receive_data(data)
    try:
        drain(codec)
    except AmqpFrameError:
        pass


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_frame_errors(data):
    _assert_only_frame_errors(data)


valid_stream = st.lists(st.sampled_from(CLIENT_METHODS), max_size=4).map(
    lambda ms: b"".join(encode_method(1, m) for m in ms)
    + encode_message(1, PUBLISH, PROPS, b"body" * 10, 64) + encode_message(2, PUBLISH, None, b"", 64))


@FUZZ
@given(valid_stream, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_valid_streams_raise_only_frame_errors(data, flips):
    data = bytearray(data)
    for where, value in flips:
        data[where % len(data)] = value
    _assert_only_frame_errors(bytes(data), frame_max=4096)


method_ids = st.sampled_from(sorted(commands.INDEX_MAPPING))


@FUZZ
@given(method_ids, st.binary(max_size=200))
def test_random_fields_for_every_method_raise_only_frame_errors(index, fields_bytes):
    _assert_only_frame_errors(raw_frame(1, 1, struct.pack(">I", index) + fields_bytes))


@FUZZ
@given(st.binary(max_size=200))
def test_random_properties_raise_only_frame_errors(props):
    _assert_only_frame_errors(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(0, props)))


@FUZZ
@given(st.sampled_from([b"F", b"A", b"T", b"D", b"x", b"S", b"l", b"d"]), st.binary(max_size=60),
       st.integers(0, 2**32 - 1))
def test_field_table_values_raise_only_frame_errors(tag, rest, length):
    table = b"\x01k" + tag + rest
    props = struct.pack(">H", 0x2000) + struct.pack(">I", min(length, len(table)) if length % 2 else len(table)) + table
    _assert_only_frame_errors(encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(0, props)))


def test_empty_body_frames_are_accepted_like_rabbitmq():
    # pamqp.frame.unmarshal refuses a zero-size frame; RabbitMQ's assembler takes it as no bytes
    data = (encode_method(1, PUBLISH) + raw_frame(2, 1, header_payload(3)) + raw_frame(3, 1, b"")
            + raw_frame(3, 1, b"abc"))
    [event] = feed_all(data)
    assert event.body == b"abc"


def test_frame_max_can_be_lowered_after_tune():
    codec = opened(frame_max=131072)
    codec.frame_max = 4096
    codec.receive_data(raw_frame(3, 1, b"x" * 5000))
    with pytest.raises(AmqpFrameError) as info:
        codec.next_event()
    assert info.value.reply_code == FRAME_ERROR


_SIMPLE_STR = st.text(max_size=20)


@given(content_type=st.none() | _SIMPLE_STR, content_encoding=st.none() | _SIMPLE_STR,
       delivery_mode=st.none() | st.integers(1, 2), priority=st.none() | st.integers(0, 255),
       correlation_id=st.none() | _SIMPLE_STR, reply_to=st.none() | _SIMPLE_STR,
       expiration=st.none() | st.from_regex(r"\A[0-9]{1,8}\Z"), message_id=st.none() | _SIMPLE_STR,
       message_type=st.none() | _SIMPLE_STR, user_id=st.none() | _SIMPLE_STR, app_id=st.none() | _SIMPLE_STR)
def test_simple_property_fast_path_equals_pamqp(**values):
    """Sections without headers or timestamp skip pamqp's loop; the result must be what pamqp gives."""
    from wire.amqp.codec import _decode_properties
    raw = Basic.Properties(**values).marshal()
    flags = int.from_bytes(raw[:2], "big")
    reference = Basic.Properties()
    if flags:
        reference.unmarshal(flags, raw[2:])
    assert _decode_properties(raw) == reference


# ------------------------------------------------- the whole-publish shortcut vs frame by frame

def _outcome(data, chunks=None, frame_max=4096):
    """Events, or the error's code/text/ids, of feeding ``data`` whole or in ``chunks``."""
    try:
        events = feed_all(data, frame_max=frame_max, chunks=chunks)
    except AmqpFrameError as error:
        return ("error", error.reply_code, error.reply_text, error.channel, error.class_id, error.method_id)
    return [(type(e), e.channel, dict(e.publish), e.properties, e.properties_raw, e.body) if isinstance(e, Message)
            else (type(e), e.channel, type(e.method), dict(e.method)) if hasattr(e, "method")  # pamqp has no ==
            else e for e in events]


@FUZZ
@given(props=st.binary(max_size=40), body=st.binary(max_size=60), declared=st.integers(0, 70),
       header_channel=st.sampled_from([1, 1, 1, 2]), body_type=st.sampled_from([3, 3, 3, 1, 2]),
       class_id=st.sampled_from([60, 60, 60, 50]), weight=st.sampled_from([0, 0, 0, 1]),
       frame_max=st.sampled_from([4096, 4096, 40]))
def test_whole_publish_shortcut_matches_frame_by_frame(props, body, declared, header_channel, body_type, class_id,
                                                        weight, frame_max):
    """Three frames in one buffer take a shortcut; byte by byte they go frame by frame: same result."""
    data = (encode_method(1, PUBLISH) + raw_frame(2, header_channel, header_payload(declared, props, class_id, weight))
            + raw_frame(body_type, 1, body) + encode_method(1, Basic.Ack(delivery_tag=1)))
    assert _outcome(data, frame_max=frame_max) == _outcome(data, chunks=[1], frame_max=frame_max)


@FAST
@given(content_type=st.none() | st.text(min_size=1, max_size=10), delivery_mode=st.none() | st.integers(1, 2),
       user_id=st.none() | st.text(min_size=1, max_size=10), body=st.binary(max_size=100))  # pamqp drops ""
def test_whole_publish_shortcut_decodes_what_pamqp_encodes(content_type, delivery_mode, user_id, body):
    props = Basic.Properties(content_type=content_type, delivery_mode=delivery_mode, user_id=user_id)
    data = encode_message(1, PUBLISH, props, body) if body else encode_method(1, PUBLISH) + raw_frame(
        2, 1, header_payload(0, encode_properties(props)))
    [event] = feed_all(data)
    assert (dict(event.publish), event.properties, event.body) == (dict(PUBLISH), props, body)
    assert event.properties_raw == encode_properties(props)


@FAST
@given(tag=st.text(max_size=30), delivery_tag=st.integers(1, 2**64 - 1), redelivered=st.booleans(),
       exchange=st.text(max_size=20), routing_key=st.text(max_size=40), body=st.binary(max_size=9000),
       frame_max=st.sampled_from([4096, 131072]))
def test_encode_delivery_is_encode_message_of_a_deliver(tag, delivery_tag, redelivered, exchange, routing_key, body,
                                                       frame_max):
    from wire.amqp import encode_delivery
    raw = encode_properties(PROPS)
    deliver = Basic.Deliver.__new__(Basic.Deliver)  # without validate(), as deliveries are sent
    deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered = tag, delivery_tag, redelivered
    deliver.exchange, deliver.routing_key = exchange, routing_key
    assert encode_delivery(3, tag, delivery_tag, redelivered, exchange, routing_key, raw, body, frame_max) == \
        encode_message(3, deliver, raw, body, frame_max)
