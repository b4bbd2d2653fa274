"""wire.records and wire.varint: known answers, round trips, flags and precise errors."""

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.compression import CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD
from wire.errors import CorruptBatchError
from wire.records import (
    BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchHeader, Header, Record, RecordBatch,
    batch_of_tails, control_record, decode_batch, encode_batch, iter_batches, parse_control_record,
    read_batch_header, record_tail, set_offsets_in_place, simple_batch, validate_batch,
)
from wire import records as records_module
from wire.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]


# --- helpers that build batches with struct, independently of encode_batch ------------

def raw_batch(section: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None,
              base_offset: int = 0, base_ts: int = 0, max_ts: int = 0, magic: int = 2) -> bytes:
    """A batch around a ready records section, CRC computed here."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    covered = struct.pack(">hiqqqhii", attributes, lod, base_ts, max_ts, -1, -1, -1, count) + section
    prefix = struct.pack(">qiib", base_offset, 49 + len(section), -1, magic)
    return prefix + struct.pack(">I", crc32c.crc32c(covered)) + covered


def raw_record(body: bytes) -> bytes:
    """Prefix a record body (small, < 64 bytes) with its one-byte zigzag length."""
    assert len(body) < 64
    return bytes((len(body) << 1,)) + body


# attributes 0, tsDelta 0, offsetDelta 0, key "k", value "hello", one header h=1
TINY_BODY = b"\x00\x00\x00" + b"\x02k" + b"\x0ahello" + b"\x02" + b"\x02h" + b"\x021"


# --- known answers ------------------------------------------------------------------------

def test_crc32c_known_answer():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_known_answer_batch_by_hand():
    ts = 1_700_000_000_000
    section = b"\x20" + TINY_BODY  # 16-byte body -> zigzag length 32 = 0x20
    covered = struct.pack(">hiqqqhii", 0, 0, ts, ts, 1234, 5, 42, 1) + section
    batch = struct.pack(">qiibI", 100, 49 + len(section), 7, 2, crc32c.crc32c(covered)) + covered
    assert len(batch) == 61 + 17

    header = validate_batch(batch)
    assert header == BatchHeader(100, 66, 7, 2, crc32c.crc32c(covered), 0, 0, ts, ts, 1234, 5, 42, 1)
    assert header.size == len(batch) and header.last_offset == 100

    decoded = decode_batch(batch)
    assert decoded.records == (Record(100, ts, b"k", b"hello", (Header("h", b"1"),)),)
    assert (decoded.base_offset, decoded.partition_leader_epoch, decoded.producer_id,
            decoded.producer_epoch, decoded.base_sequence) == (100, 7, 1234, 5, 42)

    # ... and the encoder produces exactly those bytes.
    assert encode_batch(decoded.records, base_offset=100, partition_leader_epoch=7, producer_id=1234,
                        producer_epoch=5, base_sequence=42) == batch


def test_constants():
    assert (BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC) == (61, 12, 2)


# --- varints ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
    (2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01"),
])
def test_varint_vectors(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex("aa" + encoded), 1) == (value, 1 + len(encoded) // 2)


def test_uvarint_vectors():
    assert encode_uvarint(300).hex() == "ac02"
    assert decode_uvarint(b"\xac\x02", 0) == (300, 2)
    assert decode_uvarint(encode_uvarint(2**64 - 1), 0) == (2**64 - 1, 10)


@pytest.mark.parametrize("buf", [
    b"", b"\x80", b"\xff\xff",              # truncated
    b"\xff" * 10 + b"\x01",                  # 11 bytes
    b"\xff" * 9 + b"\x02",                   # 10 bytes but >= 2**64
])
def test_varint_corrupt(buf):
    with pytest.raises(CorruptBatchError):
        decode_uvarint(buf, 0)
    with pytest.raises(CorruptBatchError):
        decode_varint(buf, 0)


def test_varint_encode_range():
    for bad in (-1, 2**64):
        with pytest.raises(ValueError):
            encode_uvarint(bad)
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError):
            encode_varint(bad)


# --- round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    recs = [
        Record(10, 1000, b"key", b"value"),
        Record(11, 1001, None, b"no key"),
        Record(12, 999, b"tombstone", None),   # negative timestamp delta from the base
        Record(13, 1002, None, None, (Header("a", b"1"), Header("null", None), Header("", b""))),
        Record(14, 5, b"", b"", (Header("ünï©ødé", b"\x00\xff"),), attributes=0),
    ]
    batch = encode_batch(recs, base_offset=10, compression=codec)
    header = validate_batch(batch)
    assert header.compression == codec and header.records_count == 5 and header.last_offset == 14
    assert header.base_timestamp == 1000 and header.max_timestamp == 1002
    decoded = decode_batch(batch)
    assert decoded.records == tuple(recs)
    assert decoded.compression == codec and decoded.last_offset == 14


def test_tuples_accepted():
    batch = encode_batch([(0, 5, b"k", b"v"), (1, 6, None, b"w", (Header("h", None),))])
    assert decode_batch(batch).records == (
        Record(0, 5, b"k", b"v"), Record(1, 6, None, b"w", (Header("h", None),)))


def test_large_varints():
    big = b"x" * 70_000  # three-byte lengths
    recs = [
        Record(0, -(2**61), big, big, (Header("h" * 300, big),)),
        Record(2**31 - 1, 2**61, None, b"far"),
    ]
    decoded = decode_batch(encode_batch(recs, compression=ZSTD))
    assert decoded.records == tuple(recs)
    assert decoded.last_offset_delta == 2**31 - 1


def test_flags():
    batch = encode_batch([Record(0, 10, b"k", b"v")], is_transactional=True, producer_id=77,
                         producer_epoch=3, base_sequence=9)
    for obj in (validate_batch(batch), decode_batch(batch)):
        assert obj.is_transactional and not obj.is_control and obj.timestamp_type == 0
        assert (obj.producer_id, obj.producer_epoch, obj.base_sequence) == (77, 3, 9)
    plain = validate_batch(simple_batch([b"v"]))
    assert not plain.is_transactional and not plain.is_control and plain.attributes == 0


def test_log_append_time_reads_max_timestamp_like_kafka():
    recs = [Record(0, 100, None, b"a"), Record(1, 300, None, b"b"), Record(2, 200, None, b"c")]
    batch = encode_batch(recs, timestamp_type=1)
    header = validate_batch(batch)
    assert header.timestamp_type == 1 and header.attributes & 0x08 and header.max_timestamp == 300
    assert [r.timestamp for r in decode_batch(batch).records] == [300, 300, 300]


def test_control_batch():
    marker = control_record(True, coordinator_epoch=7, timestamp=55, offset=3)
    batch = encode_batch([marker], base_offset=3, is_control=True, is_transactional=True,
                         producer_id=12, producer_epoch=1)
    decoded = decode_batch(batch)
    assert decoded.is_control and decoded.is_transactional and validate_batch(batch).is_control
    (record,) = decoded.records
    assert record.key == b"\x00\x00\x00\x01" and record.value == b"\x00\x00\x00\x00\x00\x07"
    assert parse_control_record(record) == (True, 7)
    assert parse_control_record(control_record(False, 2**31 - 1)) == (False, 2**31 - 1)


@pytest.mark.parametrize("key, value, reason", [
    (None, b"\x00\x00\x00\x00\x00\x00", "key shorter"),
    (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", "key shorter"),
    (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x00", "type 2"),
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x00", "key version -1"),
    (b"\x00\x00\x00\x01", b"\x00\x00", "value shorter"),
    (b"\x00\x00\x00\x01", None, "value shorter"),
    (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x00", "value version -1"),
])
def test_parse_control_record_rejects(key, value, reason):
    with pytest.raises(CorruptBatchError, match=reason):
        parse_control_record(Record(0, 0, key, value))


def test_simple_batch():
    batch = simple_batch([b"a", None, b"c"], keys=[b"k", b"k2", None], timestamp_ms=42,
                         compression=LZ4, headers=[("h", b"v"), Header("n", None)])
    header = validate_batch(batch)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 2, 3)
    assert header.max_timestamp == header.base_timestamp == 42 and header.compression == LZ4
    hs = (Header("h", b"v"), Header("n", None))
    assert decode_batch(batch).records == (
        Record(0, 42, b"k", b"a", hs), Record(1, 42, b"k2", None, hs), Record(2, 42, None, b"c", hs))
    # Same bytes as the general encoder.
    assert batch == encode_batch(decode_batch(batch).records, compression=LZ4)
    with pytest.raises(ValueError):
        simple_batch([b"a"], keys=[])
    with pytest.raises(ValueError):
        simple_batch([])
    with pytest.raises(ValueError):
        simple_batch([b"a"], compression=6)


def test_compaction_style_gaps_and_empty_batch():
    kept = [Record(10, 1, b"a", b"1"), Record(13, 2, b"b", b"2")]
    batch = encode_batch(kept, base_offset=10, last_offset_delta=5, partition_leader_epoch=4)
    header = validate_batch(batch)
    assert header.last_offset == 15 and header.records_count == 2 and header.partition_leader_epoch == 4
    assert decode_batch(batch).records == tuple(kept)

    empty = encode_batch([], base_offset=20, last_offset_delta=4)
    header = validate_batch(empty)
    assert header.records_count == 0 and header.last_offset == 24 and header.size == 61
    assert decode_batch(empty).records == ()


@pytest.mark.parametrize("kwargs", [
    dict(records=[]),                                                  # empty needs last_offset_delta
    dict(records=[Record(4, 0, None, b"")], base_offset=5),             # offset below base
    dict(records=[Record(2**31, 0, None, b"")]),                        # delta beyond int32
    dict(records=[Record(3, 0, None, b"")], last_offset_delta=2),       # lod below the last record
    dict(records=[Record(0, 0, None, b"")], compression=5),
    dict(records=[Record(0, 0, None, b"")], timestamp_type=2),
    dict(records=[Record(0, 0, None, b"")], producer_epoch=2**15),      # header field out of range
    dict(records=[Record(0, -(2**62), None, b""), Record(1, 2**62, None, b"")]),  # ts delta > int64
])
def test_encode_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        encode_batch(kwargs.pop("records"), **kwargs)


# --- in-place stamping and iteration -----------------------------------------------------

def test_set_offsets_in_place_keeps_crc_valid():
    batch = encode_batch([Record(0, 1, b"k", b"v"), Record(1, 2, None, b"w")], compression=SNAPPY)
    buf = bytearray(b"\x00" * 5 + batch)
    set_offsets_in_place(buf, 5, 1_000_000_007, 12)
    header = validate_batch(buf, 5)
    assert (header.base_offset, header.partition_leader_epoch, header.crc) == (1_000_000_007, 12,
                                                                               validate_batch(batch).crc)
    assert [r.offset for r in decode_batch(buf, 5).records] == [1_000_000_007, 1_000_000_008]


def test_iter_batches_positions_and_no_lingering_buffer_exports():
    parts = [simple_batch([b"a"] * n, compression=c) for n, c in ((1, NONE), (3, GZIP), (2, ZSTD))]
    buf = bytearray(b"".join(parts))
    got = list(iter_batches(buf))
    assert [pos for pos, _ in got] == [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert [h.records_count for _, h in got] == [1, 3, 2]
    decode_batch(buf, got[1][0])
    decode_batch(memoryview(buf), got[2][0])
    buf.extend(b"resizable")  # BufferError here would mean a memoryview export leaked
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("tail", [b"\x00", b"\x00" * 20, simple_batch([b"x"])[:-1]])
def test_iter_batches_trailing_garbage(tail):
    with pytest.raises(CorruptBatchError):
        list(iter_batches(simple_batch([b"x"]) + tail))


# --- precise corruption reasons ----------------------------------------------------------

GOOD = simple_batch([b"value"], keys=[b"key"])


def test_header_errors():
    with pytest.raises(CorruptBatchError, match="truncated: 10 of 61"):
        read_batch_header(GOOD[:10])
    with pytest.raises(CorruptBatchError, match="truncated: 40 of 61"):
        read_batch_header(GOOD[:40])
    legacy = bytearray(GOOD)
    legacy[16] = 1
    with pytest.raises(CorruptBatchError, match="magic 1"):
        read_batch_header(legacy)
    with pytest.raises(CorruptBatchError, match="magic 0"):
        read_batch_header(bytes(legacy[:17]).replace(b"\x01", b"\x00"))
    short = bytearray(GOOD)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptBatchError, match="batchLength 48"):
        read_batch_header(short)
    # read_batch_header needs the header only, validate_batch the whole batch.
    assert read_batch_header(GOOD[:61]).records_count == 1
    with pytest.raises(CorruptBatchError, match=f"{len(GOOD)} bytes declared, 61 present"):
        validate_batch(GOOD[:61])


def test_crc_mismatch():
    bad = bytearray(GOOD)
    bad[-1] ^= 0x01
    with pytest.raises(CorruptBatchError, match="CRC-32C mismatch"):
        validate_batch(bad)
    with pytest.raises(CorruptBatchError, match="CRC-32C mismatch"):
        decode_batch(bad)
    # The bytes outside the CRC (baseOffset, leader epoch) may change freely.
    ok = bytearray(GOOD)
    ok[0] ^= 0xFF
    ok[12] ^= 0xFF
    validate_batch(ok)


def test_verify_crc_false_skips_only_the_crc():
    bad = bytearray(GOOD)
    struct.pack_into(">I", bad, 17, 0)
    assert decode_batch(bad, verify_crc=False).records == decode_batch(GOOD).records
    with pytest.raises(CorruptBatchError, match="truncated"):
        decode_batch(bad[:-1], verify_crc=False)


@pytest.mark.parametrize("count, lod, attributes, reason", [
    (-1, 0, 0, "negative recordsCount"),
    (2, 0, 0, "lastOffsetDelta 0 for 2 records"),
    (1, -1, 0, "lastOffsetDelta -1"),
    (1, 0, 5, "unknown compression codec 5"),
    (1, 0, 7, "unknown compression codec 7"),
])
def test_header_consistency_errors(count, lod, attributes, reason):
    batch = raw_batch(raw_record(TINY_BODY), count, attributes=attributes, last_offset_delta=lod)
    with pytest.raises(CorruptBatchError, match=reason):
        validate_batch(batch)


@pytest.mark.parametrize("section, count, lod, reason", [
    (raw_record(TINY_BODY), 2, None, "recordsCount is 2 but the records section holds only 1"),
    (raw_record(TINY_BODY) + b"\x00", 1, None, "1 trailing bytes after the 1 records"),
    (raw_record(TINY_BODY)[:10], 1, None, "record 0 has length 16, 9 bytes remain"),
    (bytes((17 << 1,)) + TINY_BODY + b"\x00", 1, None, "record 0 has length 17 but its fields take 16"),
    (raw_record(TINY_BODY[:-4] + b"\x02\xff\x021"), 1, None, "header key that is not UTF-8"),
    (raw_record(b"\x00\x00\x04" + TINY_BODY[3:]), 1, 1, "offsetDelta 2 outside 0..1"),
    (raw_record(b"\x00\x00\x00\x03" + TINY_BODY[4:]), 1, None, "key length -2"),
    (raw_record(b"\x00\x00\x00\x7e" + TINY_BODY[4:]), 1, None, "key length 63"),
    (raw_record(TINY_BODY[:5] + b"\x7e" + TINY_BODY[6:]), 1, None, "value length 63"),
    (raw_record(TINY_BODY[:11] + b"\x01" + TINY_BODY[12:]), 1, None, "headersCount -1"),
    (raw_record(TINY_BODY[:11] + b"\x08" + TINY_BODY[12:]), 1, None, "headersCount 4"),
    (raw_record(TINY_BODY[:12] + b"\x0e" + TINY_BODY[13:]), 1, None, "header key length 7"),
    (raw_record(TINY_BODY[:14] + b"\x03" + TINY_BODY[15:]), 1, None, "header value length -2"),
    (raw_record(b"\x00\x00\x00\x01\x01"), 1, None, "record 0 has length 5"),
    (b"", 1, None, "recordsCount is 1 but the records section holds only 0"),
    (b"\x80", 1, None, "varint truncated"),
])
def test_record_errors(section, count, lod, reason):
    batch = raw_batch(section, count, last_offset_delta=lod)
    with pytest.raises(CorruptBatchError, match=reason) as info:
        decode_batch(batch)
    assert info.value.reason.startswith("batch at position 0: ")


def test_compressed_section_that_does_not_decompress():
    for codec in (GZIP, SNAPPY, LZ4, ZSTD):
        with pytest.raises(CorruptBatchError, match=CODEC_NAMES[codec]):
            decode_batch(raw_batch(b"garbage, not compressed", 1, attributes=codec))


def test_error_type():
    err = CorruptBatchError("why")
    assert isinstance(err, ValueError) and err.reason == "why" and str(err) == "why"
    assert records_module.CorruptBatchError is CorruptBatchError


def test_types():
    batch = decode_batch(GOOD)
    assert isinstance(batch, RecordBatch)
    with pytest.raises(AttributeError):
        batch.records = ()  # frozen
    assert type(batch.records[0].key) is bytes and type(batch.records[0].value) is bytes


@given(st.lists(st.tuples(st.integers(0, 2**41), st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=300),
                          st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3)),
                min_size=1, max_size=20))
def test_batch_of_tails_is_encode_batch(items):
    """The AMQP publish path encodes each record's tail once and assembles batches from tails."""
    records = [Record(i, ts, key, value, tuple(Header(k, v) for k, v in headers))
               for i, (ts, key, value, headers) in enumerate(items)]
    expected = encode_batch(records)
    tails = [record_tail(r.key, r.value, r.headers) for r in records]
    assert batch_of_tails([r.timestamp for r in records], tails) == expected


@pytest.mark.parametrize("size", [0, 124, 125, 300, 70_000])
def test_a_lone_record_batch_is_encode_batch(size):
    """built_batch's one-record path (no join, the tail sent as it is) around the varint length steps."""
    record = Record(0, 1_700_000_000_123, b"k", b"v" * size, (Header("h", b"1"),))
    tail = record_tail(record.key, record.value, record.headers)
    assert batch_of_tails([record.timestamp], [tail]) == encode_batch([record])
