"""wire.compression: each Kafka codec round-trips and reads what real clients send."""

import gzip
import os
import struct

import cramjam
import pytest

from wire.compression import (
    CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress,
)
from wire.errors import CorruptBatchError

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Compressible but not trivial, and larger than one xerial chunk (32 KiB) and one lz4 block (64 KiB).
BIG = b"".join(b"record %d: %s\n" % (i, os.urandom(8).hex().encode()) for i in range(8000))


def test_constants():
    assert (NONE, GZIP, SNAPPY, LZ4, ZSTD) == (0, 1, 2, 3, 4)
    assert CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", b"hello " * 100, BIG], ids=["empty", "one", "small", "big"])
def test_round_trip(codec, data):
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    # Callers hand in memoryview slices of a batch; they must work too.
    assert decompress(codec, memoryview(b"??" + packed)[2:]) == data


def test_compression_shrinks_compressible_data():
    for codec in (GZIP, SNAPPY, LZ4, ZSTD):
        assert len(compress(codec, BIG)) < len(BIG) * 3 // 4, CODEC_NAMES[codec]


# --- snappy: raw blocks and Java's xerial framing --------------------------------------

def _xerial_chunks(stream: bytes) -> list[bytes]:
    assert stream[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", stream[8:16]) == (1, 1)
    chunks, pos = [], 16
    while pos < len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        chunks.append(stream[pos + 4:pos + 4 + size])
        pos += 4 + size
    assert pos == len(stream)
    return chunks


def test_snappy_compress_writes_xerial_framing_in_chunks():
    chunks = _xerial_chunks(compress(SNAPPY, BIG))
    assert len(chunks) == -(-len(BIG) // (32 * 1024))  # 32 KiB per chunk, like the Java client
    assert b"".join(bytes(cramjam.snappy.decompress_raw(c)) for c in chunks) == BIG


def test_snappy_decodes_raw_block():
    # librdkafka / kafka-python may send a bare snappy block without any framing.
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(BIG))) == BIG
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(b"abc"))) == b"abc"


def test_snappy_decodes_hand_built_multi_chunk_xerial_stream():
    pieces = [b"first chunk " * 50, b"", b"second", os.urandom(3000)]
    stream = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for piece in pieces:
        block = bytes(cramjam.snappy.compress_raw(piece))
        stream += struct.pack(">i", len(block)) + block
    assert decompress(SNAPPY, stream) == b"".join(pieces)
    # A header with no chunk at all is an empty payload.
    assert decompress(SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1)) == b""


def test_snappy_decodes_google_framing():
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress(BIG))) == BIG


@pytest.mark.parametrize("stream", [
    XERIAL_MAGIC + b"\x00\x00\x00\x01",                                   # header cut short
    XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",                 # chunk length cut short
    XERIAL_MAGIC + struct.pack(">iii", 1, 1, 100) + b"abc",                # chunk overruns
    XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5) + b"abc",                 # negative chunk length
    XERIAL_MAGIC + struct.pack(">iii", 1, 1, 3) + b"\xff\xff\xff",         # chunk not snappy
])
def test_snappy_bad_xerial_stream(stream):
    with pytest.raises(CorruptBatchError, match="snappy"):
        decompress(SNAPPY, stream)


# --- lz4: the frame format, with blocks the Java client accepts --------------------------

def test_lz4_writes_frame_with_independent_blocks():
    frame = compress(LZ4, BIG)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic 0x184D2204, little-endian
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 1, "frame version 1"
    assert flg & 0x20, "block independence: Java's Lz4BlockInputStream refuses linked blocks"
    assert flg & 0x03 == 0 and bd & 0x8F == 0, "reserved bits"
    assert 4 <= (bd >> 4) & 7 <= 7, "block max size 64 KiB..4 MiB"


def test_lz4_decodes_linked_block_frames_too():
    assert decompress(LZ4, bytes(cramjam.lz4.compress(BIG))) == BIG


# --- gzip and zstd interoperability ------------------------------------------------------

def test_gzip_interoperates_with_stdlib_and_reads_several_members():
    assert gzip.decompress(compress(GZIP, BIG)) == BIG
    assert decompress(GZIP, gzip.compress(b"abc")) == b"abc"
    assert decompress(GZIP, gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


def test_zstd_reads_streamed_frame_without_content_size():
    c = cramjam.zstd.Compressor()
    c.compress(BIG)
    assert decompress(ZSTD, bytes(c.finish())) == BIG


# --- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    with pytest.raises(CorruptBatchError, match=f"codec {codec}"):
        decompress(codec, b"abc")
    with pytest.raises(CorruptBatchError, match=f"codec {codec}"):
        compress(codec, b"abc")


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("junk", [b"", b"\x00", b"not compressed at all, just text", b"\xff" * 64])
def test_bad_data_names_the_codec(codec, junk):
    if codec == SNAPPY and junk == b"\x00":
        assert decompress(codec, junk) == b""  # a valid raw snappy block: length 0
        return
    with pytest.raises(CorruptBatchError) as info:
        decompress(codec, junk)
    assert CODEC_NAMES[codec] in info.value.reason


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_truncated_stream(codec):
    packed = compress(codec, BIG)
    with pytest.raises(CorruptBatchError, match=CODEC_NAMES[codec]):
        decompress(codec, packed[: len(packed) // 2])
