"""Bad input on raw sockets, after a valid handshake: the reply codes RabbitMQ answers with,
and that one bad connection or channel does not disturb the others."""
from __future__ import annotations

import struct

import pytest
from pamqp import commands
from pamqp import frame as pframe

from .helpers import ConnectionClosedByPeer, RawAMQP, body_frame, bodies, connect, header_frame, method_frame


@pytest.fixture
def raw(amqp_broker):
    r = RawAMQP(amqp_broker.host, amqp_broker.port)
    r.handshake()
    r.open_channel(1)
    yield r
    r.close()


@pytest.fixture
def bystander(amqp_broker):
    """A pika connection with a queue holding one message: it must be unaffected."""
    conn = connect(amqp_broker)
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    ch.basic_publish("", q, b"bystander")
    yield ch, q
    if conn.is_open:
        conn.close()


def _check_bystander(bystander) -> None:
    ch, q = bystander
    assert ch.connection.is_open and ch.is_open
    assert bodies(ch, q) == [b"bystander"]


def _connection_close(raw: RawAMQP):
    """The next frame must be connection.close (anything else fails the test)."""
    return raw.expect(commands.Connection.Close, channel=0)


def test_bad_frame_end_octet_is_501(raw, bystander):
    good = pframe.marshal(commands.Queue.Declare(queue="", exclusive=True), 1)
    raw.send_bytes(good[:-1] + b"\x00")
    close = _connection_close(raw)
    assert close.reply_code == 501 and close.reply_text.startswith("FRAME_ERROR"), close.reply_text
    assert raw.closed_by_peer(10), "the server did not close the socket after a frame error"
    _check_bystander(bystander)


def test_garbage_after_handshake_is_501(raw, bystander):
    raw.send_bytes(b"\x00" * 20)
    close = _connection_close(raw)
    assert close.reply_code == 501 and close.reply_text.startswith("FRAME_ERROR")
    _check_bystander(bystander)


def test_unknown_frame_type_is_501(raw):
    raw.send_bytes(struct.pack(">BHI", 9, 1, 3) + b"abc\xce")
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (501, 'FRAME_ERROR - type 9, all octets = <<"abc">>: unknown_frame')


def test_truncated_method_arguments_are_501(raw):
    raw.send_bytes(method_frame(1, 50, 10, b"\x00\x00\x05ab"))  # queue.declare cut short
    close = _connection_close(raw)
    assert close.reply_code == 501 and close.reply_text.startswith("FRAME_ERROR - cannot decode")
    assert (close.class_id, close.method_id) == (50, 10)


@pytest.mark.parametrize("class_id,method_id,channel", [(99, 10, 1), (50, 99, 1), (99, 10, 0)],
                         ids=["unknown-class", "unknown-method", "unknown-class-channel-0"])
def test_unknown_class_or_method_closes_the_connection(raw, bystander, class_id, method_id, channel):
    """RabbitMQ 3.10 drops the TCP connection without a connection.close (its reader crashes
    on ``unknown_method_id``); a connection.close first is allowed if it says 503 or 540."""
    raw.send_bytes(method_frame(channel, class_id, method_id))
    try:
        _, frame = raw.recv_method(timeout=10)
    except ConnectionClosedByPeer:
        pass
    else:
        assert isinstance(frame, commands.Connection.Close), f"unexpected answer {frame!r}"
        assert frame.reply_code in (503, 540), (frame.reply_code, frame.reply_text)
        raw.send(commands.Connection.CloseOk())
        assert raw.closed_by_peer(10)
    _check_bystander(bystander)


@pytest.mark.parametrize("parts", [[b"0123456789"], [b"012", b"3456"]], ids=["one-frame", "two-frames"])
def test_body_longer_than_header_said(raw, bystander, parts):
    """RabbitMQ notices at the next frame: 505 UNEXPECTED_FRAME. 501 FRAME_ERROR at once is fine too."""
    raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
    q = raw.expect(commands.Queue.DeclareOk).queue
    raw.send(commands.Basic.Publish(exchange="", routing_key=q), 1)
    raw.send_bytes(header_frame(1, 5))
    for part in parts:
        raw.send_bytes(body_frame(1, part))
    raw.send(commands.Basic.Get(queue=q, no_ack=True), 1)  # the next frame
    close = _connection_close(raw)
    assert close.reply_code in (501, 505), (close.reply_code, close.reply_text)
    _check_bystander(bystander)


def test_extra_body_frame_after_complete_content_is_505(raw):
    raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
    q = raw.expect(commands.Queue.DeclareOk).queue
    raw.send(commands.Basic.Publish(exchange="", routing_key=q), 1)
    raw.send_bytes(header_frame(1, 5) + body_frame(1, b"01234") + body_frame(1, b"5"))
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (505, "UNEXPECTED_FRAME - expected method frame, "
                                                         "got non method frame instead")


@pytest.mark.parametrize("case", ["header-first", "body-first"])
def test_content_without_publish_is_505(raw, case):
    raw.send_bytes(header_frame(1, 5) if case == "header-first" else body_frame(1, b"abc"))
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (505, "UNEXPECTED_FRAME - expected method frame, "
                                                         "got non method frame instead")


def test_method_instead_of_content_header_is_505(raw):
    raw.send(commands.Basic.Publish(exchange="", routing_key="x"), 1)
    raw.send(commands.Queue.Declare(queue="x"), 1)
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (
        505, "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead")
    assert (close.class_id, close.method_id) == (60, 40)


def test_method_instead_of_content_body_is_505(raw):
    raw.send(commands.Basic.Publish(exchange="", routing_key="x"), 1)
    raw.send_bytes(header_frame(1, 5))
    raw.send(commands.Queue.Declare(queue="x"), 1)
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (
        505, "UNEXPECTED_FRAME - expected content body, got non content body frame instead")


def test_content_header_of_wrong_class_is_505(raw):
    raw.send(commands.Basic.Publish(exchange="", routing_key="x"), 1)
    raw.send_bytes(header_frame(1, 5, class_id=50))
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (
        505, "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead")


def test_heartbeat_on_a_channel_is_505(raw):
    raw.send_bytes(struct.pack(">BHI", 8, 1, 0) + b"\xce")
    close = _connection_close(raw)
    assert (close.reply_code, close.reply_text) == (505, "UNEXPECTED_FRAME - type 8, all octets = <<>>")


def test_publish_to_missing_exchange_closes_only_that_channel(amqp_broker, raw):
    """Channel 2 publishes to a missing exchange amid channel 1's confirmed stream: channel 2
    gets 404, channel 1's messages all arrive and are all confirmed."""
    raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
    q = raw.expect(commands.Queue.DeclareOk).queue
    raw.send(commands.Confirm.Select(), 1)
    raw.expect(commands.Confirm.SelectOk, channel=1)
    raw.open_channel(2)
    n = 100
    for i in range(n):
        raw.publish(1, "", q, b"%03d" % i)
        if i == n // 2:
            raw.publish(2, "no-such-exchange-here", "k", b"lost")
    acked, channel_close = set(), None
    while len(acked) < n or channel_close is None:
        ch, frame = raw.recv_method()
        if isinstance(frame, commands.Basic.Ack) and ch == 1:
            acked |= set(range(1, frame.delivery_tag + 1)) if frame.multiple else {frame.delivery_tag}
        elif isinstance(frame, commands.Channel.Close) and ch == 2:
            channel_close = frame
            raw.send(commands.Channel.CloseOk(), 2)
        else:
            raise AssertionError(f"unexpected frame {frame!r} on channel {ch}")
    assert (channel_close.reply_code, channel_close.reply_text) == (
        404, "NOT_FOUND - no exchange 'no-such-exchange-here' in vhost '/'")
    assert (channel_close.class_id, channel_close.method_id) == (60, 40)
    assert acked == set(range(1, n + 1))
    # channel 1 still works and holds everything
    raw.send(commands.Queue.Declare(queue=q, passive=True), 1)
    assert raw.expect(commands.Queue.DeclareOk, channel=1).message_count == n
    # and channel 2 can be opened again
    raw.open_channel(2)


def test_channel_error_then_more_frames_on_that_channel_are_ignored(raw):
    """After channel.close from the server, frames on that channel (before close-ok) are
    discarded, and the connection stays up."""
    raw.send(commands.Queue.Declare(queue="surely-missing-queue-x1", passive=True), 1)
    close = raw.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == 404
    raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)  # discarded
    raw.send(commands.Channel.CloseOk(), 1)
    raw.open_channel(1)
    raw.send(commands.Queue.Declare(queue="", exclusive=True), 1)
    assert raw.expect(commands.Queue.DeclareOk, channel=1).queue.startswith("amq.gen-")


def test_many_bad_connections_leave_broker_healthy(amqp_broker, bystander):
    for i in range(20):
        with RawAMQP(amqp_broker.host, amqp_broker.port) as r:
            r.handshake()
            r.send_bytes(struct.pack(">BHI", 8, 5, 0) + b"\x00" if i % 2 else struct.pack(">BHI", 7, 0, 1) + b"x\xce")
            assert _connection_close(r).reply_code == 501
    _check_bystander(bystander)
