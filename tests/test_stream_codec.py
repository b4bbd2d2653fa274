"""wire.stream_codec against rstream's own encoder and decoder (an independent implementation of
the RabbitMQ stream protocol's frames), plus malformed input."""
from __future__ import annotations

import gzip
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rstream import schema
from rstream.constants import OffsetType
from rstream.encoding import decode_frame, encode_frame, encode_publish

from wire import stream_codec as sc


def decoded(frame_bytes: bytes) -> sc.Request:
    frames = sc.FrameBuffer().feed(frame_bytes)
    assert len(frames) == 1
    return sc.decode_request(*frames[0])


def test_frames_are_cut_from_any_split():
    one = encode_frame(schema.Heartbeat())
    two = encode_frame(schema.Open(correlation_id=7, virtual_host="/"))
    data = one + two + one
    buffer = sc.FrameBuffer()
    frames = []
    for i in range(len(data)):
        frames += buffer.feed(data[i:i + 1])
    assert [(k, v) for k, v, _ in frames] == [(sc.HEARTBEAT, 1), (sc.OPEN, 1), (sc.HEARTBEAT, 1)]


def test_client_commands_decode():
    r = decoded(encode_frame(schema.PeerProperties(correlation_id=1, properties=[schema.Property("product", "x")])))
    assert (r.command, r.correlation_id, r.properties) == (sc.PEER_PROPERTIES, 1, {"product": "x"})
    r = decoded(encode_frame(schema.SaslAuthenticate(correlation_id=2, mechanism="PLAIN", data=b"\0u\0p")))
    assert (r.mechanism, r.data) == ("PLAIN", b"\0u\0p")
    r = decoded(encode_frame(schema.Tune(frame_max=1 << 20, heartbeat=60)))
    assert (r.frame_max, r.heartbeat) == (1 << 20, 60)
    r = decoded(encode_frame(schema.DeclarePublisher(correlation_id=3, publisher_id=4, reference="p", stream="s")))
    assert (r.publisher_id, r.reference, r.stream) == (4, "p", "s")
    spec = schema.OffsetSpec.from_params(OffsetType.TIMESTAMP, 1234)
    r = decoded(encode_frame(schema.Subscribe(correlation_id=5, subscription_id=6, stream="s", offset_spec=spec,
                                              credit=10, properties=[schema.Property("filter.0", "ca")])))
    assert (r.subscription_id, r.stream, r.offset_spec, r.credit, r.properties) == \
        (6, "s", (sc.OFFSET_TIMESTAMP, 1234), 10, {"filter.0": "ca"})
    r = decoded(encode_frame(schema.StoreOffset(reference="ref", stream="s", offset=99)))
    assert (r.correlation_id, r.reference, r.offset) == (None, "ref", 99)
    r = decoded(encode_frame(schema.CreateSuperStream(correlation_id=8, super_stream="inv", partitions=["inv-0"],
                                                      binding_keys=["0"], arguments=[])))
    assert (r.super_stream, r.partitions, r.binding_keys, r.arguments) == ("inv", ["inv-0"], ["0"], {})
    r = decoded(encode_frame(schema.Metadata(correlation_id=9, streams=["a", "b"])))
    assert r.streams == ["a", "b"]


def test_publish_v1_v2_and_sub_entries():
    messages = [schema.Message(publishing_id=i, filter_value=None, data=b"m%d" % i) for i in range(3)]
    r = decoded(encode_publish(schema.Publish(publisher_id=1, messages=messages)))
    assert r.messages == [(0, None, b"m0"), (1, None, b"m1"), (2, None, b"m2")]
    messages = [schema.Message(publishing_id=5, filter_value="ca", data=b"x")]
    r = decoded(encode_publish(schema.Publish(publisher_id=1, messages=messages), version_to_encode=2))
    assert r.version == 2 and r.messages == [(5, "ca", b"x")]
    inner = b"".join(struct.pack(">I", len(m)) + m for m in (b"one", b"two"))
    for kind, data in ((0, inner), (1, gzip.compress(inner))):
        frame = encode_frame(schema.PublishSubBatching(
            publisher_id=1, number_of_root_messages=1, publishing_id=7, compress_type=0x80 | kind << 4,
            subbatching_message_count=2, uncompressed_data_size=len(inner), compressed_data_size=len(data),
            messages=data))
        assert decoded(frame).messages == [(7, None, b"one"), (7, None, b"two")]


def test_server_frames_decode_in_rstream():
    frame = decode_frame(sc.encode_deliver(3, 100, 1_700_000_000_000, [b"a", b"bc"])[4:])
    assert isinstance(frame, schema.Deliver)
    assert (frame.subscription_id, frame.chunk_first_offset, frame.num_entries) == (3, 100, 2)
    assert frame.get_messages() == [b"a", b"bc"] and frame.chunk_crc == zlib.crc32(b"\0\0\0\x01a\0\0\0\x02bc")
    frame = decode_frame(sc.encode_publish_confirm(2, [1, 2, 3])[4:])
    assert (frame.publisher_id, frame.publishing_ids) == (2, [1, 2, 3])
    frame = decode_frame(sc.encode_metadata(4, [(0, "localhost", 5552)], [("s", sc.OK, 0, [0]),
                                                                          ("t", sc.STREAM_DOES_NOT_EXIST, 0xFFFF, [])])[4:])
    assert frame.brokers[0].port == 5552 and [m.name for m in frame.metadata] == ["s", "t"]
    frame = decode_frame(sc.encode_command_versions(5)[4:])
    assert [v.key_command for v in frame.command_versions][:2] == [1, 2]  # clients index by key - 1
    assert frame.command_versions[sc.PUBLISH - 1].max_version == 2
    frame = decode_frame(sc.encode_u64_response(sc.QUERY_OFFSET, 6, sc.OK, 42)[4:])
    assert (frame.correlation_id, frame.offset) == (6, 42)


def test_frame_limits_and_malformed_frames():
    buffer = sc.FrameBuffer(max_size=100)
    with pytest.raises(sc.StreamFrameError) as err:
        buffer.feed(struct.pack(">I", 101))
    assert err.value.code == sc.FRAME_TOO_LARGE
    with pytest.raises(sc.StreamFrameError):
        decoded(struct.pack(">IHH", 4, 999, 1))  # unknown command
    with pytest.raises(sc.StreamFrameError):
        decoded(struct.pack(">IHHI", 8, sc.OPEN, 1, 1))  # missing vhost
    with pytest.raises(sc.StreamFrameError):
        decoded(struct.pack(">IHHIhB", 13, sc.OPEN, 1, 1, 1, 0x41) + b"zz")  # trailing bytes


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 40), st.binary(max_size=64))
def test_any_body_decodes_or_raises_its_own_error(key, body):
    try:
        sc.decode_request(key, 1, memoryview(body))
    except sc.StreamFrameError:
        pass


def test_unknown_versions_are_unknown_frames():
    """A version outside what ExchangeCommandVersions announces was decoded as version 1."""
    body = struct.pack(">I", 1) + struct.pack(">h", 1) + b"/"
    for version in (0, 2, 0xFFFF):
        with pytest.raises(sc.StreamFrameError) as err:
            sc.decode_request(sc.OPEN, version, memoryview(body))
        assert err.value.code == sc.UNKNOWN_FRAME
    assert sc.decode_request(sc.OPEN, 1, memoryview(body)).vhost == "/"


def test_client_tune_decodes_with_or_without_the_response_bit():
    """RabbitMQ's Java stream client answers the server's Tune with key 0x8014 (the response bit set),
    other clients with 0x0014: both are the client's Tune, not a response to route elsewhere."""
    body = memoryview(struct.pack(">II", 65536, 30))
    for key in (sc.TUNE, sc.TUNE | sc.RESPONSE):
        tune = sc.decode_request(key, 1, body)
        assert (tune.command, tune.response, tune.frame_max, tune.heartbeat) == (sc.TUNE, False, 65536, 30)


def test_consumer_update_response_may_name_no_offset():
    """RabbitMQ's Java client answers a ConsumerUpdate that made its consumer passive with offset
    type 0 (none); an active one's answer names a real offset; type 0 stays invalid in Subscribe."""
    key = sc.CONSUMER_UPDATE | sc.RESPONSE
    passive = sc.decode_request(key, 1, memoryview(struct.pack(">IHH", 7, sc.OK, 0)))
    assert (passive.response, passive.correlation_id, passive.offset_spec) == (True, 7, (sc.OFFSET_NONE, None))
    active = sc.decode_request(key, 1, memoryview(struct.pack(">IHHQ", 8, sc.OK, sc.OFFSET_OFFSET, 42)))
    assert active.offset_spec == (sc.OFFSET_OFFSET, 42)
    subscribe = struct.pack(">IBh", 1, 0, 1) + b"s" + struct.pack(">HH", 0, 10) + struct.pack(">I", 0)
    with pytest.raises(sc.StreamFrameError):
        sc.decode_request(sc.SUBSCRIBE, 1, memoryview(subscribe))


def _sub_entry(kind: int, count: int, size: int, data: bytes, pid: int = 7) -> memoryview:
    return memoryview(struct.pack(">BiQ", 1, 1, pid) + bytes([0x80 | kind << 4]) +
                      struct.pack(">Hii", count, size, len(data)) + data)


def test_sub_entry_batch_above_the_limit_is_refused_undecompressed():
    """Declaring more than MAX_SUB_ENTRY_BYTES uncompressed: (id, filter, None), not decompressed
    (it was, whatever the size, and garbage then closed the connection)."""
    r = sc.decode_request(sc.PUBLISH, 1, _sub_entry(1, 1, sc.MAX_SUB_ENTRY_BYTES + 1, b"not gzip"))
    assert r.messages == [(7, None, None)]


@pytest.mark.parametrize("kind, codec", [(1, "gzip"), (4, "zstd"), (3, "lz4")])
def test_sub_entry_bomb_is_refused_without_inflating_it(kind, codec):
    """64 MB of zeros compress to a few kB: a batch declaring 100 bytes must not make the codec
    produce 64 MB first (it decompressed everything, then compared sizes)."""
    import tracemalloc

    import cramjam
    zeros = bytes(64 << 20)
    if codec == "gzip":
        compress = zlib.compressobj(9, zlib.DEFLATED, 31)
        data = compress.compress(zeros) + compress.flush()
    else:
        data = bytes(getattr(cramjam, codec).compress(zeros))
    del zeros
    tracemalloc.start()
    try:
        with pytest.raises(sc.StreamFrameError) as err:
            sc.decode_request(sc.PUBLISH, 1, _sub_entry(kind, 1, 100, data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.code == sc.PRECONDITION_FAILED
    assert peak < 4 << 20, f"decoding a {len(data)}-byte {codec} bomb allocated {peak >> 20} MB"


@pytest.mark.parametrize("kind, codec", [(1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")])
def test_sub_entry_batch_of_every_codec_opens(kind, codec):
    import cramjam
    inner = b"".join(struct.pack(">I", len(m)) + m for m in (b"one", b"two", b"three"))
    data = gzip.compress(inner) if codec == "gzip" else bytes(getattr(cramjam, codec).compress(inner))
    r = sc.decode_request(sc.PUBLISH, 1, _sub_entry(kind, 3, len(inner), data))
    assert r.messages == [(7, None, b"one"), (7, None, b"two"), (7, None, b"three")]
    with pytest.raises(sc.StreamFrameError):  # declaring one byte less or more than it holds
        sc.decode_request(sc.PUBLISH, 1, _sub_entry(kind, 3, len(inner) - 1, data))
    with pytest.raises(sc.StreamFrameError):
        sc.decode_request(sc.PUBLISH, 1, _sub_entry(kind, 3, len(inner) + 1, data))


def test_a_new_frame_max_applies_to_the_next_frame_of_the_same_read():
    """Frames were cut a whole read at a time, so raising the limit after one frame (Open) came
    too late for the frames behind it in the same read."""
    small, big = encode_frame(schema.Heartbeat()), encode_frame(schema.Metadata(correlation_id=1, streams=["s" * 200]))
    buffer = sc.FrameBuffer(max_size=100)
    buffer.push(small + big)
    assert buffer.pop()[0] == sc.HEARTBEAT
    buffer.max_size = 1000
    assert buffer.pop()[0] == sc.METADATA and buffer.pop() is None


def test_error_responses_keep_their_shape():
    """A refusal carries the answer's other fields (zero, or an empty list), as RabbitMQ sends it."""
    for command, cls, extra in ((sc.QUERY_OFFSET, schema.QueryOffsetResponse, 8),
                                (sc.QUERY_PUBLISHER_SEQUENCE, schema.QueryPublisherSequenceResponse, 8),
                                (sc.ROUTE, schema.SuperStreamRouteResponse, 4),
                                (sc.PARTITIONS, schema.SuperStreamPartitionsResponse, 4),
                                (sc.CREATE, schema.CreateResponse, 0)):
        data = sc.error_response(command, 9, sc.STREAM_DOES_NOT_EXIST)
        assert len(data) == 4 + 2 + 2 + 4 + 2 + extra
        frame = decode_frame(data[4:])
        assert isinstance(frame, cls) and (frame.correlation_id, frame.response_code) == (9, 2)
