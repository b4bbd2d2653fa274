"""Bad input on the stream listener: each gets the protocol's own error, and the broker goes on."""
from __future__ import annotations

import socket
import struct

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
