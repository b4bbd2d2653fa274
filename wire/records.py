"""Kafka record batch v2 ("magic 2"): validate, stamp, decode and encode.

Batch layout, big-endian, 61-byte header then the records::

    offset  size  field
         0     8  baseOffset            int64
         8     4  batchLength           int32  bytes after this field (size - 12)
        12     4  partitionLeaderEpoch  int32
        16     1  magic                 int8   = 2
        17     4  crc                   uint32 CRC-32C of bytes 21..end
        21     2  attributes            int16  bits 0-2 compression, 3 timestampType
                                               (1 = LogAppendTime), 4 isTransactional,
                                               5 isControl, 6 hasDeleteHorizonMs
        23     4  lastOffsetDelta       int32
        27     8  baseTimestamp         int64
        35     8  maxTimestamp          int64
        43     8  producerId            int64
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61     -  records               compressed as a whole when compression != 0

A record (every varint zigzag-signed, see ``wire.varint``)::

    length varint (bytes after it) | attributes int8 | timestampDelta varlong |
    offsetDelta varint | keyLength varint (-1 = null) | key | valueLength varint (-1 = null) |
    value | headersCount varint | headers: keyLength varint, key (utf-8),
    valueLength varint (-1 = null), value

baseOffset and partitionLeaderEpoch lie outside the CRC, so the broker stamps them in place
on produce without touching the CRC or decoding any record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from .compression import CODEC_NAMES, NONE, compress, decompress
from .errors import CorruptBatchError
from .varint import decode_varint, encode_varint

__all__ = [
    "BATCH_HEADER_SIZE", "LOG_OVERHEAD", "MAGIC", "CorruptBatchError",
    "BatchHeader", "Header", "Record", "RecordBatch",
    "read_batch_header", "validate_batch", "iter_batches", "set_offsets_in_place",
    "decode_batch", "encode_batch", "simple_batch", "control_record", "parse_control_record",
]

Buffer = bytes | bytearray | memoryview

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the whole 61-byte header
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc (21 bytes, outside the CRC)
_CRC_COVERED = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (40 bytes)
_CRC_START = 21
_MAGIC_POS = 16
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
_BEFORE_COVERED = _CRC_START - LOG_OVERHEAD  # leader epoch, magic, CRC: counted by batchLength, not CRC-covered
_MIN_RECORD_BODY = 6  # attributes + five one-byte varints (ts, offset, key, value, headers)
_INT32_MAX = (1 << 31) - 1

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
_NULL = encode_varint(-1)


class _BatchFlags:
    """Convenience properties shared by BatchHeader and RecordBatch (both have ``attributes``)."""

    __slots__ = ()

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & _TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


@dataclass(slots=True, unsafe_hash=True)  # not frozen, as Record below: one is read per batch
class BatchHeader(_BatchFlags):
    """The 61 header bytes of a batch, as read (field order = byte order)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


# Not frozen, but hashable and never changed: a frozen one's __init__ (object.__setattr__ per field)
@dataclass(slots=True, unsafe_hash=True)  # cost twice as much, once per record read or received
class Record:
    offset: int  # absolute: base_offset + offsetDelta
    timestamp: int  # absolute ms (the batch's maxTimestamp under LogAppendTime, as Kafka reads it)
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class RecordBatch(_BatchFlags):
    """A decoded ("inflated") batch."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[Record, ...]


# --- header-level checks (the produce hot path: no per-record work) -------------------

def read_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61 header bytes at ``buf[pos]`` (no CRC check, the records may be absent)."""
    avail = len(buf) - pos
    if avail <= _MAGIC_POS:
        raise CorruptBatchError(f"batch header at position {pos} truncated: {max(avail, 0)} of 61 bytes")
    magic = buf[pos + _MAGIC_POS]
    if magic != MAGIC:
        # Checked before the length so a short legacy message set (magic 0/1) is named as such.
        raise CorruptBatchError(f"batch at position {pos} has magic {magic}; only record batch v2 (magic 2) is supported")
    if avail < BATCH_HEADER_SIZE:
        raise CorruptBatchError(f"batch header at position {pos} truncated: {avail} of 61 bytes")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"batch at position {pos} has batchLength {header.batch_length}, less than the header's 49")
    return header


def _check_batch(buf: Buffer, pos: int) -> BatchHeader:
    """Header + everything but the CRC: the whole batch present, counts and codec sane."""
    header = read_batch_header(buf, pos)
    if pos + header.size > len(buf):
        raise CorruptBatchError(
            f"batch at position {pos} truncated: {header.size} bytes declared, {len(buf) - pos} present")
    count, last_delta = header.records_count, header.last_offset_delta
    if count < 0:
        raise CorruptBatchError(f"batch at position {pos} has negative recordsCount {count}")
    # The broker assigns last_offset_delta + 1 offsets to a batch; fewer than its records
    # would make offsets collide.
    if last_delta < 0 or last_delta < count - 1:
        raise CorruptBatchError(
            f"batch at position {pos} has lastOffsetDelta {last_delta} for {count} records")
    if header.attributes & _COMPRESSION_MASK not in CODEC_NAMES:
        raise CorruptBatchError(
            f"batch at position {pos} uses unknown compression codec {header.attributes & _COMPRESSION_MASK}")
    return header


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check the batch at ``buf[pos]``: header, length, counts, codec and CRC-32C; return its header."""
    header = _check_batch(buf, pos)
    covered = memoryview(buf)[pos + _CRC_START:pos + header.size]  # no copy on the hot path
    try:
        crc = crc32c(covered)
    finally:
        covered.release()
    if crc != header.crc:
        raise CorruptBatchError(
            f"batch at position {pos}: CRC-32C mismatch (stored 0x{header.crc:08x}, computed 0x{crc:08x})")
    return header


def iter_batches(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, validated header)`` for each batch of a concatenation of batches.

    Trailing bytes that are not a whole valid batch raise CorruptBatchError.
    """
    pos, end = 0, len(buf)
    while pos < end:
        header = validate_batch(buf, pos)
        yield pos, header
        pos += header.size


def set_offsets_in_place(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Stamp baseOffset and partitionLeaderEpoch (both outside the CRC) of the batch at ``pos``."""
    struct.pack_into(">q", buf, pos, base_offset)
    struct.pack_into(">i", buf, pos + 12, leader_epoch)


# --- decoding ---------------------------------------------------------------------------

def decode_batch(buf: Buffer, pos: int = 0, *, verify_crc: bool = True) -> RecordBatch:
    """Validate, decompress and parse every record of the batch at ``buf[pos]``."""
    header = validate_batch(buf, pos) if verify_crc else _check_batch(buf, pos)
    codec = header.compression
    # Release the view at once: a live export would stop the caller from resizing a bytearray.
    body = memoryview(buf)[pos + BATCH_HEADER_SIZE:pos + header.size]
    try:
        data = bytes(body) if codec == NONE else decompress(codec, body)
    finally:
        body.release()
    log_append_time = header.max_timestamp if header.timestamp_type else None
    try:
        records = _parse_records(data, header, log_append_time)
    except CorruptBatchError as exc:
        raise CorruptBatchError(f"batch at position {pos}: {exc.reason}") from None
    return RecordBatch(
        header.base_offset, header.partition_leader_epoch, header.attributes, header.last_offset_delta,
        header.base_timestamp, header.max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, records,
    )


def _parse_records(data: bytes, header: BatchHeader, log_append_time: int | None) -> tuple[Record, ...]:
    """Parse exactly ``header.records_count`` records filling ``data`` (decompressed) exactly."""
    if type(data) is not bytes:  # slices of it key a cache
        data = bytes(data)
    varint = decode_varint
    count, n = header.records_count, len(data)
    base_offset, base_ts, last_delta = header.base_offset, header.base_timestamp, header.last_offset_delta
    out = []
    p = 0
    for i in range(count):
        if p >= n:
            raise CorruptBatchError(f"recordsCount is {count} but the records section holds only {i}")
        if p < n and (b := data[p]) < 0x80:  # one byte: most lengths and deltas, decoded inline
            length, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < n and data[p + 1] < 0x80:  # two bytes: a record of 64 B to 8 KiB
            u = (b & 0x7F) | (data[p + 1] << 7)
            length, p = (u >> 1) ^ -(u & 1), p + 2
        else:
            length, p = varint(data, p)
        if length < _MIN_RECORD_BODY or length > n - p:
            raise CorruptBatchError(f"record {i} has length {length}, {n - p} bytes remain")
        end = p + length
        attributes = data[p]
        p += 1
        if p < n and (b := data[p]) < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            ts_delta, p = varint(data, p)
        if p < n and (b := data[p]) < 0x80:
            offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            offset_delta, p = varint(data, p)
        if not 0 <= offset_delta <= last_delta:
            raise CorruptBatchError(f"record {i} has offsetDelta {offset_delta} outside 0..{last_delta}")
        if p < n and (b := data[p]) < 0x80:
            size, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            size, p = varint(data, p)
        if size == -1:
            key = None
        elif 0 <= size <= end - p:
            key, p = data[p:p + size], p + size
        else:
            raise CorruptBatchError(f"record {i} has key length {size}, {end - p} bytes remain in it")
        if p < n and (b := data[p]) < 0x80:
            size, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            size, p = varint(data, p)
        if size == -1:
            value = None
        elif 0 <= size <= end - p:
            value, p = data[p:p + size], p + size
        else:
            raise CorruptBatchError(f"record {i} has value length {size}, {end - p} bytes remain in it")
        section = data[p:end]  # the headers, count included, if the record is well formed
        headers = _HEADER_SECTIONS.get(section)
        if headers is not None:
            p = end
        else:
            hcount, p = varint(data, p)
            if hcount == 0:
                headers = ()
            elif 0 < hcount <= (end - p) // 2:  # a header takes at least 2 bytes
                headers, p = _parse_headers(data, p, end, hcount, i)
                if p == end:
                    if len(_HEADER_SECTIONS) >= _HEADER_SECTIONS_MAX:
                        _HEADER_SECTIONS.clear()
                    _HEADER_SECTIONS[section] = headers
            else:
                raise CorruptBatchError(f"record {i} has headersCount {hcount}, {end - p} bytes remain in it")
        if p != end:
            raise CorruptBatchError(f"record {i} has length {length} but its fields take {p - end + length}")
        timestamp = base_ts + ts_delta if log_append_time is None else log_append_time
        out.append(Record(base_offset + offset_delta, timestamp, key, value, headers, attributes))
    if p != n:
        raise CorruptBatchError(f"{n - p} trailing bytes after the {count} records")
    return tuple(out)


# Records of one producer (an AMQP publisher above all) repeat the same headers: a section seen
# before is parsed once, and its records then share one headers tuple (which lets
# routing.mapping cache what it derives from it). Bounded; the tuples are immutable.
_HEADER_SECTIONS: dict[bytes, tuple[Header, ...]] = {}
_HEADER_SECTIONS_MAX = 1024


def _parse_headers(data: bytes, p: int, end: int, count: int, index: int) -> tuple[tuple[Header, ...], int]:
    varint = decode_varint
    headers = []
    for _ in range(count):
        size, p = varint(data, p)
        if not 0 <= size <= end - p:
            raise CorruptBatchError(f"record {index} has a header key length {size}, {end - p} bytes remain in it")
        try:
            key = data[p:p + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptBatchError(f"record {index} has a header key that is not UTF-8: {exc.reason}") from None
        size, p = varint(data, p + size)
        if size == -1:
            value = None
        elif 0 <= size <= end - p:
            value, p = data[p:p + size], p + size
        else:
            raise CorruptBatchError(f"record {index} has a header value length {size}, {end - p} bytes remain in it")
        headers.append(Header(key, value))
    return tuple(headers), p


# --- encoding ---------------------------------------------------------------------------

def _record_bytes(offset_delta: int, ts_delta: int, key, value, headers, attributes: int = 0) -> bytes:
    """One record, its length prefix included."""
    ev = encode_varint
    body = b"".join((bytes((attributes,)), ev(ts_delta), ev(offset_delta), record_tail(key, value, headers)))
    return ev(len(body)) + body


def record_tail(key: bytes | None, value: bytes | None, headers=(), encoded_headers: bytes | None = None) -> bytes:
    """The end of a record's encoding that does not depend on its place in a batch: key, value, headers.

    Encoded once, it can go into many batches (:func:`batch_of_tails`): an AMQP message routed
    to ten queues is encoded once, not ten times. ``encoded_headers`` is
    :func:`encode_headers` of ``headers``, when the caller has it already."""
    ev = encode_varint
    parts = []
    add = parts.append
    if key is None:
        add(_NULL)
    else:
        add(ev(len(key)))
        add(key)
    if value is None:
        add(_NULL)
    else:
        add(ev(len(value)))
        add(value)
    add(encode_headers(headers) if encoded_headers is None else encoded_headers)
    return b"".join(parts)


def encode_headers(headers) -> bytes:
    """A record's header count and headers, as they end its encoding."""
    ev = encode_varint
    parts = [ev(len(headers))]
    add = parts.append
    for header in headers:
        hkey, hvalue = (header.key, header.value) if isinstance(header, Header) else header
        raw = hkey.encode("utf-8")
        add(ev(len(raw)))
        add(raw)
        if hvalue is None:
            add(_NULL)
        else:
            add(ev(len(hvalue)))
            add(hvalue)
    return b"".join(parts)


def batch_of_tails(timestamps: Sequence[int], tails: Sequence[bytes]) -> bytes:
    """A batch at offsets 0..n-1 (CreateTime, no producer id) of records given by their
    timestamps and :func:`record_tail` encodings; the same bytes :func:`encode_batch` makes."""
    buffers, length, crc = built_batch(timestamps, tails)
    stamp_built(buffers, length, crc, 0, -1)
    return b"".join(buffers)


_NO_DELTAS = b"\x00\x00\x00"  # a lone record's attributes, timestamp delta and offset delta


def built_batch(timestamps: Sequence[int], tails: Sequence[bytes]) -> tuple[list, int, int]:
    """:func:`batch_of_tails` as the log writes it: (buffers, length, crc), where ``buffers[0]``
    is left free for the 21 bytes before the CRC-covered part (base offset, batch length, leader
    epoch, magic, CRC) that the log stamps at append time, the rest of ``buffers`` (``length``
    bytes) is that part, and ``crc`` its CRC-32C. Nothing is joined: with messages spread over
    thousands of queues most batches hold one record, and the log sends its tail as it is."""
    count = len(tails)
    if not count or len(timestamps) != count:
        raise ValueError(f"{len(timestamps)} timestamps for {count} records")
    ev = encode_varint
    base_ts = timestamps[0]
    if count == 1:
        tail = tails[0]
        head = ev(3 + len(tail)) + _NO_DELTAS
        max_ts = base_ts
        buffers = [None, None, head, tail]
        length = len(head) + len(tail)
    else:
        parts = []
        add = parts.append
        for i, tail in enumerate(tails):
            head = b"\x00" + ev(timestamps[i] - base_ts) + ev(i)
            add(ev(len(head) + len(tail)))
            add(head)
            add(tail)
        records = b"".join(parts)
        max_ts = max(timestamps)
        buffers = [None, None, records]
        length = len(records)
    try:
        covered = _CRC_COVERED.pack(0, count - 1, base_ts, max_ts, -1, -1, -1, count)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    buffers[1] = covered
    crc = crc32c(covered)
    for part in buffers[2:]:
        crc = crc32c(part, crc)
    return buffers, _CRC_COVERED.size + length, crc


def stamp_built(buffers: list, length: int, crc: int, base_offset: int, leader_epoch: int) -> int:
    """Put the 21 bytes before the CRC-covered part into ``buffers[0]`` of a :func:`built_batch`;
    returns the whole batch's size."""
    buffers[0] = _PREFIX.pack(base_offset, _BEFORE_COVERED + length, leader_epoch, MAGIC, crc)
    return _CRC_START + length


def _assemble(records: bytes, count: int, *, base_offset: int, attributes: int, last_offset_delta: int,
              base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
              base_sequence: int, partition_leader_epoch: int) -> bytes:
    """Header + (already compressed) records section, CRC computed."""
    try:
        covered = _CRC_COVERED.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                    producer_id, producer_epoch, base_sequence, count)
        crc = crc32c(records, crc32c(covered))
        prefix = _PREFIX.pack(base_offset, _MIN_BATCH_LENGTH + len(records), partition_leader_epoch, MAGIC, crc)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    return b"".join((prefix, covered, records))


def encode_batch(
    records: Sequence[Record] | Sequence[tuple],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    last_offset_delta: int | None = None,
) -> bytes:
    """Build a valid batch from records with absolute offsets and timestamps.

    Tuples are taken as Record fields in order: ``(offset, timestamp, key, value[, headers[,
    attributes]])``. baseTimestamp is the first record's timestamp (later deltas may be negative),
    maxTimestamp the largest. ``last_offset_delta`` defaults to the largest offset delta; pass it
    to keep a batch's original offset range when records were removed (compaction), which also
    allows an empty batch. Bad arguments raise ValueError.
    """
    recs = [r if isinstance(r, Record) else Record(*r) for r in records]
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    if compression not in CODEC_NAMES:
        raise ValueError(f"unknown compression codec {compression}")
    if recs:
        base_ts = recs[0].timestamp
        max_ts = max(r.timestamp for r in recs)
    elif last_offset_delta is None:
        raise ValueError("an empty batch needs an explicit last_offset_delta")
    else:
        base_ts = max_ts = -1  # Kafka's NO_TIMESTAMP
    parts, max_delta = [], -1
    for r in recs:
        delta = r.offset - base_offset
        if not 0 <= delta <= _INT32_MAX:
            raise ValueError(f"record offset {r.offset} is not within base_offset {base_offset} + 0..2**31-1")
        max_delta = max(max_delta, delta)
        parts.append(_record_bytes(delta, r.timestamp - base_ts, r.key, r.value, r.headers, r.attributes))
    if last_offset_delta is None:
        last_offset_delta = max_delta
    elif not max(max_delta, 0) <= last_offset_delta <= _INT32_MAX:
        raise ValueError(f"last_offset_delta {last_offset_delta} is below the largest offset delta {max_delta}")
    body = b"".join(parts)
    if compression:
        body = compress(compression, body)
    attributes = (compression | (timestamp_type << 3)
                  | (_TRANSACTIONAL_BIT if is_transactional else 0) | (_CONTROL_BIT if is_control else 0))
    return _assemble(
        body, len(recs), base_offset=base_offset, attributes=attributes, last_offset_delta=last_offset_delta,
        base_timestamp=base_ts, max_timestamp=max_ts, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, partition_leader_epoch=partition_leader_epoch,
    )


def simple_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int = 0,
    compression: int = 0,
    headers: Sequence[Header | tuple[str, bytes | None]] = (),
) -> bytes:
    """A batch of ``len(values)`` records at offsets 0..n-1, one timestamp, the same headers on each."""
    if not values:
        raise ValueError("simple_batch needs at least one value")
    if keys is not None and len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys for {len(values)} values")
    if compression not in CODEC_NAMES:
        raise ValueError(f"unknown compression codec {compression}")
    headers = tuple(headers)
    keys = keys if keys is not None else [None] * len(values)
    body = b"".join([_record_bytes(i, 0, k, v, headers) for i, (k, v) in enumerate(zip(keys, values))])
    if compression:
        body = compress(compression, body)
    return _assemble(
        body, len(values), base_offset=0, attributes=compression, last_offset_delta=len(values) - 1,
        base_timestamp=timestamp_ms, max_timestamp=timestamp_ms, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, partition_leader_epoch=-1,
    )


# --- control records (transaction markers) ----------------------------------------------

def control_record(commit: bool, coordinator_epoch: int = 0, timestamp: int = 0, offset: int = 0) -> Record:
    """A transaction marker: key = version int16 (0) + type int16 (0 abort, 1 commit),
    value = version int16 (0) + coordinatorEpoch int32. Put it in a batch with ``is_control=True``."""
    return Record(
        offset, timestamp,
        _CONTROL_KEY.pack(0, 1 if commit else 0),
        _CONTROL_VALUE.pack(0, coordinator_epoch),
    )


def parse_control_record(record: Record) -> tuple[bool, int]:
    """``(is_commit, coordinator_epoch)`` of a transaction marker; anything else -> CorruptBatchError."""
    key, value = record.key, record.value
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptBatchError(f"control record at offset {record.offset} has a key shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptBatchError(f"control record at offset {record.offset} has key version {version}")
    if kind not in (0, 1):
        raise CorruptBatchError(f"control record at offset {record.offset} has type {kind}, not a transaction marker")
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise CorruptBatchError(f"transaction marker at offset {record.offset} has a value shorter than 6 bytes")
    version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptBatchError(f"transaction marker at offset {record.offset} has value version {version}")
    return kind == 1, coordinator_epoch
