"""Bad input on the stream listener: each gets the protocol's own error, and the broker goes on."""
from __future__ import annotations

import socket
import struct
import time

import pytest
from rstream import Producer, schema
from rstream.constants import OffsetType
from rstream.encoding import decode_frame, encode_frame, encode_publish
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
    # a version of Create that does not exist: UNKNOWN_FRAME, as RabbitMQ reads it (it was served as version 1)
    (struct.pack(">IHHI", 16, 13, 9, 5) + struct.pack(">h", 2) + b"v9" + struct.pack(">i", 0), 13),
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


def exchange(sock: socket.socket, frames: list, last: int, others: list | None = None) -> dict:
    """Send ``frames`` (rstream frames, or bytes as they go on the wire); the responses (by
    correlation id) until the one to ``last`` has come; other decoded frames go to ``others``."""
    for frame in frames:
        sock.sendall(frame if isinstance(frame, bytes) else encode_frame(frame))
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
            elif others is not None:
                others.append(decoded)
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


# --- frames rstream will not build (null strings, oversized fields), byte by byte -------------
def _str(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _strings(values: list) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(_str(v) for v in values)


def _props(pairs: list) -> bytes:
    return struct.pack(">i", len(pairs)) + b"".join(_str(k) + _str(v) for k, v in pairs)


def request(key: int, correlation_id: int, body: bytes, version: int = 1) -> bytes:
    return struct.pack(">IHHI", len(body) + 8, key, version, correlation_id) + body


PRECONDITION_FAILED = 17


def test_names_a_stream_cannot_have_are_precondition_failed(broker):
    """Create with a null name was an internal error (connection closed); an empty one made a
    server-named queue ('' names one in AMQP); 'amq.' names and names past a short string were
    created. RabbitMQ answers PRECONDITION_FAILED; so does this now, and the connection goes on."""
    sock = open_socket(broker, authenticated=True)
    try:
        answers = exchange(sock, [
            request(13, 10, _str(None) + _props([])),
            request(13, 11, _str("") + _props([])),
            request(13, 12, _str("amq.stream") + _props([])),
            request(13, 13, _str("s" * 300) + _props([])),
            request(29, 14, _str(None) + _strings(["p-0"]) + _strings(["0"]) + _props([])),
            request(29, 15, _str("sup") + _strings([None]) + _strings(["0"]) + _props([])),
            request(29, 16, _str("sup") + _strings(["sup-0"]) + _strings([None]) + _props([])),
            request(13, 17, _str("a-good-name") + _props([]))], 17)
        assert {cid: answers[cid].response_code for cid in range(10, 17) if cid in answers} == \
            dict.fromkeys(range(10, 17), PRECONDITION_FAILED)
        assert answers[17].response_code == 1
    finally:
        sock.close()


def test_out_of_range_stream_arguments_are_precondition_failed(broker):
    """A max-length-bytes or max-age past what a topic config holds was an internal error."""
    sock = open_socket(broker, authenticated=True)
    try:
        answers = exchange(sock, [
            request(13, 10, _str("bounded") + _props([("max-length-bytes", "9" * 30)])),
            request(13, 11, _str("bounded") + _props([("max-age", "99999999999999999999Y")])),
            request(13, 12, _str("bounded") + _props([("max-length-bytes", "1000000")]))], 12)
        assert [answers[cid].response_code for cid in (10, 11, 12)] == [PRECONDITION_FAILED, PRECONDITION_FAILED, 1]
    finally:
        sock.close()


def test_frames_before_open_are_held_to_8192_bytes(broker):
    """Before Open a frame may be at most 8192 bytes (RabbitMQ's initial frame-max): a peer that
    has not logged in cannot make the broker buffer up to the tuned frame-max. After Open the
    tuned size applies."""
    sock = socket.create_connection(broker.address("stream"))
    properties = [schema.Property(f"k{i}", "v" * 100) for i in range(90)]  # about 9,400 bytes
    sock.sendall(encode_frame(schema.PeerProperties(correlation_id=1, properties=properties)))
    assert close_code(frames_until_close(sock)) == 14  # FRAME_TOO_LARGE
    sock.close()

    sock = open_socket(broker, authenticated=True)
    try:
        big = request(13, 10, _str("after-open") + _props([(f"unknown-{i}", "v" * 100) for i in range(90)]))
        assert len(big) > 9000
        assert exchange(sock, [big], 10)[10].response_code == 1
    finally:
        sock.close()


def test_names_longer_than_255_bytes_are_refused(broker):
    """Publisher and consumer names are at most 255 bytes (RabbitMQ's limit): DeclarePublisher
    and the queries answer PRECONDITION_FAILED (a declared publisher with a longer name was kept)."""
    sock = open_socket(broker, authenticated=True)
    long = "r" * 256
    try:
        answers = exchange(sock, [
            schema.Create(correlation_id=10, stream="named", arguments=[]),
            schema.DeclarePublisher(correlation_id=11, publisher_id=1, reference=long, stream="named"),
            schema.QueryPublisherSequence(correlation_id=12, publisher_ref=long, stream="named"),
            schema.QueryOffset(correlation_id=13, reference=long, stream="named"),
            schema.DeclarePublisher(correlation_id=14, publisher_id=1, reference="r" * 255, stream="named")], 14)
        assert [answers[cid].response_code for cid in (10, 11, 12, 13, 14)] == \
            [1, PRECONDITION_FAILED, PRECONDITION_FAILED, PRECONDITION_FAILED, 1]
    finally:
        sock.close()


def test_refusals_keep_the_response_shape(broker):
    """QueryOffset, QueryPublisherSequence, Route and Partitions refused for a missing stream came
    back as correlation id and code only, without the offset, sequence or list the protocol
    defines for the answer (rstream fills in zeros; a strict decoder reads past the frame)."""
    sock = open_socket(broker, authenticated=True)
    try:
        for frame in (schema.QueryOffset(correlation_id=10, reference="who", stream="missing"),
                      schema.QueryPublisherSequence(correlation_id=11, publisher_ref="who", stream="missing"),
                      schema.SuperStreamRoute(correlation_id=12, routing_key="k", super_stream="missing"),
                      schema.SuperStreamPartitions(correlation_id=13, super_stream="missing")):
            sock.sendall(encode_frame(frame))
        wanted = {0x800B: 18, 0x8005: 18, 0x8018: 14, 0x8019: 14}  # key, version, id, code + u64 or i32 count
        sizes, data, deadline = {}, b"", time.monotonic() + 10
        sock.settimeout(1)
        while len(sizes) < len(wanted) and time.monotonic() < deadline:
            try:
                data += sock.recv(65536)
            except socket.timeout:
                continue
            while len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
                size = struct.unpack(">I", data[:4])[0]
                key = struct.unpack(">H", data[4:6])[0]
                if key in wanted:
                    assert struct.unpack(">H", data[12:14])[0] == 2  # STREAM_DOES_NOT_EXIST
                    sizes[key] = size
                data = data[4 + size:]
        assert sizes == wanted
    finally:
        sock.close()


def test_sub_entry_batch_declaring_too_much_is_a_publish_error(broker):
    """A sub-entry batch declaring more than 64 MB uncompressed is refused for its publishing id
    (PublishError PRECONDITION_FAILED, as RabbitMQ does) without being decompressed; it used to be
    decompressed whatever it declared, and the connection closed."""
    sock = open_socket(broker, authenticated=True)
    try:
        batch = (struct.pack(">BIQ", 1, 2, 7) + bytes([0x80 | 1 << 4]) + struct.pack(">Hii", 1, 65 << 20, 4) + b"zzzz"
                 + struct.pack(">Qi", 8, 2) + b"ok")
        others: list = []
        answers = exchange(sock, [
            schema.Create(correlation_id=10, stream="sub-entries", arguments=[]),
            schema.DeclarePublisher(correlation_id=11, publisher_id=1, reference="", stream="sub-entries"),
            struct.pack(">IHH", len(batch) + 4, 2, 1) + batch,
            schema.Metadata(correlation_id=12, streams=["sub-entries"])], 12, others)
        assert answers[11].response_code == 1
        deadline = time.monotonic() + 10
        while not any(isinstance(f, schema.PublishConfirm) for f in others) and time.monotonic() < deadline:
            exchange(sock, [schema.Metadata(correlation_id=13, streams=[])], 13, others)
        errors = [(e.publishing_id, e.response_code) for f in others if isinstance(f, schema.PublishError)
                  for e in f.errors]
        confirms = [i for f in others if isinstance(f, schema.PublishConfirm) for i in f.publishing_ids]
        assert errors == [(7, PRECONDITION_FAILED)] and confirms == [8]
    finally:
        sock.close()


def test_a_stream_cannot_take_a_super_streams_name(broker):
    """A super stream's topic is named like the super stream: a stream created under that name was
    attached to it and shared the log of partition 0 (caught only for two partitions or more).
    It is PRECONDITION_FAILED now; a partition named like its own super stream still works."""
    sock = open_socket(broker, authenticated=True)
    try:
        answers = exchange(sock, [
            request(29, 10, _str("ledger1") + _strings(["ledger1-0"]) + _strings(["0"]) + _props([])),
            request(13, 11, _str("ledger1") + _props([])),
            request(29, 12, _str("self-named") + _strings(["self-named"]) + _strings(["0"]) + _props([])),
            schema.QueryOffset(correlation_id=13, reference="nobody", stream="self-named")], 13)
        # 19: NO_OFFSET, so the partition stream is there
        assert [answers[cid].response_code for cid in (10, 11, 12, 13)] == [1, PRECONDITION_FAILED, 1, 19]
    finally:
        sock.close()


def test_a_tiny_frame_max_does_not_flood_the_log(broker):
    """A client may tune frame-max below any message: each message it cannot take was skipped
    with its own warning, so one subscription could write a log line per stored message."""
    publisher = open_socket(broker, authenticated=True)
    try:
        answers = exchange(publisher, [
            schema.Create(correlation_id=5, stream="tiny-frames", arguments=[]),
            schema.DeclarePublisher(correlation_id=6, publisher_id=1, reference="", stream="tiny-frames"),
            encode_publish(schema.Publish(publisher_id=1, messages=[
                schema.Message(publishing_id=i, filter_value=None, data=b"x" * 2000) for i in range(20)])),
            schema.Metadata(correlation_id=7, streams=[])], 6)
        assert answers[6].response_code == 1
        time.sleep(1)  # confirmed and below the high watermark
    finally:
        publisher.close()
    sock = socket.create_connection(broker.address("stream"))
    try:
        answers = exchange(sock, [
            schema.PeerProperties(correlation_id=1, properties=[]), schema.SaslHandshake(correlation_id=2),
            schema.SaslAuthenticate(correlation_id=3, mechanism="PLAIN", data=b"\0guest\0guest"),
            schema.Tune(frame_max=1024, heartbeat=0), schema.Open(correlation_id=4, virtual_host="/"),
            schema.Subscribe(correlation_id=8, subscription_id=1, stream="tiny-frames", credit=100, properties=[],
                             offset_spec=schema.OffsetSpec.from_params(OffsetType.FIRST, None))], 8)
        assert answers[8].response_code == 1
        deadline = time.monotonic() + 10
        while broker.output().count("stream=tiny-frames") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        warnings = [line for line in broker.output().splitlines()
                    if "too large for the client's frame-max" in line and "stream=tiny-frames" in line]
        assert len(warnings) == 1, f"{len(warnings)} warnings for 20 skipped messages"
    finally:
        sock.close()
