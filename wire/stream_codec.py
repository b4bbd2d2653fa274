"""The RabbitMQ stream protocol's frames: bytes <-> typed commands, without I/O.

A frame is ``size:u32`` then ``key:u16 version:u16`` and the command's fields, all big-endian;
strings are ``i16`` length + UTF-8 (-1 null), byte strings ``i32`` length (-1 null), arrays
``i32`` count + items. A key with the top bit set is a response. :class:`FrameBuffer` cuts
frames out of a byte stream; :func:`decode_request` turns a client frame into a
:class:`Request` (command name + fields); the ``encode_*`` functions build server frames.

A stream chunk (the payload of Deliver) is osiris's format: a 48-byte header (magic/version
0x50, chunk type 0, entry and record counts, timestamp, epoch, first offset, CRC-32 of the
data, data length, trailer length, filter size + reserved) and entries of ``0:1 size:31`` +
message bytes. Sub-entry batches (publishers that batch and compress several messages as one
entry) are read on publish and never produced.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import cramjam

# --- keys and codes ---------------------------------------------------------------------------
DECLARE_PUBLISHER, PUBLISH, PUBLISH_CONFIRM, PUBLISH_ERROR, QUERY_PUBLISHER_SEQUENCE = 1, 2, 3, 4, 5
DELETE_PUBLISHER, SUBSCRIBE, DELIVER, CREDIT, STORE_OFFSET, QUERY_OFFSET, UNSUBSCRIBE = 6, 7, 8, 9, 10, 11, 12
CREATE, DELETE, METADATA, METADATA_UPDATE, PEER_PROPERTIES, SASL_HANDSHAKE, SASL_AUTHENTICATE = 13, 14, 15, 16, 17, 18, 19
TUNE, OPEN, CLOSE, HEARTBEAT, ROUTE, PARTITIONS, CONSUMER_UPDATE = 20, 21, 22, 23, 24, 25, 26
EXCHANGE_COMMAND_VERSIONS, STREAM_STATS, CREATE_SUPER_STREAM, DELETE_SUPER_STREAM = 27, 28, 29, 30
RESPONSE = 0x8000

# (min, max) version of every command this server speaks, in key order: some clients index the
# answer to ExchangeCommandVersions by key - 1, so the list is complete from key 1 on.
VERSIONS = {k: (1, 2 if k in (PUBLISH, DELIVER) else 1) for k in range(1, DELETE_SUPER_STREAM + 1)}

OK, STREAM_DOES_NOT_EXIST, SUBSCRIPTION_ID_ALREADY_EXISTS, SUBSCRIPTION_ID_DOES_NOT_EXIST = 1, 2, 3, 4
STREAM_ALREADY_EXISTS, STREAM_NOT_AVAILABLE, SASL_MECHANISM_NOT_SUPPORTED, AUTHENTICATION_FAILURE = 5, 6, 7, 8
SASL_ERROR, SASL_CHALLENGE, SASL_AUTHENTICATION_FAILURE_LOOPBACK, VIRTUAL_HOST_ACCESS_FAILURE = 9, 10, 11, 12
UNKNOWN_FRAME, FRAME_TOO_LARGE, INTERNAL_ERROR, ACCESS_REFUSED, PRECONDITION_FAILED = 13, 14, 15, 16, 17
PUBLISHER_DOES_NOT_EXIST, NO_OFFSET = 18, 19

OFFSET_FIRST, OFFSET_LAST, OFFSET_NEXT, OFFSET_OFFSET, OFFSET_TIMESTAMP = 1, 2, 3, 4, 5
OFFSET_NONE = 0  # only in a ConsumerUpdate response: the consumer names no offset (it was made passive)

# A sub-entry batch (several messages compressed as one entry) may say it holds at most this much
# once uncompressed (RabbitMQ's default max_uncompressed_sub_entry_batch_size): a frame is at most
# frame-max bytes, but deflate or zstd could turn that into gigabytes.
MAX_SUB_ENTRY_BYTES = 64 << 20

CHUNK_HEADER = struct.Struct(">BBHIqQQIIII")  # 48 bytes
MAGIC_VERSION = 0x50  # osiris: magic 5, version 0
_U8, _U16, _U32, _U64, _I16, _I32, _I64 = (struct.Struct(f">{c}") for c in "BHIQhiq")
_HEAD = struct.Struct(">IHH")  # size, key, version
_SUB_CODECS = {0: None, 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}  # compression of sub-entry batches


class StreamFrameError(ValueError):
    """A frame that cannot be read; ``code`` is the response code to close the connection with."""

    def __init__(self, message: str, code: int = UNKNOWN_FRAME):
        super().__init__(message)
        self.code = code


# --- cutting frames out of a stream -----------------------------------------------------------
class FrameBuffer:
    """Bytes in, whole frames (``key, version, body``) out; refuses frames above ``max_size``.

    :meth:`pop` cuts one frame at a time, so a ``max_size`` changed by that frame (Open raises it
    to the tuned size) already applies to the next one of the same read."""

    def __init__(self, max_size: int = 0):
        self.max_size = max_size  # 0: no limit
        self._buf = bytearray()
        self._pos = 0  # start of the first frame not cut yet

    def push(self, data: bytes) -> None:
        self._buf += data

    def pop(self) -> tuple[int, int, memoryview] | None:
        """The next whole frame, or None until more bytes come."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos >= 4:
            size = _U32.unpack_from(buf, pos)[0]
            if self.max_size and size > self.max_size:
                raise StreamFrameError(f"frame of {size} bytes exceeds the frame-max {self.max_size}",
                                       FRAME_TOO_LARGE)
            if size < 4:
                raise StreamFrameError(f"frame of {size} bytes is shorter than its key and version")
            if len(buf) - pos - 4 >= size:
                key, version = struct.unpack_from(">HH", buf, pos + 4)
                self._pos = pos + 4 + size
                return key, version, memoryview(bytes(buf[pos + 8:pos + 4 + size]))
        if pos:  # drop what was cut once, not per frame
            del buf[:pos]
            self._pos = 0
        return None

    def feed(self, data: bytes) -> list[tuple[int, int, memoryview]]:
        self.push(data)
        frames = []
        while (frame := self.pop()) is not None:
            frames.append(frame)
        return frames


# --- reading fields ---------------------------------------------------------------------------
class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview):
        self.data, self.pos = data, 0

    def _take(self, s: struct.Struct) -> int:
        try:
            value = s.unpack_from(self.data, self.pos)[0]
        except struct.error:
            raise StreamFrameError("frame ends inside a field") from None
        self.pos += s.size
        return value

    def u8(self) -> int:
        return self._take(_U8)

    def u16(self) -> int:
        return self._take(_U16)

    def u32(self) -> int:
        return self._take(_U32)

    def u64(self) -> int:
        return self._take(_U64)

    def i64(self) -> int:
        return self._take(_I64)

    def i32(self) -> int:
        return self._take(_I32)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise StreamFrameError("frame ends inside a field")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self) -> str | None:
        n = self._take(_I16)
        if n < 0:
            return None
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError:
            raise StreamFrameError("a string field is not UTF-8") from None

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.raw(n)

    def count(self, item_min: int = 1) -> int:
        n = self.i32()
        if n < 0 or n * item_min > len(self.data) - self.pos:
            raise StreamFrameError(f"array of {n} items does not fit its frame")
        return n

    def strings(self) -> list[str | None]:
        return [self.string() for _ in range(self.count(2))]

    def properties(self) -> dict[str, str]:
        return {self.string() or "": self.string() or "" for _ in range(self.count(4))}

    def end(self) -> None:
        if self.pos != len(self.data):
            raise StreamFrameError(f"{len(self.data) - self.pos} unexpected bytes after the last field")


@dataclass
class Request:
    """A decoded client frame: ``command`` (the key without the response bit) and its fields."""

    command: int
    version: int
    correlation_id: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    response: bool = False

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


def _offset_spec(r: _Reader, none: bool = False) -> tuple[int, int | None]:
    kind = r.u16()
    if none and kind == OFFSET_NONE:
        return kind, None
    if kind == OFFSET_OFFSET:
        return kind, r.u64()
    if kind == OFFSET_TIMESTAMP:
        return kind, r.i64()
    if kind in (OFFSET_FIRST, OFFSET_LAST, OFFSET_NEXT):
        return kind, None
    raise StreamFrameError(f"unknown offset specification type {kind}", PRECONDITION_FAILED)


def _decompress(codec: str, data: bytes, size: int) -> bytes:
    """``data`` uncompressed, which must come to exactly ``size`` bytes; never more is produced."""
    try:
        if codec == "gzip":
            inflater = zlib.decompressobj(31)
            out = inflater.decompress(data, size + 1)  # one byte over says it is too long
            if len(out) != size or not inflater.eof:
                raise ValueError(f"{len(out)}{'+' if len(out) > size else ''} bytes")
            return out
        buffer = bytearray(size)  # cramjam writes into it and fails rather than grow it
        written = getattr(cramjam, codec).decompress_into(data, buffer)
        if written != size:
            raise ValueError(f"{written} bytes")
        return bytes(buffer)
    except Exception as exc:
        raise StreamFrameError(f"sub-entry batch does not decompress with {codec} to the {size} bytes it "
                               f"declares: {exc}", PRECONDITION_FAILED) from None


def _published(r: _Reader, version: int) -> list[tuple[int, str | None, bytes | None]]:
    """(publishing id, filter value, message) of each message of a Publish, sub-entries opened.

    A sub-entry batch declaring more than MAX_SUB_ENTRY_BYTES uncompressed comes out as one
    ``(id, filter value, None)``: refused (PublishError PRECONDITION_FAILED, as RabbitMQ answers),
    without being decompressed."""
    out = []
    for _ in range(r.count(12)):
        pid = r.u64()
        filter_value = r.string() if version >= 2 else None
        if r.pos < len(r.data) and r.data[r.pos] & 0x80:  # a sub-entry batch: several messages, one id
            kind = (r.u8() & 0x70) >> 4
            count, size, length = r.u16(), r.i32(), r.i32()
            data = r.raw(length)
            codec = _SUB_CODECS.get(kind, "?")
            if codec == "?":
                raise StreamFrameError(f"unknown sub-entry compression {kind}", PRECONDITION_FAILED)
            if size > MAX_SUB_ENTRY_BYTES:
                out.append((pid, filter_value, None))
                continue
            if codec is not None:
                if size < 0:
                    raise StreamFrameError(f"compressed sub-entry batch declares {size} bytes", PRECONDITION_FAILED)
                data = _decompress(codec, data, size)
            sub = _Reader(memoryview(data))
            for _ in range(count):
                out.append((pid, filter_value, sub.raw(sub.u32())))
            if size >= 0 and len(data) != size:
                raise StreamFrameError("sub-entry batch size does not match its data", PRECONDITION_FAILED)
        else:
            message = r.bytes_()
            out.append((pid, filter_value, message or b""))
    return out


def decode_request(key: int, version: int, body: memoryview) -> Request:
    """The client frame ``key``/``version``/``body``; raises StreamFrameError when malformed."""
    r = _Reader(body)
    response = bool(key & RESPONSE)
    command = key & 0x7FFF
    if command == TUNE:
        # the client's Tune answers the server's: RabbitMQ's Java client sends it with the response
        # bit set, other clients without; RabbitMQ reads both as the client's Tune
        response = False
    if response:
        req = Request(command, version, r.u32(), response=True)
        if command == CONSUMER_UPDATE:
            req.fields["code"] = r.u16()
            # RabbitMQ's Java client answers an update that made its consumer passive with "none"
            req.fields["offset_spec"] = _offset_spec(r, none=True) if r.pos < len(body) else (OFFSET_NEXT, None)
        elif command == CLOSE:
            req.fields["code"] = r.u16()
        elif r.pos < len(body):
            req.fields["code"] = r.u16()
        return req
    low, high = VERSIONS.get(command, (1, 1))
    if not low <= version <= high:  # RabbitMQ reads an unknown version as an unknown frame
        raise StreamFrameError(f"version {version} of command {command} is not supported (versions {low} to {high})")
    f: dict[str, Any] = {}
    cid = None
    if command == PUBLISH:
        f["publisher_id"] = r.u8()
        f["messages"] = _published(r, version)
    elif command == CREDIT:
        f["subscription_id"], f["credit"] = r.u8(), r.u16()
    elif command == STORE_OFFSET:
        f["reference"], f["stream"], f["offset"] = r.string(), r.string(), r.u64()
    elif command == HEARTBEAT:
        pass
    elif command == TUNE:
        f["frame_max"], f["heartbeat"] = r.u32(), r.u32()
    else:
        cid = r.u32()
        if command == DECLARE_PUBLISHER:
            f["publisher_id"], f["reference"], f["stream"] = r.u8(), r.string(), r.string()
        elif command == QUERY_PUBLISHER_SEQUENCE:
            f["reference"], f["stream"] = r.string(), r.string()
        elif command in (DELETE_PUBLISHER, UNSUBSCRIBE):
            f["publisher_id" if command == DELETE_PUBLISHER else "subscription_id"] = r.u8()
        elif command == SUBSCRIBE:
            f["subscription_id"], f["stream"] = r.u8(), r.string()
            f["offset_spec"] = _offset_spec(r)
            f["credit"] = r.u16()
            f["properties"] = r.properties() if r.pos < len(body) else {}
        elif command == QUERY_OFFSET:
            f["reference"], f["stream"] = r.string(), r.string()
        elif command == CREATE:
            f["stream"], f["arguments"] = r.string(), r.properties()
        elif command in (DELETE, STREAM_STATS):
            f["stream"] = r.string()
        elif command == METADATA:
            f["streams"] = r.strings()
        elif command == PEER_PROPERTIES:
            f["properties"] = r.properties()
        elif command == SASL_HANDSHAKE:
            pass
        elif command == SASL_AUTHENTICATE:
            f["mechanism"], f["data"] = r.string(), r.bytes_() or b""
        elif command == OPEN:
            f["vhost"] = r.string()
        elif command == CLOSE:
            f["code"], f["reason"] = r.u16(), r.string()
        elif command == ROUTE:
            f["routing_key"], f["super_stream"] = r.string(), r.string()
        elif command in (PARTITIONS, DELETE_SUPER_STREAM):
            f["super_stream"] = r.string()
        elif command == EXCHANGE_COMMAND_VERSIONS:
            f["versions"] = [(r.u16(), r.u16(), r.u16()) for _ in range(r.count(6))]
        elif command == CREATE_SUPER_STREAM:
            f["super_stream"], f["partitions"], f["binding_keys"] = r.string(), r.strings(), r.strings()
            f["arguments"] = r.properties()
        else:
            raise StreamFrameError(f"unknown command key {command}")
    r.end()
    return Request(command, version, cid, f)


# --- writing frames ---------------------------------------------------------------------------
def _string(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return _I16.pack(len(b)) + b


def _properties(props: dict[str, str]) -> bytes:
    return _I32.pack(len(props)) + b"".join(_string(k) + _string(v) for k, v in props.items())


def _frame(key: int, version: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body) + 4, key, version) + body


def response(command: int, correlation_id: int, code: int = OK, extra: bytes = b"", version: int = 1) -> bytes:
    """The common response shape: correlation id, response code, then ``extra``."""
    return _frame(command | RESPONSE, version, _U32.pack(correlation_id) + _U16.pack(code) + extra)


def error_response(command: int, correlation_id: int, code: int) -> bytes:
    """A refusal in the full shape of the command's response, its extra fields zero or empty:
    clients decode a QueryOffset answer's offset or a Route answer's list whatever the code."""
    extra = {QUERY_PUBLISHER_SEQUENCE: _U64.pack(0), QUERY_OFFSET: _U64.pack(0), ROUTE: _I32.pack(0),
             PARTITIONS: _I32.pack(0), STREAM_STATS: _I32.pack(0)}.get(command, b"")
    return response(command, correlation_id, code, extra)


def encode_peer_properties(correlation_id: int, props: dict[str, str]) -> bytes:
    return response(PEER_PROPERTIES, correlation_id, OK, _properties(props))


def encode_sasl_handshake(correlation_id: int, mechanisms: list[str]) -> bytes:
    return response(SASL_HANDSHAKE, correlation_id, OK, _I32.pack(len(mechanisms)) +
                    b"".join(_string(m) for m in mechanisms))


def encode_sasl_authenticate(correlation_id: int, code: int, challenge: bytes | None = None) -> bytes:
    return response(SASL_AUTHENTICATE, correlation_id, code,
                    b"" if challenge is None else _I32.pack(len(challenge)) + challenge)


def encode_tune(frame_max: int, heartbeat: int) -> bytes:
    return _frame(TUNE, 1, _U32.pack(frame_max) + _U32.pack(heartbeat))


def encode_open(correlation_id: int, code: int, props: dict[str, str]) -> bytes:
    return response(OPEN, correlation_id, code, _properties(props) if code == OK else b"")


def encode_close(correlation_id: int, code: int, reason: str) -> bytes:
    return _frame(CLOSE, 1, _U32.pack(correlation_id) + _U16.pack(code) + _string(reason))


def encode_heartbeat() -> bytes:
    return _frame(HEARTBEAT, 1, b"")


def encode_publish_confirm(publisher_id: int, ids: list[int]) -> bytes:
    return _frame(PUBLISH_CONFIRM, 1, _U8.pack(publisher_id) + _I32.pack(len(ids)) +
                  b"".join(_U64.pack(i) for i in ids))


def encode_publish_error(publisher_id: int, errors: list[tuple[int, int]]) -> bytes:
    return _frame(PUBLISH_ERROR, 1, _U8.pack(publisher_id) + _I32.pack(len(errors)) +
                  b"".join(_U64.pack(i) + _U16.pack(code) for i, code in errors))


def encode_u64_response(command: int, correlation_id: int, code: int, value: int) -> bytes:
    return response(command, correlation_id, code, _U64.pack(value))


def encode_metadata(correlation_id: int, brokers: list[tuple[int, str, int]],
                    streams: list[tuple[str, int, int, list[int]]]) -> bytes:
    """``brokers``: (reference, host, port); ``streams``: (name, code, leader ref, replica refs)."""
    body = _U32.pack(correlation_id) + _I32.pack(len(brokers))
    body += b"".join(_U16.pack(ref) + _string(host) + _U32.pack(port) for ref, host, port in brokers)
    body += _I32.pack(len(streams))
    for name, code, leader, replicas in streams:
        body += _string(name) + _U16.pack(code) + _U16.pack(leader) + _I32.pack(len(replicas))
        body += b"".join(_U16.pack(r) for r in replicas)
    return _frame(METADATA | RESPONSE, 1, body)


def encode_metadata_update(code: int, stream: str) -> bytes:
    return _frame(METADATA_UPDATE, 1, _U16.pack(code) + _string(stream))


def encode_streams(command: int, correlation_id: int, code: int, streams: list[str]) -> bytes:
    """Route and Partitions responses: a list of stream names."""
    return response(command, correlation_id, code, _I32.pack(len(streams)) + b"".join(_string(s) for s in streams))


def encode_command_versions(correlation_id: int) -> bytes:
    body = b"".join(_U16.pack(k) + _U16.pack(lo) + _U16.pack(hi) for k, (lo, hi) in sorted(VERSIONS.items()))
    return response(EXCHANGE_COMMAND_VERSIONS, correlation_id, OK, _I32.pack(len(VERSIONS)) + body)


def encode_stream_stats(correlation_id: int, code: int, stats: dict[str, int]) -> bytes:
    return response(STREAM_STATS, correlation_id, code,
                    _I32.pack(len(stats)) + b"".join(_string(k) + _I64.pack(v) for k, v in stats.items()))


def encode_credit_error(code: int, subscription_id: int) -> bytes:
    return _frame(CREDIT | RESPONSE, 1, _U16.pack(code) + _U8.pack(subscription_id))


def encode_consumer_update(correlation_id: int, subscription_id: int, active: bool) -> bytes:
    return _frame(CONSUMER_UPDATE, 1, _U32.pack(correlation_id) + _U8.pack(subscription_id) + _U8.pack(active))


def encode_deliver(subscription_id: int, first_offset: int, timestamp: int, messages: list[bytes],
                   committed_offset: int | None = None, epoch: int = 0) -> bytes:
    """A Deliver frame carrying one chunk of ``messages`` at consecutive offsets from ``first_offset``.

    ``committed_offset`` is given for version 2 (the clients' "committed chunk id")."""
    data = b"".join(_U32.pack(len(m)) + m for m in messages)
    header = CHUNK_HEADER.pack(MAGIC_VERSION, 0, len(messages), len(messages), timestamp, epoch, first_offset,
                               zlib.crc32(data), len(data), 0, 0)
    if committed_offset is None:
        return _frame(DELIVER, 1, _U8.pack(subscription_id) + header + data)
    return _frame(DELIVER, 2, _U8.pack(subscription_id) + _U64.pack(committed_offset) + header + data)
