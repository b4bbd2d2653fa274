"""Bad input on the AMQP 1.0 door, over raw sockets: each gets a clear AMQP error (or a refused
login), the broker logs no traceback, other clients go on, and nothing half-sent is stored.

Gateway only: the frames are written by hand (with :mod:`wire.amqp10_frames`), and the checks
read this broker's log.
"""
from __future__ import annotations

import socket
import time

import pytest
from proton import Delivery, Message

from wire.amqp10 import encode_message, Message as Message10
from wire.amqp10_frames import (
    HEADER_AMQP, HEADER_SASL, SASL_FRAME, Attach, Begin, Close, End, Frame, FrameReader, NEED_DATA, Open, SaslInit,
    SaslOutcome, Target, Transfer, encode_frame,
)

from .helpers import get_all, pika_channel, proton, read_until_closed, unique


def _frames(data: bytes) -> list:
    reader = FrameReader(1 << 20)
    reader.receive_data(data)
    out = []
    while True:
        try:
            event = reader.next_event()
        except ValueError:
            return out
        if event is NEED_DATA:
            return out
        out.append(event)
        if isinstance(event, Frame) and isinstance(event.body, SaslOutcome):
            reader.expect_header = True


def _open(address, max_frame_size: int = 65536, mechanism: str = "PLAIN",
          response: bytes = b"\0guest\0guest") -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    sock.sendall(HEADER_SASL + encode_frame(0, SaslInit(mechanism=mechanism, initial_response=response),
                                            type_=SASL_FRAME)
                 + HEADER_AMQP + encode_frame(0, Open(container_id="raw", max_frame_size=max_frame_size))
                 + encode_frame(0, Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=1000)))
    return sock


def _close_condition(data: bytes) -> str | None:
    for event in _frames(data):
        if isinstance(event, Frame) and isinstance(event.body, Close) and event.body.error is not None:
            return event.body.error.condition
    return None


def _no_traceback(broker) -> None:
    assert "Traceback" not in broker.output()


def _still_serves(broker) -> None:
    name = unique("alive")
    connection, channel = pika_channel(broker.address("amqp"))
    channel.queue_declare(name)
    connection.close()
    conn = proton(broker.address("amqp"))
    try:
        assert conn.create_sender(f"/queues/{name}").send(Message(inferred=True, body=b"x"), timeout=10).remote_state \
            == Delivery.ACCEPTED
    finally:
        conn.close()


def test_malformed_performative_is_decode_error(broker):
    sock = _open(broker.address("amqp"))
    sock.sendall(b"\x00\x00\x00\x10\x02\x00\x00\x00" + b"\x00\x53\x12\xc0\xff\x05\x40\x40")  # a list past its frame
    data = read_until_closed(sock)
    sock.close()
    assert _close_condition(data) == "amqp:decode-error"
    _no_traceback(broker)
    _still_serves(broker)


def test_frame_over_max_frame_size(broker):
    sock = _open(broker.address("amqp"), max_frame_size=512)
    big = encode_frame(0, Attach(name="x" * 1000, handle=0, role=False, target=Target(address="/queues/q")))
    sock.sendall(big)
    data = read_until_closed(sock)
    sock.close()
    assert _close_condition(data) == "amqp:frame-size-too-small"
    _no_traceback(broker)


def test_refused_login_and_unknown_mechanism(broker):
    for mechanism, response in (("PLAIN", b"\0guest\0wrong"), ("CRAM-MD5", b"")):
        sock = _open(broker.address("amqp"), mechanism=mechanism, response=response)
        data = read_until_closed(sock)
        sock.close()
        outcomes = [e.body for e in _frames(data) if isinstance(e, Frame) and isinstance(e.body, SaslOutcome)]
        assert outcomes and outcomes[0].code == 1
        assert not any(isinstance(e, Frame) and isinstance(e.body, Open) for e in _frames(data))
    _no_traceback(broker)


def test_client_vanishing_mid_transfer_stores_nothing(broker):
    address = broker.address("amqp")
    name = unique("torn")
    connection, channel = pika_channel(address)
    channel.queue_declare(name, durable=True)
    connection.close()
    sock = _open(address)
    body = encode_message(Message10(body_kind="data", body=[b"z" * 5000]))
    sock.sendall(encode_frame(0, Attach(name="torn", handle=0, role=False, target=Target(address=f"/queues/{name}"),
                                        initial_delivery_count=0)))
    time.sleep(0.3)  # attach answered and credit granted
    sock.sendall(encode_frame(0, Transfer(handle=0, delivery_id=0, delivery_tag=b"1", message_format=0, more=True),
                              body[:2000]))
    time.sleep(0.2)
    sock.close()  # gone before the last frame of the message
    time.sleep(0.3)
    connection, channel = pika_channel(address)
    try:
        assert get_all(channel, name) == []
    finally:
        connection.close()
    _no_traceback(broker)
    _still_serves(broker)


def test_anonymous_and_plain_header(broker):
    """ANONYMOUS logs in as guest from loopback (RabbitMQ 4's anonymous login user); so does a plain AMQP header."""
    sock = _open(broker.address("amqp"), mechanism="ANONYMOUS", response=b"")
    data = b""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(isinstance(e, Frame) and isinstance(e.body, Begin)
                                                  for e in _frames(data)):
        data += sock.recv(65536)
    sock.close()
    outcomes = [e.body for e in _frames(data) if isinstance(e, Frame) and isinstance(e.body, SaslOutcome)]
    assert outcomes[0].code == 0
    sock = socket.create_connection(broker.address("amqp"), timeout=5)
    sock.sendall(HEADER_AMQP + encode_frame(0, Open(container_id="plain")))
    data = b""
    while b"\x00\x53\x10" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert data.startswith(HEADER_AMQP)
    assert any(isinstance(e, Frame) and isinstance(e.body, Open) for e in _frames(data))


@pytest.mark.parametrize("head", [b"AMQP\x00\x00\x09\x01", b"AMQP\x05\x05\x05\x05"])
def test_header_dispatch_leaves_091_alone(broker, head):
    """The 0-9-1 header still opens 0-9-1; an unknown header gets the 0-9-1 header back, as before."""
    sock = socket.create_connection(broker.address("amqp"), timeout=5)
    for byte in head:  # a byte at a time: the protocol is chosen once all 8 are in
        sock.sendall(bytes((byte,)))
        time.sleep(0.01)
    data = sock.recv(65536)
    sock.close()
    if head == b"AMQP\x00\x00\x09\x01":
        assert data[:1] == b"\x01"  # a method frame: connection.start
    else:
        assert data == b"AMQP\x00\x00\x09\x01"


def test_session_error_ends_only_that_session(broker):
    """A transfer on a handle that is not attached ends its session (amqp:session:unattached-handle);
    the connection goes on: after the client's end, the channel takes a new session."""
    sock = _open(broker.address("amqp"))
    sock.sendall(encode_frame(0, Transfer(handle=9, delivery_id=0, delivery_tag=b"1", message_format=0), b"x"))
    data = b""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(isinstance(e, Frame) and isinstance(e.body, End)
                                                  for e in _frames(data)):
        data += sock.recv(65536)
    ends = [e.body for e in _frames(data) if isinstance(e, Frame) and isinstance(e.body, End)]
    assert ends and ends[0].error.condition == "amqp:session:unattached-handle"
    sock.sendall(encode_frame(0, End()) + encode_frame(0, Begin(next_outgoing_id=0, incoming_window=10,
                                                                  outgoing_window=10)))
    more = b""
    while time.monotonic() < deadline and sum(isinstance(e, Frame) and isinstance(e.body, Begin)
                                              for e in _frames(data + more)) < 2:
        more += sock.recv(65536)
    sock.close()
    assert sum(isinstance(e, Frame) and isinstance(e.body, Begin) for e in _frames(data + more)) == 2
    _no_traceback(broker)
