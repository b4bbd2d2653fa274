"""Compression codecs of Kafka record batches (attributes bits 0-2).

What each codec's bytes look like inside a batch (the records section, compressed as a whole):

- gzip (1): a gzip stream (RFC 1952); several concatenated members are accepted.
- snappy (2): either a raw snappy block (librdkafka and kafka-python may send one), or
  Java's xerial framing: ``b"\\x82SNAPPY\\x00"``, int32 version, int32 compatible version,
  then chunks of ``[int32 big-endian length][raw snappy block]``. We write xerial framing,
  which is what the Java client sends and what every client decodes.
- lz4 (3): the standard LZ4 *frame* format (magic 0x184D2204), independent blocks.
- zstd (4): a zstd frame.

Every failure to decode, and the unknown codecs 5..7, raise CorruptBatchError naming the codec.
"""

import struct

import cramjam

from .errors import CorruptBatchError

__all__ = ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODEC_NAMES", "compress", "decompress"]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with 1
_XERIAL_CHUNK = 32 * 1024  # the xerial (Java) default block size
# Google's snappy *framing* format (what cramjam.snappy.compress writes). No Kafka client
# sends it, but accepting it costs nothing and makes cramjam's default output decodable.
_SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"
_INT32 = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_CHUNK):
        block = cramjam.snappy.compress_raw(view[start:start + _XERIAL_CHUNK])
        out.append(_INT32.pack(len(block)))
        out.append(bytes(block))
    return b"".join(out)


def _snappy_decompress(data) -> bytes:
    view = memoryview(data)
    if view[:8] == XERIAL_MAGIC:
        if len(view) < 16:
            raise CorruptBatchError("snappy: xerial header truncated")
        out, pos, end = [], 16, len(view)
        while pos < end:
            if end - pos < 4:
                raise CorruptBatchError(f"snappy: xerial chunk length truncated at byte {pos}")
            (size,) = _INT32.unpack_from(view, pos)
            pos += 4
            if size < 0 or size > end - pos:
                raise CorruptBatchError(f"snappy: xerial chunk of {size} bytes at byte {pos} overruns the data")
            out.append(bytes(cramjam.snappy.decompress_raw(view[pos:pos + size])))
            pos += size
        return b"".join(out)
    if view[:10] == _SNAPPY_FRAMED_MAGIC:
        return bytes(cramjam.snappy.decompress(view))
    return bytes(cramjam.snappy.decompress_raw(view))


def _lz4_compress(data: bytes) -> bytes:
    # cramjam.lz4.compress writes *linked* blocks, which the Java client refuses
    # ("Dependent block stream is unsupported"); Kafka needs independent blocks.
    c = cramjam.lz4.Compressor(block_linked=False)
    c.compress(data)
    return bytes(c.finish())


_COMPRESS = {
    NONE: bytes,
    GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}
_DECOMPRESS = {
    NONE: bytes,
    GZIP: lambda d: bytes(cramjam.gzip.decompress(d)),
    SNAPPY: _snappy_decompress,
    LZ4: lambda d: bytes(cramjam.lz4.decompress(d)),
    ZSTD: lambda d: bytes(cramjam.zstd.decompress(d)),
}


def _codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with Kafka compression type ``codec`` (0 returns the bytes as they are)."""
    fn = _COMPRESS.get(codec)
    if fn is None:
        raise CorruptBatchError(f"compression: {_codec_name(codec)} is not supported")
    return fn(data)


def decompress(codec: int, data) -> bytes:
    """Decompress ``data`` (bytes-like) of Kafka compression type ``codec``.

    Raises CorruptBatchError, with a reason naming the codec, for bad data or unknown codecs.
    """
    fn = _DECOMPRESS.get(codec)
    if fn is None:
        raise CorruptBatchError(f"compression: {_codec_name(codec)} is not supported")
    try:
        return fn(data)
    except CorruptBatchError:
        raise
    except Exception as exc:  # cramjam raises DecompressionError, but be safe across versions
        raise CorruptBatchError(f"{CODEC_NAMES[codec]}: cannot decompress: {exc}") from exc
