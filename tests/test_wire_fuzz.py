"""Property tests: encode/decode round trips, and no exception but CorruptBatchError on bad bytes."""

import struct

import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.compression import CODEC_NAMES, compress, decompress
from wire.errors import CorruptBatchError
from wire.records import (
    Header, Record, decode_batch, encode_batch, iter_batches, read_batch_header,
    set_offsets_in_place, validate_batch,
)
from wire.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

codecs = st.sampled_from(sorted(CODEC_NAMES))
maybe_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.builds(Header, st.text(max_size=8), maybe_bytes), max_size=3).map(tuple)
timestamps = st.integers(-(2**61), 2**61) | st.integers(0, 2**41)  # wide and realistic


@st.composite
def record_lists(draw, min_size=1, max_size=12):
    """Records with increasing (possibly gapped) absolute offsets from a base offset."""
    base = draw(st.integers(0, 2**40))
    offset, out = base, []
    for _ in range(draw(st.integers(min_size, max_size))):
        out.append(Record(offset, draw(timestamps), draw(maybe_bytes), draw(maybe_bytes),
                          draw(headers), draw(st.integers(0, 255))))
        offset += draw(st.integers(1, 3))
    return base, out


@st.composite
def batches(draw):
    base, recs = draw(record_lists())
    return encode_batch(recs, base_offset=base, compression=draw(codecs),
                        is_transactional=draw(st.booleans()), producer_id=draw(st.integers(-1, 2**40)))


def reseal(buf: bytearray) -> bytearray:
    """Recompute the CRC of a (possibly damaged) batch so the parser behind it gets exercised."""
    if len(buf) >= 21:
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


def only_corrupt(fn, *args, **kwargs):
    """Run ``fn``; CorruptBatchError is fine, any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except CorruptBatchError as exc:
        assert exc.reason and str(exc) == exc.reason
        return None


def every_reader(buf):
    only_corrupt(read_batch_header, buf)
    only_corrupt(validate_batch, buf)
    only_corrupt(lambda: list(iter_batches(buf)))
    only_corrupt(decode_batch, buf)
    only_corrupt(decode_batch, buf, verify_crc=False)


# --- round trips -------------------------------------------------------------------------

@FAST
@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n):
    enc = encode_varint(n)
    assert len(enc) <= 10 and decode_varint(enc + b"\x00", 0) == (n, len(enc))


@FAST
@given(st.integers(0, 2**64 - 1))
def test_uvarint_round_trip(n):
    enc = encode_uvarint(n)
    assert decode_uvarint(b"\x80\x01" + enc, 2) == (n, 2 + len(enc))


@SLOW
@given(record_lists(), codecs, st.sampled_from([0, 1]), st.booleans(), st.booleans(),
       st.integers(0, 5), st.integers(-1, 2**31 - 1))
def test_batch_round_trip(base_recs, codec, ts_type, txn, control, extra_delta, leader_epoch):
    base, recs = base_recs
    lod = recs[-1].offset - base + extra_delta
    batch = encode_batch(recs, base_offset=base, compression=codec, timestamp_type=ts_type,
                         is_transactional=txn, is_control=control, last_offset_delta=lod,
                         partition_leader_epoch=leader_epoch, producer_id=5, producer_epoch=2,
                         base_sequence=17)
    header = validate_batch(batch)
    assert header.size == len(batch) and header.records_count == len(recs)
    assert (header.compression, header.timestamp_type, header.is_transactional, header.is_control) == (
        codec, ts_type, txn, control)
    assert header.last_offset == recs[-1].offset + extra_delta
    assert header.max_timestamp == max(r.timestamp for r in recs)

    decoded = decode_batch(batch)
    if ts_type == 1:  # LogAppendTime: every record reads the batch's maxTimestamp
        recs = [Record(r.offset, header.max_timestamp, r.key, r.value, r.headers, r.attributes) for r in recs]
    assert decoded.records == tuple(recs)
    assert (decoded.base_offset, decoded.partition_leader_epoch, decoded.last_offset_delta) == (
        base, leader_epoch, lod)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (5, 2, 17)


@SLOW
@given(st.lists(batches(), min_size=1, max_size=4), st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_iter_and_stamp_concatenated_batches(parts, offset, epoch):
    buf = bytearray(b"".join(parts))
    found = list(iter_batches(buf))
    assert [h.size for _, h in found] == [len(p) for p in parts]
    for (pos, header), part in zip(found, parts):
        deltas = [r.offset - header.base_offset for r in decode_batch(part).records]
        set_offsets_in_place(buf, pos, offset, epoch)
        stamped = validate_batch(buf, pos)  # CRC still valid
        assert (stamped.base_offset, stamped.partition_leader_epoch) == (offset, epoch)
        assert [r.offset for r in decode_batch(buf, pos).records] == [offset + d for d in deltas]
        offset += header.last_offset_delta + 1


@SLOW
@given(codecs, st.binary(max_size=3000))
def test_compression_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


# --- hostile bytes: only CorruptBatchError may come out ---------------------------------

@FAST
@given(st.binary(max_size=40), st.integers(0, 45))
def test_varint_random_bytes(buf, pos):
    for fn in (decode_varint, decode_uvarint):
        got = only_corrupt(fn, buf, pos)
        if got is not None:
            assert pos < got[1] <= min(len(buf), pos + 10)


@FAST
@given(st.binary(max_size=200))
def test_random_bytes(buf):
    every_reader(buf)


@FAST
@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 300), st.integers(0, 127),
       st.integers(-5, 5), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=120))
def test_random_body_behind_plausible_header(base, extra_len, attributes, count, lod, body):
    """A magic-2 header with random counts, codec and length around random records bytes."""
    length = 49 + len(body) + (extra_len if extra_len > 250 else 0)
    header = struct.pack(">qiibIhiqqqhii", base, length, 0, 2, 0, attributes, lod, 0, 0, -1, -1, -1, count)
    every_reader(reseal(bytearray(header + body)))


@FAST
@given(batches(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4))
def test_byte_flips(batch, flips):
    buf = bytearray(batch)
    for where, mask in flips:
        buf[where % len(buf)] ^= mask
    every_reader(buf)
    every_reader(reseal(buf))


@FAST
@given(batches(), st.integers(0, 10**6), st.binary(max_size=8))
def test_truncation_and_trailing_bytes(batch, cut, tail):
    cut %= len(batch)
    every_reader(batch[:cut])
    every_reader(reseal(bytearray(batch[:cut])))
    every_reader(batch + tail)
    # A shortened records section with the lengths and CRC patched to match.
    if cut > 61:
        buf = bytearray(batch[:cut])
        struct.pack_into(">i", buf, 8, cut - 12)
        every_reader(reseal(buf))


@FAST
@given(codecs | st.integers(5, 7), st.binary(max_size=200))
def test_decompress_random_bytes(codec, data):
    only_corrupt(decompress, codec, data)
    only_corrupt(decompress, codec, b"\x82SNAPPY\x00" + data)  # xerial magic, random rest


@FAST
@given(codecs, st.binary(min_size=1, max_size=500),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=3))
def test_decompress_damaged_streams(codec, data, flips):
    packed = bytearray(compress(codec, data))
    for where, mask in flips:
        packed[where % len(packed)] ^= mask
    only_corrupt(decompress, codec, bytes(packed))
    only_corrupt(decompress, codec, bytes(packed[: len(packed) // 2]))
