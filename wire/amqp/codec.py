"""Receiving AMQP 0-9-1 on the server side, without I/O: bytes in, events out.

How it works
------------

A connection opens with an 8-byte protocol header, then is a stream of frames::

    type:uint8  channel:uint16  size:uint32  payload:size bytes  0xCE

:class:`ServerCodec` is the h11 shape: the caller hands it whatever the socket delivered
(``receive_data``) and pulls events (``next_event``) until it says :data:`NEED_DATA`. Events
are frozen dataclasses: :class:`ProtocolHeader`, :class:`MethodFrame`, :class:`Message`,
:class:`Heartbeat`. Method and property payloads are decoded by ``pamqp``; framing, content
assembly and the hot methods are done here.

The whole state machine is this table. The connection is in ``HANDSHAKE`` until 8 bytes have
arrived, then in ``FRAMES``. In ``FRAMES`` each channel is independently in one of three
assembly states (channels are interleaved freely; only frames *of one channel* are ordered)::

    channel state        frame                     -> outcome
    -------------------  ------------------------  ---------------------------------------------
    METHOD (no entry)    method Basic.Publish      -> HEADER (publish kept)          [ch != 0]
    METHOD               any other method          -> MethodFrame event, stays METHOD
    METHOD               content header / body     -> 505 expected method frame
    HEADER               header, class 60, w 0     -> BODY, or Message event if body_size == 0
    HEADER               header, other class       -> 505 expected content header for class 60, got one for class N
    HEADER               anything else             -> 505 expected content header for class 60, got non content header
    BODY                 body, fits remaining      -> BODY, or Message event once body_size is reached
    BODY                 body, overruns            -> 501 content body frame exceeds remaining content size
    BODY                 anything else             -> 505 expected content body, got non content body frame
    any, channel 0       heartbeat                 -> Heartbeat event
    any, channel != 0    heartbeat                 -> 505 (RabbitMQ: heartbeats belong to channel 0)
    channel 0            content header / body     -> 505

and, for every frame before it is looked at: a size above ``frame_max`` is 501
``frame_too_large`` (checked as soon as the 7-byte header is in, before the payload is
buffered), a last octet other than 0xCE is 501 ``invalid_frame_end_marker``, an unknown frame
type (or a heartbeat with a payload, or a method/header payload too short for its fixed part)
is 501 ``unknown_frame``, an unknown class/method pair is 503 COMMAND_INVALID, and fields that
do not decode are 501 ``cannot decode``. Texts, codes and the class/method ids reported follow
RabbitMQ's reader (``rabbit_reader``) and command assembler (``rabbit_command_assembler``), so
that what a client shows its user is what RabbitMQ would have made it show.

Every error is an :class:`AmqpFrameError`, a connection error: the caller sends
``Connection.Close`` with its code, text and ids, and stops reading. The codec is then broken
and raises the same error again if asked for more events. Anything else escaping
``next_event`` is a bug in this module.

Sending is in :mod:`wire.amqp.encoding`.

pamqp caveats worth knowing (RabbitMQ differs): pamqp decodes short strings as UTF-8 and
treats invalid UTF-8 as undecodable (501); a timestamp above 2**32 is read as milliseconds; and
integer field-table values lose their wire width (``b``/``s``/``I``/``l`` all become ``int``).
:attr:`Message.properties_raw` keeps the property bytes as they arrived, for a lossless copy.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Union

from pamqp import commands
from pamqp.commands import Basic

__all__ = [
    "NEED_DATA", "PROTOCOL_HEADER", "FRAME_MAX_DEFAULT", "MAX_BODY_SIZE",
    "FRAME_ERROR", "COMMAND_INVALID", "UNEXPECTED_FRAME",
    "AmqpFrameError", "ProtocolHeader", "MethodFrame", "Message", "Heartbeat", "Event", "ServerCodec",
]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_PROTOCOL_HEADER_0_9 = b"AMQP\x01\x01\x00\x09"  # 0-9; RabbitMQ serves it as 0-9-1
FRAME_MAX_DEFAULT = 131072
MAX_BODY_SIZE = 512 * 1024 * 1024  # RabbitMQ's ?MAX_MSG_SIZE: a larger body_size is a frame error

FRAME_ERROR, COMMAND_INVALID, UNEXPECTED_FRAME = 501, 503, 505
_NAMES = {FRAME_ERROR: "FRAME_ERROR", COMMAND_INVALID: "COMMAND_INVALID", UNEXPECTED_FRAME: "UNEXPECTED_FRAME"}

_METHOD, _HEADER, _BODY, _HEARTBEAT = 1, 2, 3, 8
_FRAME_END = 0xCE
_BASIC = 60
_PUBLISH_INDEX = Basic.Publish.index  # 0x003C0028

_FRAME_HEAD = struct.Struct(">BHI")
_INDEX = struct.Struct(">I")
_CONTENT_HEAD = struct.Struct(">HHQ")
_USHORT = struct.Struct(">H")


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()
"""Returned by :meth:`ServerCodec.next_event` when no whole event is buffered."""


class AmqpFrameError(Exception):
    """The peer broke AMQP framing: close the connection with these values.

    ``reply_text`` is RabbitMQ's form, name first ("FRAME_ERROR - ..."); ``channel`` is the
    channel the offending frame came on; ``class_id``/``method_id`` name the method being
    assembled or decoded (0, 0 when there is none), as ``Connection.Close`` reports them.
    """

    def __init__(self, reply_code: int, text: str, channel: int = 0, class_id: int = 0, method_id: int = 0):
        self.reply_code = reply_code
        self.reply_text = text if text.startswith(_NAMES.get(reply_code, "\0")) else f"{_NAMES.get(reply_code, 'ERROR')} - {text}"
        self.channel = channel
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(reply_code, self.reply_text)

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text}"


# ---------------------------------------------------------------------------------------- events

@dataclass(frozen=True, slots=True)
class ProtocolHeader:
    """The first 8 bytes. ``ok`` False: send :data:`PROTOCOL_HEADER` and close."""
    ok: bool
    received: bytes


@dataclass(frozen=True, slots=True)
class MethodFrame:
    """A method other than Basic.Publish; ``method`` is the pamqp command object."""
    channel: int
    method: Any


class Message:
    """A publish, assembled from its method, content header and body frames.

    Treat it as immutable, like the other events. It is a plain slotted class rather than a
    frozen dataclass because one is made per published message: a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) cost more than the rest of the framing.
    ``properties`` (pamqp ``Basic.Properties``) is decoded on first use; the codec has already
    checked that the section decodes, and the publish path reads only ``flags`` (the first
    property flag word: which properties are present) and ``properties_raw``.
    """

    __slots__ = ("channel", "publish", "body", "properties_raw", "flags", "_properties")

    def __init__(self, channel: int, publish: Basic.Publish, properties: Basic.Properties | None, body: bytes,
                 properties_raw: bytes = b"") -> None:
        self.channel = channel
        self.publish = publish
        self.body = body
        self.properties_raw = properties_raw  # flags + property list, as received
        self.flags = (properties_raw[0] << 8 | properties_raw[1]) if len(properties_raw) >= 2 else 0
        self._properties = properties

    @property
    def properties(self) -> Basic.Properties:
        if self._properties is None:
            self._properties = _decode_properties(self.properties_raw) if self.properties_raw else Basic.Properties()
        return self._properties

    def __eq__(self, other) -> bool:
        if type(other) is not Message:
            return NotImplemented
        return (self.channel, self.publish, self.body, self.properties_raw, self.properties) == \
            (other.channel, other.publish, other.body, other.properties_raw, other.properties)

    __hash__ = None

    def __repr__(self) -> str:
        return (f"Message(channel={self.channel!r}, publish={self.publish!r}, properties={self.properties!r}, "
                f"body={self.body!r})")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


Event = Union[ProtocolHeader, MethodFrame, Message, Heartbeat]
_HEARTBEAT_EVENT = Heartbeat()


# ------------------------------------------------------------------------------------- decoding

def _erl_binary(data: bytes) -> str:
    """Erlang's ``~tp`` of a binary, as RabbitMQ prints payload snippets."""
    if data and all(32 <= b < 127 for b in data):
        return '<<"' + data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"') + '">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


def _frame_error(reason: str, ftype: int, channel: int, payload: bytes = b"") -> AmqpFrameError:
    snippet = "all" if len(payload) <= 16 else "first 16"
    return AmqpFrameError(FRAME_ERROR, f"FRAME_ERROR - type {ftype}, {snippet} octets = "
                                       f"{_erl_binary(payload[:16])}: {reason}", channel)


def _unexpected(text: str, channel: int, class_id: int = 0, method_id: int = 0) -> AmqpFrameError:
    return AmqpFrameError(UNEXPECTED_FRAME, f"UNEXPECTED_FRAME - {text}", channel, class_id, method_id)


def _decode_publish(data: bytes) -> Basic.Publish:
    """Basic.Publish fields (after class/method ids) without pamqp's generic loop.

    ticket:short, exchange:shortstr, routing_key:shortstr, one octet of bits (mandatory,
    immediate). A truncated payload raises IndexError, bad UTF-8 UnicodeDecodeError.
    """
    pos = 3 + data[2]
    end = pos + 1 + data[pos]
    bits = data[end]
    publish = Basic.Publish.__new__(Basic.Publish)  # skips validate(): RabbitMQ accepts any name
    publish.ticket = (data[0] << 8) | data[1]
    publish.exchange = data[3:pos].decode()
    publish.routing_key = data[pos + 1:end].decode()
    publish.mandatory = bool(bits & 1)
    publish.immediate = bool(bits & 2)
    return publish


class _Assembly:
    """A publish waiting for its content header (``body_size`` is None) or for body bytes."""
    __slots__ = ("publish", "properties", "properties_raw", "body_size", "remaining", "chunks")

    def __init__(self, publish: Basic.Publish) -> None:
        self.publish = publish
        self.properties = None
        self.properties_raw = b""
        self.body_size: int | None = None
        self.remaining = 0
        self.chunks: list[bytes] = []


class ServerCodec:
    """Sans-I/O server side of one AMQP 0-9-1 connection (see the module docstring).

    ``frame_max`` is the largest frame payload accepted; set it to the negotiated value after
    Connection.TuneOk (0 means no limit, as in the protocol). Not thread-safe: one per connection.
    """

    def __init__(self, frame_max: int = FRAME_MAX_DEFAULT, max_body_size: int = MAX_BODY_SIZE) -> None:
        self.frame_max = frame_max
        self.max_body_size = max_body_size
        self._buf = bytearray()
        self._pos = 0
        self._handshaken = False
        self._refused = False
        self._error: AmqpFrameError | None = None
        self._assemblies: dict[int, _Assembly] = {}

    def receive_data(self, data: bytes) -> None:
        if not self._refused:
            self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet turned into events (for back-pressure decisions)."""
        return len(self._buf) - self._pos

    @property
    def assembling(self) -> bool:
        """True while some channel has a publish waiting for its header or body frames."""
        return bool(self._assemblies)

    def next_event(self) -> Event | _NeedData:
        if self._error is not None:
            raise self._error
        if not self._handshaken:
            return self._handshake()
        try:
            return self._next_frame_event()
        except AmqpFrameError as error:
            self._error = error
            raise

    # -- internals --------------------------------------------------------------------------

    def _handshake(self) -> ProtocolHeader | _NeedData:
        if self._refused or len(self._buf) < 8:
            return NEED_DATA
        received = bytes(self._buf[:8])
        ok = received == PROTOCOL_HEADER or received == _PROTOCOL_HEADER_0_9
        if ok:
            self._handshaken = True
            self._pos = 8
        else:
            self._refused = True  # the connection is over; later bytes are dropped
            self._buf.clear()
        return ProtocolHeader(ok, received)

    def _next_frame_event(self) -> Event | _NeedData:
        buf = self._buf
        while True:
            pos = self._pos
            if len(buf) - pos < 7:
                return self._compact()
            ftype, channel, size = _FRAME_HEAD.unpack_from(buf, pos)
            if size > self.frame_max > 0:
                raise _frame_error(f"{{frame_too_large,{size},{self.frame_max - 8}}}", ftype, channel)
            end = pos + 7 + size
            if len(buf) <= end:
                return self._compact()
            if buf[end] != _FRAME_END:
                raise _frame_error(f"{{invalid_frame_end_marker,{buf[end]}}}", ftype, channel,
                                   bytes(buf[pos + 7:end]))
            if ftype == _METHOD and channel and size >= 4 and _INDEX.unpack_from(buf, pos + 7)[0] == _PUBLISH_INDEX \
                    and channel not in self._assemblies:
                message = self._whole_publish(buf, pos, channel, end)
                if message is not None:
                    return message
            self._pos = end + 1
            with memoryview(buf) as view:
                payload = view[pos + 7:end].tobytes()
            if ftype == _BODY:
                event = self._on_body(channel, payload)
            elif ftype == _METHOD:
                event = self._on_method(channel, payload)
            elif ftype == _HEADER:
                event = self._on_header(channel, payload)
            elif ftype == _HEARTBEAT and not payload:
                if channel != 0:
                    raise _unexpected("type 8, all octets = <<>>", channel)
                event = _HEARTBEAT_EVENT
            else:
                raise _frame_error("unknown_frame", ftype, channel, payload)
            if event is not None:
                return event

    def _whole_publish(self, buf: bytearray, pos: int, channel: int, end: int) -> Message | None:
        """The publish hot path: method, content header and one body frame all buffered and valid.

        Returns the Message (and moves past the three frames), or None to let the frame-by-frame
        path handle them, which then also reports any error exactly as the table above says: the
        shortcut is taken only when every frame is in and each check of that path would pass.
        """
        have = len(buf)
        frame_max = self.frame_max
        hpos = end + 1
        if have < hpos + 21:  # header frame head (7) + class, weight, size (12) + flags (2)
            return None
        htype, hchannel, hsize = _FRAME_HEAD.unpack_from(buf, hpos)
        hend = hpos + 7 + hsize
        if htype != _HEADER or hchannel != channel or hsize < 14 or (hsize > frame_max > 0) or have <= hend \
                or buf[hend] != _FRAME_END:
            return None
        class_id, weight, body_size = _CONTENT_HEAD.unpack_from(buf, hpos + 7)
        if class_id != _BASIC or weight or body_size > self.max_body_size:
            return None
        raw = bytes(buf[hpos + 19:hend])
        known = _SECTIONS.get(raw)
        if known is None:
            if not _section_ok(raw):
                return None
            _remember(_SECTIONS, raw, raw)
        else:
            raw = known  # one bytes object per distinct section: its hash is computed once
        if body_size:
            bpos = hend + 1
            if have < bpos + 7:
                return None
            btype, bchannel, bsize = _FRAME_HEAD.unpack_from(buf, bpos)
            bend = bpos + 7 + bsize
            if btype != _BODY or bchannel != channel or bsize != body_size or (bsize > frame_max > 0) \
                    or have <= bend or buf[bend] != _FRAME_END:
                return None
            body = bytes(buf[bpos + 7:bend])
            hend = bend
        else:
            body = b""
        fields = bytes(buf[pos + 11:end])
        publish = _PUBLISHES.get(fields)
        if publish is None:
            try:
                publish = _decode_publish(fields)
            except (ValueError, IndexError):
                return None
            _remember(_PUBLISHES, fields, publish)
        self._pos = hend + 1
        return Message(channel, publish, None, body, raw)

    def _compact(self) -> _NeedData:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        return NEED_DATA

    def _on_method(self, channel: int, payload: bytes) -> MethodFrame | None:
        if len(payload) < 4:
            raise _frame_error("unknown_frame", _METHOD, channel, payload)
        (index,) = _INDEX.unpack_from(payload)
        class_id, method_id = index >> 16, index & 0xFFFF
        cls = commands.INDEX_MAPPING.get(index)
        if cls is None:
            raise AmqpFrameError(COMMAND_INVALID, f"COMMAND_INVALID - unknown method {{{class_id},{method_id}}}",
                                 channel, class_id, method_id)
        assembly = self._assemblies.get(channel)
        if assembly is not None:
            raise self._out_of_order(channel, assembly)
        if index == _PUBLISH_INDEX and channel != 0:
            try:
                publish = _decode_publish(payload[4:])
            except (ValueError, IndexError) as error:
                raise self._cannot_decode(channel, payload, class_id, method_id) from error
            self._assemblies[channel] = _Assembly(publish)
            return None
        try:
            method = cls()
            method.unmarshal(payload[4:])
        except Exception as error:  # pamqp raises struct.error, ValueError, OverflowError, ...
            raise self._cannot_decode(channel, payload, class_id, method_id) from error
        return MethodFrame(channel, method)

    def _on_header(self, channel: int, payload: bytes) -> Message | None:
        if len(payload) < 14:  # class, weight, body size, one flag word
            raise _frame_error("unknown_frame", _HEADER, channel, payload)
        assembly = self._assemblies.get(channel)
        if assembly is None:
            if channel == 0:
                raise _unexpected(f"type 2, {'all' if len(payload) <= 16 else 'first 16'} octets = "
                                  f"{_erl_binary(payload[:16])}", channel)
            raise _unexpected("expected method frame, got non method frame instead", channel)
        if assembly.body_size is not None:
            raise self._out_of_order(channel, assembly)
        class_id, weight, body_size = _CONTENT_HEAD.unpack_from(payload)
        if weight != 0:
            raise _unexpected("expected content header for class 60, got non content header frame instead",
                              channel, 60, 40)
        if class_id != _BASIC:
            raise _unexpected(f"expected content header for class 60, got one for class {class_id} instead",
                              channel, 60, 40)
        if body_size > self.max_body_size:
            raise AmqpFrameError(FRAME_ERROR, f"FRAME_ERROR - content body size {body_size} exceeds maximum "
                                              f"allowed size {self.max_body_size}", channel, 60, 40)
        raw = payload[12:]
        try:
            properties = _decode_properties(raw)
        except Exception as error:  # pamqp: struct.error, ValueError, OverflowError, OSError, ...
            raise AmqpFrameError(FRAME_ERROR, f"FRAME_ERROR - cannot decode content properties "
                                              f"{_erl_binary(raw[:16])}", channel, 60, 40) from error
        if body_size == 0:
            del self._assemblies[channel]
            return Message(channel, assembly.publish, properties, b"", raw)
        assembly.properties = properties
        assembly.properties_raw = raw
        assembly.body_size = assembly.remaining = body_size
        return None

    def _on_body(self, channel: int, payload: bytes) -> Message | None:
        assembly = self._assemblies.get(channel)
        if assembly is None:
            if channel == 0:
                raise _unexpected(f"type 3, {'all' if len(payload) <= 16 else 'first 16'} octets = "
                                  f"{_erl_binary(payload[:16])}", channel)
            raise _unexpected("expected method frame, got non method frame instead", channel)
        if assembly.body_size is None:
            raise self._out_of_order(channel, assembly)
        remaining = assembly.remaining - len(payload)
        if remaining < 0:
            raise AmqpFrameError(FRAME_ERROR, "FRAME_ERROR - content body frame exceeds remaining content size",
                                 channel, 60, 40)
        if remaining:
            assembly.remaining = remaining
            assembly.chunks.append(payload)
            return None
        del self._assemblies[channel]
        if assembly.chunks:
            assembly.chunks.append(payload)
            payload = b"".join(assembly.chunks)
        return Message(channel, assembly.publish, assembly.properties, payload, assembly.properties_raw)

    @staticmethod
    def _out_of_order(channel: int, assembly: _Assembly) -> AmqpFrameError:
        if assembly.body_size is None:
            return _unexpected("expected content header for class 60, got non content header frame instead",
                               channel, 60, 40)
        return _unexpected("expected content body, got non content body frame instead", channel, 60, 40)

    @staticmethod
    def _cannot_decode(channel: int, payload: bytes, class_id: int, method_id: int) -> AmqpFrameError:
        return AmqpFrameError(FRAME_ERROR, f"FRAME_ERROR - cannot decode {_erl_binary(payload[4:20])}",
                              channel, class_id, method_id)


def decode_properties(raw: bytes) -> Basic.Properties:
    """A content header's property section (flags and values) as pamqp's Basic.Properties."""
    return _decode_properties(raw)


def _decode_properties(raw: bytes) -> Basic.Properties:
    flags, pos = 0, 0
    for word in range(8):  # continuation bit: bit 0 of each flag word
        (part,) = _USHORT.unpack_from(raw, pos)
        pos += 2
        flags |= (part & 0xFFFE) << (16 * word)
        if not part & 1:
            break
    else:
        raise ValueError("too many property flag words")
    if flags and not flags & _SLOW_FLAGS and flags < 0x10000:
        return _decode_simple_properties(flags, raw, pos)
    properties = Basic.Properties()
    if flags:
        properties.unmarshal(flags, raw[pos:])
    return properties


# The publish hot path: a property section of short strings and octets only (no headers table,
# no timestamp) is decoded here, to the same values pamqp gives, without its generic loop.
_PROPERTY_BITS = tuple((Basic.Properties.flags[name], name, getattr(Basic.Properties, "_" + name))
                       for name in Basic.Properties.__slots__)
_SLOW_FLAGS = Basic.Properties.flags["headers"] | Basic.Properties.flags["timestamp"]
_PROPERTIES_CLASS = Basic.Properties


_SHORTSTR_SET = frozenset(bit for bit, name, kind in _PROPERTY_BITS if kind == "shortstr")


# Publishers repeat themselves: the same exchange and routing key, the same property section.
# The whole-publish path keeps what it decoded or checked in these bounded caches, shared by all
# connections (the Basic.Publish objects are read, never changed, by their users).
_SECTIONS: dict[bytes, bytes] = {}  # property sections known to decode
_PUBLISHES: dict[bytes, Basic.Publish] = {}  # Basic.Publish fields -> the decoded method
_CACHE_MAX = 1024


def _remember(cache: dict, key, value) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


def _section_ok(raw: bytes) -> bool:
    """Whether a one-flag-word property section decodes (as :func:`_decode_properties` would)."""
    if raw[1] & 1:  # more flag words follow: rare, left to the frame-by-frame path
        return False
    if (raw[0] << 8 | raw[1]) & _SLOW_FLAGS:
        try:
            _decode_properties(raw)
        except Exception:  # what the frame-by-frame path turns into a 501
            return False
        return True
    return _simple_properties_ok(raw)


def _simple_properties_ok(raw: bytes) -> bool:
    """Whether one flag word's property section (no headers, no timestamp) decodes.

    The check :func:`_decode_simple_properties` makes, without building the properties: each
    short string inside the section and valid UTF-8, each octet present."""
    flags = (raw[0] << 8 | raw[1]) & 0xFFFE
    if flags & _SLOW_FLAGS:
        return False
    pos, end = 2, len(raw)
    bit = 0x8000
    while flags:
        if flags & bit:
            flags ^= bit
            if bit in _SHORTSTR_SET:
                stop = pos + 1 + raw[pos] if pos < end else end + 1
                if stop > end:
                    return False
                if not raw[pos + 1:stop].isascii():
                    try:
                        raw[pos + 1:stop].decode("utf-8")
                    except UnicodeDecodeError:
                        return False
                pos = stop
            else:  # octet
                if pos >= end:
                    return False
                pos += 1
        bit >>= 1
    return True


def _decode_simple_properties(flags: int, raw: bytes, pos: int) -> Basic.Properties:
    properties = _PROPERTIES_CLASS.__new__(_PROPERTIES_CLASS)
    end = len(raw)
    for bit, name, kind in _PROPERTY_BITS:
        if not flags & bit:
            setattr(properties, name, "" if name == "cluster_id" else None)
        elif kind == "shortstr":
            stop = pos + 1 + raw[pos]
            if stop > end:
                raise ValueError(f"property {name} runs past the end of the content header")
            setattr(properties, name, raw[pos + 1:stop].decode("utf-8"))
            pos = stop
        else:  # octet
            setattr(properties, name, raw[pos])
            pos += 1
    return properties
