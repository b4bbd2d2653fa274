"""Bad input on the stream listener: each gets the protocol's own error, and the broker goes on."""
from __future__ import annotations

import socket
import struct
import time

import pytest
from rstream import Producer, schema
from rstream.encoding import decode_frame, encode_frame
from rstream.exceptions import AuthenticationFailure

from compat_tests.stream.helpers import run
from compat_tests.stream.test_rstream import stream_args


def frames_until_close(sock: socket.socket) -> list:
    """Every frame the broker sends until it hangs up."""
    data = b""
    sock.settimeout(10)
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    out = []
    while len(data) >= 4:
        size = struct.unpack(">I", data[:4])[0]
        out.append(data[4:4 + size])
        data = data[4 + size:]
    return out


def open_socket(broker, *, authenticated: bool) -> socket.socket:
    sock = socket.create_connection(broker.address("stream"))
    if authenticated:
        for frame in (schema.PeerProperties(correlation_id=1, properties=[]),
                      schema.SaslHandshake(correlation_id=2),
                      schema.SaslAuthenticate(correlation_id=3, mechanism="PLAIN", data=b"\0guest\0guest")):
            sock.sendall(encode_frame(frame))
        sock.sendall(encode_frame(schema.Tune(frame_max=65536, heartbeat=0)))
        sock.sendall(encode_frame(schema.Open(correlation_id=4, virtual_host="/")))
    return sock


def close_code(frames: list) -> int:
    closes = [f for f in frames if struct.unpack(">H", f[:2])[0] == 22]
    assert closes, f"no Close frame among {len(frames)} frames"
    return decode_frame(closes[-1]).code


@pytest.mark.parametrize("payload, code", [
    (struct.pack(">IHH", 4, 0x7F00, 1), 13),  # unknown command: UNKNOWN_FRAME
    (struct.pack(">IHHIH", 10, 21, 1, 5, 3) + b"/", 13),  # Open with a string running past its frame
    (struct.pack(">I", 10_000_000), 14),  # above the negotiated frame-max: FRAME_TOO_LARGE
])
def test_malformed_frames_close_with_a_code(broker, payload, code):
    sock = open_socket(broker, authenticated=True)
    sock.sendall(payload)
    assert close_code(frames_until_close(sock)) == code
    sock.close()
    run(_still_serving(broker))


def test_wrong_password_is_authentication_failure(broker):
    async def scenario():
        args = {**stream_args(broker), "password": "wrong"}
        with pytest.raises(AuthenticationFailure):
            async with Producer(**args) as producer:
                await producer.create_stream("never")
    run(scenario())
    run(_still_serving(broker))


def test_client_vanishing_mid_frame_loses_nothing(broker):
    sock = open_socket(broker, authenticated=True)
    frame = encode_frame(schema.Create(correlation_id=9, stream="half", arguments=[]))
    sock.sendall(frame[:len(frame) // 2])
    sock.close()
    run(_still_serving(broker))


async def _still_serving(broker):
    async with Producer(**stream_args(broker)) as producer:
        await producer.create_stream("alive", exists_ok=True)
        await producer.send_wait("alive", b"ok")


def test_deleting_a_stream_one_connection_subscribes_to_twice(broker):
    """Two subscriptions of one connection to one stream, then Delete: the stream goes and both
    subscriptions end (the first one's cancellation took the second along, and the deletion
    then failed on it with an internal error, leaving the stream in place)."""
    from rstream.constants import OffsetType
    sock = open_socket(broker, authenticated=True)
    try:
        frames = [schema.Create(correlation_id=10, stream="twice-subscribed", arguments=[])]
        for sub in (1, 2):
            frames.append(schema.Subscribe(correlation_id=10 + sub, subscription_id=sub, stream="twice-subscribed",
                                           offset_spec=schema.OffsetSpec.from_params(OffsetType.FIRST, None),
                                           credit=10, properties=[]))
        frames.append(schema.Delete(correlation_id=20, stream="twice-subscribed"))
        frames.append(schema.Create(correlation_id=21, stream="twice-subscribed", arguments=[]))
        answers = {k: v.response_code for k, v in exchange(sock, frames, 21).items()}
        assert answers.get(20) == 1, f"Delete answered {answers.get(20)} (1 is OK): {answers}"
        assert answers.get(21) == 1, f"the stream was left in place: Create again answered {answers.get(21)}"
    finally:
        sock.close()


def exchange(sock: socket.socket, frames: list, last: int) -> dict:
    """Send ``frames``; the responses (by correlation id) until the one to ``last`` has come."""
    for frame in frames:
        sock.sendall(encode_frame(frame))
    answers, data, deadline = {}, b"", time.monotonic() + 10
    sock.settimeout(1)
    while last not in answers and time.monotonic() < deadline:
        try:
            data += sock.recv(65536)
        except socket.timeout:
            continue
        while len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
            size = struct.unpack(">I", data[:4])[0]
            frame, data = data[4:4 + size], data[4 + size:]
            try:
                decoded = decode_frame(frame)
            except Exception:
                continue
            if hasattr(decoded, "correlation_id") and hasattr(decoded, "response_code"):
                answers[decoded.correlation_id] = decoded
    return answers


def test_store_offset_past_a_signed_64_bit_offset_is_ignored(broker):
    """StoreOffset carries a u64: one above what a stored offset can hold was an internal error;
    it is ignored (the protocol has no answer for StoreOffset), the connection goes on."""
    sock = open_socket(broker, authenticated=True)
    try:
        answers = exchange(sock, [
            schema.Create(correlation_id=10, stream="huge-offset", arguments=[]),
            schema.StoreOffset(reference="app", stream="huge-offset", offset=41),
            schema.StoreOffset(reference="app", stream="huge-offset", offset=2**63),
            schema.StoreOffset(reference="app", stream="huge-offset", offset=2**64 - 1),
            schema.QueryOffset(correlation_id=11, reference="app", stream="huge-offset")], 11)
        assert answers[10].response_code == 1
        assert (answers[11].response_code, answers[11].offset) == (1, 41)
    finally:
        sock.close()
