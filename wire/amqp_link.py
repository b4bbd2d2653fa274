"""The AMQP consumer link between brokers of a spread cluster: the bytes of its requests and answers.

A consumer connected to broker B of a queue led by broker L is served over one link session
from B to L (gateway.cluster.amqp_links), as a RabbitMQ channel talks to a queue process on
another node. B sends *operations* (open a link for a consumer, grant credit, settle, get, drain,
close) and *polls*; L answers polls with *events* (deliveries, get-empty, drained, closed). The
requests and answers travel in the AmqpLink private API (wire.kafka_private), whose one ``bytes``
field holds what this module writes: hand-made with ``struct``, since every delivery between
brokers passes through it and a generic schema reader costs several times more per record.

Layout (big-endian). An operation starts with its kind (u8) and link id (u32):

* OPEN: flags (u8: 1 no-ack, 2 exclusive, 4 frames), priority (i32), credit limit (i64), vhost,
  queue (u16-length UTF-8 each); with the frames flag then the consumer's channel (u16), its
  connection's frame-max (u32) and its consumer tag (u16-length UTF-8): an AMQP 0-9-1 consumer,
  whose deliveries the leader may send as the frames it gets (DELIVER_FRAMES);
* CREDIT: limit (i64): the link may have been sent that many deliveries in all since it opened;
* SETTLE: how (u8, :data:`ACK` ... :data:`REQUEUE_FAILED`), count (u32), then that many (first, last)
  offset ranges (i64, i64);
* GET: no-ack (u8); DRAIN, CLOSE: nothing more.

An event starts with its kind (u8) and link id (u32):

* DELIVER: offset (i64), delivery count (i32: 1 the first time), redelivered (u8), timestamp
  (i64), attributes (u8), then key, value (i32 length, -1 for null, bytes) and the record's
  encoded headers (i32 length, bytes: wire.records.encode_headers);
* DELIVER_FRAMES: offset (i64), delivery count (i32), redelivered (u8), then the basic.deliver,
  content header and body frames (i32 length, bytes) as the consumer gets them, but for the
  delivery tag (zero), which the consumer's broker fills in: the leader encodes a delivery of a
  classic queue once, and the consumer's broker does not read the record back;
* EMPTY (a get found nothing), DRAINED: nothing more; CLOSED: reason (u16-length UTF-8).
"""
from __future__ import annotations

import struct

from wire.errors import CorruptBatchError
from wire.records import Record, _parse_headers, encode_headers
from wire.varint import decode_varint

OPEN, CREDIT, SETTLE, GET, DRAIN, CLOSE = 1, 2, 3, 4, 5, 6
DELIVER, EMPTY, DRAINED, CLOSED, DELIVER_FRAMES = 1, 2, 3, 4, 5
# REQUEUE_FAILED: basic.reject's requeue (a quorum queue's delayed retry tells it from a nack's);
# RELEASE: back without counting a delivery (AMQP 1.0 ``released``)
ACK, REQUEUE, REJECT, RELEASE, REQUEUE_FAILED = 1, 2, 3, 4, 5
NO_ACK, EXCLUSIVE, FRAMES = 1, 2, 4

_KIND_LINK = struct.Struct(">BI")
_OPEN = struct.Struct(">BIBiq")
_CREDIT = struct.Struct(">BIq")
_SETTLE = struct.Struct(">BIBI")
_RANGE = struct.Struct(">qq")
_GET = struct.Struct(">BIB")
_DELIVER = struct.Struct(">BIqiBqBi")  # ... key length; the value and headers lengths follow their bytes
_DELIVER_FRAMES = struct.Struct(">BIqiBi")
_FRAMES_OPEN = struct.Struct(">HI")
_LEN = struct.Struct(">i")
_U16 = struct.Struct(">H")


class LinkCodecError(ValueError):
    """Bytes that are not a well-formed operation or event list."""


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U16.pack(len(raw)) + raw


def _read_text(buf, pos: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(buf, pos)
    pos += 2
    if pos + n > len(buf):
        raise LinkCodecError("a name runs past the end")
    return bytes(buf[pos:pos + n]).decode("utf-8"), pos + n


# --- operations (B to L) -------------------------------------------------------------------
def op_open(link: int, vhost: str, queue: str, no_ack: bool, exclusive: bool, priority: int, limit: int,
            frames: tuple[int, int, str] | None = None) -> bytes:
    """``frames``: (channel, frame-max, consumer tag) of an AMQP 0-9-1 consumer (see DELIVER_FRAMES)."""
    flags = (NO_ACK if no_ack else 0) | (EXCLUSIVE if exclusive else 0) | (FRAMES if frames else 0)
    out = _OPEN.pack(OPEN, link, flags, priority, limit) + _text(vhost) + _text(queue)
    if frames:
        out += _FRAMES_OPEN.pack(frames[0], frames[1]) + _text(frames[2])
    return out


def op_credit(link: int, limit: int) -> bytes:
    return _CREDIT.pack(CREDIT, link, limit)


def op_settle(link: int, how: int, offsets) -> bytes:
    ranges: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if ranges and ranges[-1][1] == offset - 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    return _SETTLE.pack(SETTLE, link, how, len(ranges)) + b"".join(_RANGE.pack(a, b) for a, b in ranges)


def op_get(link: int, no_ack: bool) -> bytes:
    return _GET.pack(GET, link, 1 if no_ack else 0)


def op_drain(link: int) -> bytes:
    return _KIND_LINK.pack(DRAIN, link)


def op_close(link: int) -> bytes:
    return _KIND_LINK.pack(CLOSE, link)


def read_ops(buf) -> list[tuple]:
    """The operations in ``buf``: (OPEN, link, vhost, queue, no_ack, exclusive, priority, limit,
    frames: (channel, frame-max, consumer tag) or None),
    (CREDIT, link, limit), (SETTLE, link, how, [offsets]), (GET, link, no_ack), (DRAIN, link),
    (CLOSE, link)."""
    out: list[tuple] = []
    pos, end = 0, len(buf)
    try:
        while pos < end:
            kind = buf[pos]
            if kind == SETTLE:
                _, link, how, count = _SETTLE.unpack_from(buf, pos)
                pos += _SETTLE.size
                if pos + count * _RANGE.size > end:
                    raise LinkCodecError("settled ranges run past the end")
                offsets = []
                for _ in range(count):
                    first, last = _RANGE.unpack_from(buf, pos)
                    pos += _RANGE.size
                    if last < first or last - first > 1 << 20:
                        raise LinkCodecError(f"bad settled range {first}..{last}")
                    offsets.extend(range(first, last + 1))
                out.append((SETTLE, link, how, offsets))
            elif kind == CREDIT:
                _, link, limit = _CREDIT.unpack_from(buf, pos)
                pos += _CREDIT.size
                out.append((CREDIT, link, limit))
            elif kind == OPEN:
                _, link, flags, priority, limit = _OPEN.unpack_from(buf, pos)
                vhost, pos = _read_text(buf, pos + _OPEN.size)
                queue, pos = _read_text(buf, pos)
                frames = None
                if flags & FRAMES:
                    channel, frame_max = _FRAMES_OPEN.unpack_from(buf, pos)
                    tag, pos = _read_text(buf, pos + _FRAMES_OPEN.size)
                    frames = (channel, frame_max, tag)
                out.append((OPEN, link, vhost, queue, bool(flags & NO_ACK), bool(flags & EXCLUSIVE), priority, limit,
                            frames))
            elif kind == GET:
                _, link, no_ack = _GET.unpack_from(buf, pos)
                pos += _GET.size
                out.append((GET, link, bool(no_ack)))
            elif kind in (DRAIN, CLOSE):
                _, link = _KIND_LINK.unpack_from(buf, pos)
                pos += _KIND_LINK.size
                out.append((kind, link))
            else:
                raise LinkCodecError(f"unknown operation {kind}")
    except (struct.error, UnicodeDecodeError) as exc:
        raise LinkCodecError(f"truncated or malformed operation at byte {pos}: {exc}") from None
    return out


# --- events (L to B) -----------------------------------------------------------------------
def _optional(value: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if value is None else _LEN.pack(len(value)) + value


# Records read back from a log share one headers tuple per message shape (wire.records parses a
# header section once): its encoding (length first) is kept by the tuple's identity, the tuple
# kept with it so that the id stays its own while cached. Bounded.
_ENCODED: dict[int, tuple[tuple, bytes]] = {}


def _encoded_headers(headers: tuple) -> bytes:
    hit = _ENCODED.get(id(headers))
    if hit is not None and hit[0] is headers:
        return hit[1]
    raw = encode_headers(headers)
    raw = _LEN.pack(len(raw)) + raw
    if len(_ENCODED) > 1024:
        _ENCODED.clear()
    _ENCODED[id(headers)] = (headers, raw)
    return raw


def ev_deliver(link: int, offset: int, count: int, redelivered: bool, record: Record) -> bytes:
    key, value = record.key, record.value
    head = _DELIVER.pack(DELIVER, link, offset, count, 1 if redelivered else 0, record.timestamp,
                         record.attributes, -1 if key is None else len(key))
    if value is not None:  # (every AMQP message has a body, empty or not)
        return b"".join((head, key or b"", _LEN.pack(len(value)), value, _encoded_headers(record.headers)))
    return b"".join((head, key or b"", _optional(value), _encoded_headers(record.headers)))


def ev_deliver_frames(link: int, offset: int, count: int, redelivered: bool, frames: bytes) -> bytes:
    return _DELIVER_FRAMES.pack(DELIVER_FRAMES, link, offset, count, 1 if redelivered else 0, len(frames)) + frames


def ev_empty(link: int) -> bytes:
    return _KIND_LINK.pack(EMPTY, link)


def ev_drained(link: int) -> bytes:
    return _KIND_LINK.pack(DRAINED, link)


def ev_closed(link: int, reason: str) -> bytes:
    return _KIND_LINK.pack(CLOSED, link) + _text(reason[:1000])


_HEADERS_SEEN: dict[bytes, tuple] = {}  # the headers of the shapes of message seen lately


def _headers(raw: bytes) -> tuple:
    headers = _HEADERS_SEEN.get(raw)
    if headers is None:
        count, p = decode_varint(raw, 0)
        if count < 0:
            raise LinkCodecError("a negative header count")
        headers, p = _parse_headers(raw, p, len(raw), count, 0)
        if p != len(raw):
            raise LinkCodecError("bytes after a record's headers")
        if len(_HEADERS_SEEN) > 1024:
            _HEADERS_SEEN.clear()
        _HEADERS_SEEN[raw] = headers
    return headers


def read_events(buf) -> list[tuple]:
    """The events in ``buf``: (DELIVER, link, offset, count, redelivered, record),
    (DELIVER_FRAMES, link, offset, count, redelivered, frames), (EMPTY, link), (DRAINED, link),
    (CLOSED, link, reason)."""
    out: list[tuple] = []
    add = out.append
    buf = bytes(buf)
    pos, end = 0, len(buf)
    unpack_len, unpack_deliver, deliver_size = _LEN.unpack_from, _DELIVER.unpack_from, _DELIVER.size
    unpack_frames, frames_size = _DELIVER_FRAMES.unpack_from, _DELIVER_FRAMES.size
    seen = _HEADERS_SEEN
    try:
        while pos < end:  # (one pass per message between brokers: the lookups above are hoisted)
            kind = buf[pos]
            if kind == DELIVER_FRAMES:
                _, link, offset, count, redelivered, n = unpack_frames(buf, pos)
                pos += frames_size
                if n < 0 or pos + n > end:
                    raise LinkCodecError("a delivery's frames run past the end")
                add((DELIVER_FRAMES, link, offset, count, redelivered != 0, buf[pos:pos + n]))
                pos += n
            elif kind == DELIVER:
                _, link, offset, count, redelivered, timestamp, attributes, n = unpack_deliver(buf, pos)
                pos += deliver_size
                key = None
                if n >= 0:
                    key, pos = buf[pos:pos + n], pos + n
                (n,) = unpack_len(buf, pos)
                pos += 4
                value = None
                if n >= 0:
                    value, pos = buf[pos:pos + n], pos + n
                (n,) = unpack_len(buf, pos)
                pos += 4
                if n < 0 or pos + n > end:
                    raise LinkCodecError("a delivery's headers run past the end")
                raw = buf[pos:pos + n]
                pos += n
                headers = seen.get(raw)
                if headers is None:
                    headers = _headers(raw)
                if pos > end:
                    raise LinkCodecError("a delivery runs past the end")
                add((DELIVER, link, offset, count, redelivered != 0,
                     Record(offset, timestamp, key, value, headers, attributes)))
            elif kind in (EMPTY, DRAINED):
                _, link = _KIND_LINK.unpack_from(buf, pos)
                pos += _KIND_LINK.size
                add((kind, link))
            elif kind == CLOSED:
                _, link = _KIND_LINK.unpack_from(buf, pos)
                reason, pos = _read_text(buf, pos + _KIND_LINK.size)
                add((CLOSED, link, reason))
            else:
                raise LinkCodecError(f"unknown event {kind}")
    except (struct.error, UnicodeDecodeError, CorruptBatchError) as exc:
        raise LinkCodecError(f"truncated or malformed event at byte {pos}: {exc}") from None
    return out
