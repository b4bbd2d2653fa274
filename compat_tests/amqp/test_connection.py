"""Connection opening and tuning: protocol header, capabilities, authentication, vhosts,
heartbeats, frame_max and channel_max, with pika and a raw socket."""
from __future__ import annotations

import socket
import time

import pika
import pytest
from pamqp import commands
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from .helpers import PROTOCOL_HEADER, RawAMQP, connect, unique

CAPABILITIES = ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                "consumer_cancel_notify", "connection.blocked", "authentication_failure_close",
                "per_consumer_qos")


def _read_until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data  # RabbitMQ closes with unread input pending: a reset after its answer
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"server did not close the connection within {timeout}s (read {data!r})")


# (AMQP 1.0's headers are not here: the port serves AMQP 1.0 too, as RabbitMQ 4 does; see compat_tests/amqp10)
@pytest.mark.parametrize("header", [
    b"AMQP\x01\x01\x00\x0a",  # AMQP 0-10
    b"AMQP\x00\x00\x08\x00",  # AMQP 0-8
    b"GET / HTTP/1.1\r\n\r\n",
], ids=["amqp0-10", "amqp0-8", "http"])
def test_wrong_protocol_header_gets_ours_and_close(amqp_broker, header):
    with socket.create_connection((amqp_broker.host, amqp_broker.port), timeout=5) as s:
        s.sendall(header)
        assert _read_until_closed(s) == PROTOCOL_HEADER


def test_server_properties_capabilities(connection):
    props = connection._impl.server_properties
    caps = props.get("capabilities", {})
    missing = [c for c in CAPABILITIES if caps.get(c) is not True]
    assert not missing, f"capabilities missing or not true: {missing} (got {caps})"
    assert isinstance(props.get("product"), (str, bytes)) and props.get("product")
    assert isinstance(props.get("version"), (str, bytes))


def test_wrong_password_is_refused_with_403(amqp_broker):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(amqp_broker, credentials=pika.PlainCredentials("guest", "not-the-password"))
    text = str(info.value)
    assert "(403)" in text and "ACCESS_REFUSED" in text, text


def test_unknown_user_is_refused_with_403(amqp_broker):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(amqp_broker, credentials=pika.PlainCredentials(unique("nobody"), "x"))
    assert "(403)" in str(info.value) and "ACCESS_REFUSED" in str(info.value)


def test_unknown_vhost_is_530_not_allowed(amqp_broker):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        connect(amqp_broker, virtual_host="no-such-vhost")
    text = str(info.value)
    assert "(530)" in text and "NOT_ALLOWED - vhost no-such-vhost not found" in text, text


def test_raw_wrong_password_gets_connection_close_403(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.send_bytes(PROTOCOL_HEADER)
        raw.expect(commands.Connection.Start)
        raw.send(commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN", response="\0guest\0wrong"))
        close = raw.expect(commands.Connection.Close, channel=0)
        assert close.reply_code == 403
        assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")


def test_heartbeat_negotiated_and_kept_alive(amqp_broker):
    proposed = []

    def choose(_conn, server_value):
        proposed.append(server_value)
        return 2

    conn = connect(amqp_broker, heartbeat=choose)
    try:
        assert proposed and proposed[0] > 0, f"server proposed heartbeat {proposed}"
        assert conn._impl.params.heartbeat == 2
        checker = conn._impl._heartbeat_checker
        assert checker is not None
        # Idle for more than three intervals: only heartbeats cross the wire.
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.5)
        assert conn.is_open
        assert checker._heartbeat_frames_received >= 3, \
            f"only {checker._heartbeat_frames_received} heartbeats from the server in 7 s at interval 2"
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"still here")
        assert ch.basic_get(q, auto_ack=True)[2] == b"still here"
    finally:
        conn.close()


def test_silent_client_is_dropped_after_missed_heartbeats(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake(heartbeat=1)
        began = time.monotonic()
        beats = 0
        with pytest.raises(AssertionError, match="server closed the connection"):
            while time.monotonic() - began < 8:
                _, frame = raw.recv(timeout=8)
                beats += isinstance(frame, Heartbeat)
        took = time.monotonic() - began
        assert beats >= 1, "the server sent no heartbeat at interval 1 s"
        assert 1.5 <= took <= 6, f"silent client dropped after {took:.1f}s at heartbeat 1 s"


def test_frame_max_negotiation(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake(open_vhost=False, frame_max=0)
        server_frame_max = raw.tune.frame_max
    assert server_frame_max >= 4096, f"server proposed frame_max {server_frame_max}"
    conn = connect(amqp_broker, frame_max=4096)
    try:
        assert conn._impl.params.frame_max == 4096
    finally:
        conn.close()
    conn = connect(amqp_broker, frame_max=131072)  # pika's largest
    try:
        assert conn._impl.params.frame_max == min(server_frame_max, 131072)  # the smaller value wins
    finally:
        conn.close()


@pytest.mark.parametrize("frame_max", [4096, None], ids=["frame_max-4096", "frame_max-default"])
def test_body_larger_than_frame_max_round_trips(amqp_broker, frame_max):
    kw = {"frame_max": frame_max} if frame_max else {}
    conn = connect(amqp_broker, **kw)
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        body = bytes(range(256)) * 4096  # 1 MiB, every byte value
        ch.basic_publish("", q, body)
        method, _, got = ch.basic_get(q, auto_ack=True)
        assert method is not None and len(got) == len(body) and got == body
    finally:
        conn.close()


def test_deliveries_respect_negotiated_frame_max(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake(frame_max=4096)
        raw.open_channel(1)
        q = unique("frame-max")
        raw.send(commands.Queue.Declare(queue=q, exclusive=True), 1)
        raw.expect(commands.Queue.DeclareOk, channel=1)
        raw.publish(1, "", q, b"x" * 10000)
        raw.send(commands.Basic.Get(queue=q, no_ack=True), 1)
        raw.expect(commands.Basic.GetOk, channel=1)
        header = raw.expect(ContentHeader, channel=1)
        assert header.body_size == 10000
        sizes = []
        while sum(sizes) < 10000:
            _, body = raw.recv_method()
            sizes.append(len(body.value))
        assert max(sizes) <= 4096 - 8, f"body frames of {sizes} bytes exceed frame_max 4096"


def test_frame_larger_than_frame_max_is_501(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake(frame_max=4096)
        raw.open_channel(1)
        raw.publish(1, "", "anything", b"x" * 10000, frame_max=8192)
        close = raw.expect(commands.Connection.Close, channel=0)
        assert close.reply_code == 501 and close.reply_text.startswith("FRAME_ERROR"), close.reply_text


def test_channel_max_negotiation(amqp_broker):
    conn = connect(amqp_broker, channel_max=3)
    try:
        assert conn._impl.params.channel_max == 3
        channels = [conn.channel() for _ in range(3)]
        assert sorted(c.channel_number for c in channels) == [1, 2, 3]
        with pytest.raises(pika.exceptions.NoFreeChannels):
            conn.channel()
    finally:
        conn.close()
    conn = connect(amqp_broker, channel_max=65535)
    try:
        assert 0 < conn._impl.params.channel_max < 65535  # the server's limit wins
    finally:
        conn.close()


def test_channel_above_channel_max_is_530(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake(channel_max=2)
        raw.open_channel(1)
        raw.open_channel(2)
        raw.send(commands.Channel.Open(), 3)
        close = raw.expect(commands.Connection.Close, channel=0)
        assert close.reply_code == 530
        assert close.reply_text.startswith("NOT_ALLOWED - number of channels opened (2) has reached "
                                           "the negotiated channel_max (2)"), close.reply_text
        raw.send(commands.Connection.CloseOk())
        assert raw.closed_by_peer(5)


def test_client_close_is_answered_with_close_ok(amqp_broker):
    with RawAMQP(amqp_broker.host, amqp_broker.port) as raw:
        raw.handshake()
        raw.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        raw.expect(commands.Connection.CloseOk, channel=0)
        # (RabbitMQ then waits for the client to close the socket.)


@pytest.mark.parametrize("secret", ["guest", "a-new-secret", ""])
def test_update_secret_from_a_password_user_is_accepted(amqp_broker, secret):
    """Issue 31: RabbitMQ's internal backend accepts connection.update-secret from a password
    user whatever the secret (the identity does not change; nothing is re-checked), so clients
    that refresh credentials on a timer stay connected. The connection keeps working after it."""
    q = unique("upd-secret-")
    with connect(amqp_broker) as conn:
        conn.update_secret(secret, "rotation")
        ch = conn.channel()
        ch.queue_declare(q, exclusive=True)
        ch.basic_publish("", q, b"after")
        assert ch.basic_get(q, auto_ack=True)[2] == b"after"
