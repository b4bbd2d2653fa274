"""Variable-length integers as Kafka record batches v2 use them.

Byte format (protobuf style): 7 value bits per byte, least significant group first,
the high bit of each byte set when another byte follows. At most 10 bytes (64 bits).
Signed values (``encode_varint``) are zigzag-mapped first, so small negative numbers
stay short: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...
"""

from .errors import CorruptBatchError

__all__ = ["encode_uvarint", "decode_uvarint", "encode_varint", "decode_varint", "MAX_VARINT_BYTES"]

MAX_VARINT_BYTES = 10
_U64 = 1 << 64
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def encode_uvarint(n: int) -> bytes:
    """Unsigned varint of ``0 <= n < 2**64``."""
    if not 0 <= n < _U64:
        raise ValueError(f"unsigned varint out of range: {n}")
    if n < 0x80:  # the common case: one byte
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag signed varint of a 64-bit ``n`` (Kafka's varint and varlong share this encoding)."""
    if 0 <= n < _SMALL_LIMIT:  # lengths and deltas: served from a table, the record encoder's hot path
        return _SMALL[n]
    if not _I64_MIN <= n <= _I64_MAX:
        raise ValueError(f"signed varint out of 64-bit range: {n}")
    return encode_uvarint((n << 1) if n >= 0 else ((-n) << 1) - 1)


_SMALL_LIMIT = 8192  # zigzag values below 16384: at most two bytes
_SMALL = [encode_uvarint(n << 1) for n in range(_SMALL_LIMIT)]


def decode_uvarint(buf, pos: int) -> tuple[int, int]:
    """Read an unsigned varint at ``buf[pos]``; return ``(value, position after it)``.

    Truncated input, more than 10 bytes, or a value of 2**64 or more -> CorruptBatchError.
    """
    end = len(buf)
    if pos >= end:
        raise CorruptBatchError(f"varint truncated at byte {pos}")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    p = pos + 1
    while True:
        if p >= end:
            raise CorruptBatchError(f"varint truncated at byte {p}")
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise CorruptBatchError(f"varint at byte {pos} is longer than {MAX_VARINT_BYTES} bytes")
    if value >= _U64:
        raise CorruptBatchError(f"varint at byte {pos} overflows 64 bits")
    return value, p


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Read a zigzag signed varint at ``buf[pos]``; return ``(value, position after it)``."""
    u, p = decode_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), p
