"""Bad input on the Kafka port: a clear protocol answer or a closed connection, never harm."""
from __future__ import annotations

import datetime
import socket
import struct

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from tests.test_wire_kafka import request_bytes
from wire.framing import frame
from wire.kafka import request_class, response_class
from wire.records import simple_batch


def _call(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(frame(payload))
    head = _recv_exact(sock, 4)
    return _recv_exact(sock, struct.unpack(">i", head)[0])


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    sock.settimeout(10)
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(30)  # generous: the suite may share the machine with the crash test's fsyncs
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _produce(records: bytes, topic="bad-input"):
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    return cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=records),)),))


def _produce_result(sock, records: bytes, correlation_id: int):
    data = _call(sock, request_bytes(0, 9, correlation_id, _produce(records)))
    assert struct.unpack_from(">i", data)[0] == correlation_id
    body, _ = entity_reader(response_class(0, 9))(data, 5)
    return body.responses[0].partition_responses[0]


def test_corrupt_batch_gets_corrupt_message_and_harms_nothing(broker):
    good = simple_batch([b"one", b"two"], timestamp_ms=1_700_000_000_000)
    with socket.create_connection(broker.address("kafka")) as s:
        first = _produce_result(s, good, 1)
        assert first.error_code == ErrorCode.none and first.base_offset == 0
        damaged = bytearray(good)
        damaged[-1] ^= 0xFF  # breaks the CRC
        bad = _produce_result(s, bytes(damaged), 2)
        assert bad.error_code == ErrorCode.corrupt_message
        truncated = _produce_result(s, good[:40], 3)
        assert truncated.error_code == ErrorCode.corrupt_message
        again = _produce_result(s, good, 4)  # the connection still works, offsets stay dense
        assert again.error_code == ErrorCode.none and again.base_offset == 2


def test_api_versions_with_unknown_version_answers_v0_with_the_list(broker):
    with socket.create_connection(broker.address("kafka")) as s:
        data = _call(s, struct.pack(">hhih", 18, 77, 11, -1))
        assert struct.unpack_from(">i", data)[0] == 11
        body, _ = entity_reader(response_class(18, 0))(data, 4)
        assert body.error_code == ErrorCode.unsupported_version
        assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} >= {(18, 0, 4), (0, 0, 13), (1, 4, 18)}


def test_malformed_request_and_unsupported_version_close_only_that_connection(broker):
    with socket.create_connection(broker.address("kafka")) as s:
        s.sendall(frame(struct.pack(">hhih", 3, 12, 1, -1) + b"\xff\xff\xff"))  # Metadata v12 body cut short
        assert _closed(s)
    with socket.create_connection(broker.address("kafka")) as s:
        s.sendall(frame(struct.pack(">hhih", 9, 0, 1, -1) + b"\0" * 20))  # OffsetFetch v0: not offered
        assert _closed(s)
    with socket.create_connection(broker.address("kafka")) as s:  # the broker is fine
        data = _call(s, request_bytes(18, 3, 5, request_class(18, 3)(client_software_name="t",
                                                                     client_software_version="1")))
        assert struct.unpack_from(">i", data)[0] == 5
    out = broker.output()
    assert "malformed MetadataRequest v12" in out and "unsupported API or version" in out


def test_produce_v0_to_v2_get_unsupported_version_per_partition(broker):
    topic = b"old-client"
    body = struct.pack(">hi", 1, 5000) + struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic
    body += struct.pack(">i", 2) + struct.pack(">ii", 0, 3) + b"abc" + struct.pack(">ii", 1, 0)
    with socket.create_connection(broker.address("kafka")) as s:
        for version in (0, 1, 2):
            data = _call(s, struct.pack(">hhih", 0, version, 30 + version, -1) + body)
            corr, ntopics, name_len = struct.unpack_from(">iih", data)
            assert (corr, ntopics, data[10:10 + name_len]) == (30 + version, 1, topic)
            pos = 10 + name_len
            (nparts,) = struct.unpack_from(">i", data, pos)
            first = struct.unpack_from(">ihq", data, pos + 4)
            assert nparts == 2 and first == (0, ErrorCode.unsupported_version, -1)
            per_partition = 14 + (8 if version >= 2 else 0)
            assert len(data) == pos + 4 + 2 * per_partition + (4 if version >= 1 else 0)


def test_malformed_produce_v0_to_v2_closes_cleanly_without_a_traceback(broker):
    topic = b"old-client"
    cut = struct.pack(">hi", 1, 5000) + struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic
    for version in (0, 1, 2):
        with socket.create_connection(broker.address("kafka")) as s:
            s.sendall(frame(struct.pack(">hhih", 0, version, 40 + version, -1) + cut + b"\x00"))  # partitions cut
            assert _closed(s)
    with socket.create_connection(broker.address("kafka")) as s:  # the broker is fine
        good = simple_batch([b"after"], timestamp_ms=1_700_000_000_000)
        assert _produce_result(s, good, 1).error_code == ErrorCode.none
    out = broker.output()
    assert out.count("malformed ProduceRequest v0-2") == 3
    assert "Traceback" not in out and "internal error" not in out


def test_client_vanishing_mid_request_is_harmless(broker):
    with socket.create_connection(broker.address("kafka")) as s:
        s.sendall(struct.pack(">i", 1000) + b"\0" * 10)  # promises 1000 bytes, sends 10, leaves
    with socket.create_connection(broker.address("kafka")) as s:
        good = simple_batch([b"after"], timestamp_ms=1_700_000_000_000)
        assert _produce_result(s, good, 1).error_code == ErrorCode.none
