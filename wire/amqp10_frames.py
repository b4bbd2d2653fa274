"""AMQP 1.0 framing, performatives and SASL frames, without I/O (spec part 2 "Transport", part 5
"Security").

A connection starts with an 8-byte protocol header: ``AMQP 3 1 0 0`` opens the SASL layer,
``AMQP 0 1 0 0`` the AMQP layer (again after a SASL outcome). Then frames::

    size (uint32, the whole frame) | doff (uint8, header length in 4-byte words, >= 2)
    | type (0 AMQP, 1 SASL) | channel (uint16) | extended header | body

An AMQP frame's body is one performative (a described list) and, for a transfer, the payload
after it; an empty body is a heartbeat. :class:`FrameReader` is the sans-I/O reader in the h11
shape (``receive_data`` / ``next_event``, ``NEED_DATA``); :func:`encode_frame` writes one frame.

Performatives are small classes (:data:`PERFORMATIVES`, :data:`SASL_FRAMES`) whose attributes
are the spec's fields with ``-`` as ``_``; absent fields are ``None``. Fields have types so that
an ``int`` encodes as the uint / ushort / ulong the spec asks for. Decoding checks the list
shape and each field's type (an integer in its range, a source where a source goes...); the door
checks the semantics. Malformed input raises :class:`FrameError` (the door closes with its
``condition``, ``amqp:decode-error`` unless said otherwise).
"""
from __future__ import annotations

import struct
from typing import Any

from wire.amqp10 import AMQP10Error, Array, Described, Symbol, Typed, decode_value, encode_value

__all__ = ["HEADER_AMQP", "HEADER_SASL", "HEADER_091", "AMQP_FRAME", "SASL_FRAME", "NEED_DATA", "FrameError", "FrameReader", "Frame",
           "ProtocolHeader", "Heartbeat", "encode_frame", "encode_heartbeat", "PERFORMATIVES", "SASL_FRAMES",
           "Open", "Begin", "Attach", "Flow", "Transfer", "Disposition", "Detach", "End", "Close", "Error",
           "Source", "Target", "Accepted", "Rejected", "Released", "Modified", "Received", "SaslMechanisms",
           "SaslInit", "SaslChallenge", "SaslResponse", "SaslOutcome", "DECODE_ERROR", "FRAME_SIZE_TOO_SMALL",
           "described", "from_described", "decode_body", "decode_transfer", "encode_transfer", "encode_delivery"]

HEADER_AMQP = b"AMQP\x00\x01\x00\x00"
HEADER_SASL = b"AMQP\x03\x01\x00\x00"
HEADER_091 = b"AMQP\x00\x00\x09\x01"
AMQP_FRAME, SASL_FRAME = 0, 1
MIN_MAX_FRAME_SIZE = 512  # the spec's floor for max-frame-size

DECODE_ERROR = "amqp:decode-error"
FRAME_SIZE_TOO_SMALL = "amqp:frame-size-too-small"
_HEAD = struct.Struct(">IBBH")


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


class FrameError(ValueError):
    """The peer sent bytes that are not a well-formed frame; ``condition`` is the AMQP error symbol."""

    def __init__(self, text: str, condition: str = DECODE_ERROR):
        super().__init__(text)
        self.condition = condition


# --- field types --------------------------------------------------------------------------
# How an int or str of a field is encoded; decoding unwraps Typed scalars of those fields.
_CODES = {"uint": 0x70, "ushort": 0x60, "ubyte": 0x50, "ulong": 0x80, "millis": 0x70, "ts": 0x83}


def _enc_field(kind: str, v: Any) -> Any:
    if v is None:
        return None
    code = _CODES.get(kind)
    if code is not None:
        return v if type(v) is Typed else Typed(code, int(v))
    if kind == "sym":
        return v if type(v) is Symbol else Symbol(v)
    if kind == "syms":  # symbol or array of symbols: always sent as an array
        items = [v] if isinstance(v, str) else list(v)
        return Array(0xa3, [Symbol(x) for x in items])
    if kind == "bool":
        return bool(v)
    if isinstance(v, _Composite):
        return v.described()
    return v


# the range of each integer kind: a value outside it (or not an integer: a float, a decimal's
# octets) fails here as a decode error, not later in the door's arithmetic
_RANGES = {"uint": (0, 0xffffffff), "ushort": (0, 0xffff), "ubyte": (0, 0xff), "ulong": (0, (1 << 64) - 1),
           "millis": (0, 0xffffffff), "ts": (-(1 << 63), (1 << 63) - 1)}
_PLAIN = {"str": str, "sym": str, "bin": bytes, "map": dict}


def _int_field(kind: str, v: Any) -> int:
    lo, hi = _RANGES[kind]
    if type(v) is not int or not lo <= v <= hi:
        raise FrameError(f"a {kind} field holds {v if type(v) is int else type(v).__name__}")
    return v


def _dec_field(kind: str, v: Any) -> Any:
    if kind in _CODES:
        return _int_field(kind, v.value if type(v) is Typed else v)
    if kind == "bool":
        if type(v) is Typed:
            v = v.value
        if type(v) is not bool:
            raise FrameError(f"a boolean field holds {type(v).__name__}")
        return v
    plain = _PLAIN.get(kind)
    if plain is not None:
        if not isinstance(v, plain):
            raise FrameError(f"a {kind} field holds {type(v).__name__}")
        return v
    if kind == "syms":  # a symbol or an array of them
        if isinstance(v, str):
            return [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise FrameError("a symbols field holds something else than symbols")
        return v
    v = from_described(v)
    # the composites the door reads fields of: anything else in their place is malformed
    # (a target may also be another terminus, such as a transaction coordinator)
    wanted = _COMPOSITE_KINDS.get(kind)
    if wanted is not None and not (type(v) is wanted or (kind == "target" and type(v) is Described)):
        raise FrameError(f"a {kind} field holds {type(v).__name__}")
    return v


_new, _setattr = object.__new__, object.__setattr__


class _Composite:
    """A described list with named, typed fields (a performative, a terminus, an outcome...)."""
    CODE = 0
    NAME = ""
    FIELDS: tuple[tuple[str, str], ...] = ()
    __slots__ = ()

    def __init__(self, *args, **kwargs):
        names = [f for f, _ in self.FIELDS]
        for name in names:
            object.__setattr__(self, name, None)
        for name, v in zip(names, args):
            object.__setattr__(self, name, v)
        for name, v in kwargs.items():
            if name not in names:
                raise TypeError(f"{type(self).__name__} has no field {name}")
            object.__setattr__(self, name, v)

    def fields(self) -> list:
        out = [_enc_field(kind, getattr(self, name)) for name, kind in self.FIELDS]
        while out and out[-1] is None:  # trailing nulls are left off, as every client does
            out.pop()
        return out

    def described(self) -> Described:
        return Described(self.CODE, self.fields())

    @classmethod
    def from_list(cls, items: Any) -> "_Composite":
        if not isinstance(items, list):
            raise FrameError(f"{cls.NAME} is not a list")
        obj = _new(cls)  # every field set below: __init__'s defaults would be a second pass (per transfer)
        n = len(items)  # (fields past ours, from a later spec version, are ignored)
        for i, (name, kind) in enumerate(cls.FIELDS):
            v = items[i] if i < n else None
            if v is not None:
                v = _int_field(kind, v.value) if type(v) is Typed and kind in _CODES else _dec_field(kind, v)
            _setattr(obj, name, v)
        return obj

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, f) == getattr(other, f) for f, _ in self.FIELDS)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f, _ in self.FIELDS if getattr(self, f) is not None)
        return f"{type(self).__name__}({shown})"


def _composite(name: str, code: int, spec: str) -> type:
    fields = tuple(tuple(item.split(":")) for item in spec.split())
    cls_name = "".join(part.capitalize() for part in name.split("-"))
    return type(cls_name, (_Composite,), {"CODE": code, "NAME": name, "FIELDS": fields,
                                          "__slots__": tuple(f for f, _ in fields)})


Error = _composite("error", 0x1d, "condition:sym description:str info:map")
Open = _composite("open", 0x10, "container_id:str hostname:str max_frame_size:uint channel_max:ushort "
                  "idle_time_out:millis outgoing_locales:syms incoming_locales:syms offered_capabilities:syms "
                  "desired_capabilities:syms properties:map")
Begin = _composite("begin", 0x11, "remote_channel:ushort next_outgoing_id:uint incoming_window:uint "
                   "outgoing_window:uint handle_max:uint offered_capabilities:syms desired_capabilities:syms "
                   "properties:map")
Attach = _composite("attach", 0x12, "name:str handle:uint role:bool snd_settle_mode:ubyte rcv_settle_mode:ubyte "
                    "source:source target:target unsettled:map incomplete_unsettled:bool initial_delivery_count:uint "
                    "max_message_size:ulong offered_capabilities:syms desired_capabilities:syms properties:map")
Flow = _composite("flow", 0x13, "next_incoming_id:uint incoming_window:uint next_outgoing_id:uint "
                  "outgoing_window:uint handle:uint delivery_count:uint link_credit:uint available:uint "
                  "drain:bool echo:bool properties:map")
Transfer = _composite("transfer", 0x14, "handle:uint delivery_id:uint delivery_tag:bin message_format:uint "
                      "settled:bool more:bool rcv_settle_mode:ubyte state:* resume:bool aborted:bool "
                      "batchable:bool")
Disposition = _composite("disposition", 0x15, "role:bool first:uint last:uint settled:bool state:* batchable:bool")
Detach = _composite("detach", 0x16, "handle:uint closed:bool error:error")
End = _composite("end", 0x17, "error:error")
Close = _composite("close", 0x18, "error:error")
Received = _composite("received", 0x23, "section_number:uint section_offset:ulong")
Accepted = _composite("accepted", 0x24, "")
Rejected = _composite("rejected", 0x25, "error:error")
Released = _composite("released", 0x26, "")
Modified = _composite("modified", 0x27, "delivery_failed:bool undeliverable_here:bool message_annotations:map")
Source = _composite("source", 0x28, "address:str durable:uint expiry_policy:sym timeout:uint dynamic:bool "
                    "dynamic_node_properties:map distribution_mode:sym filter:map default_outcome:* outcomes:syms "
                    "capabilities:syms")
Target = _composite("target", 0x29, "address:str durable:uint expiry_policy:sym timeout:uint dynamic:bool "
                    "dynamic_node_properties:map capabilities:syms")
SaslMechanisms = _composite("sasl-mechanisms", 0x40, "sasl_server_mechanisms:syms")
SaslInit = _composite("sasl-init", 0x41, "mechanism:sym initial_response:bin hostname:str")
SaslChallenge = _composite("sasl-challenge", 0x42, "challenge:bin")
SaslResponse = _composite("sasl-response", 0x43, "response:bin")
SaslOutcome = _composite("sasl-outcome", 0x44, "code:ubyte additional_data:bin")

PERFORMATIVES = {c.CODE: c for c in (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)}
SASL_FRAMES = {c.CODE: c for c in (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)}
_NESTED = {c.CODE: c for c in (Error, Received, Accepted, Rejected, Released, Modified, Source, Target)}
_COMPOSITE_KINDS = {"source": Source, "target": Target, "error": Error}
_SYMBOLIC = {f"amqp:{c.NAME}:list": c for c in (*PERFORMATIVES.values(), *SASL_FRAMES.values(), *_NESTED.values())}


def from_described(v: Any) -> Any:
    """A described value whose descriptor names one of our composites, as that composite; else as is."""
    if type(v) is not Described:
        return v
    cls = _NESTED.get(v.descriptor) if type(v.descriptor) is int else _SYMBOLIC.get(v.descriptor)
    if cls is None:
        return v
    return cls.from_list(v.value)


def described(obj: Any) -> Any:
    return obj.described() if isinstance(obj, _Composite) else obj


# --- frames -------------------------------------------------------------------------------

class ProtocolHeader:
    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __repr__(self) -> str:
        return f"ProtocolHeader({self.data!r})"


class Heartbeat:
    """An empty AMQP frame: keeps the connection alive (idle-time-out)."""
    __slots__ = ("channel",)

    def __init__(self, channel: int):
        self.channel = channel


class Frame:
    """One AMQP or SASL frame: its channel, its performative, and (transfers) the payload after it."""
    __slots__ = ("type", "channel", "body", "payload")

    def __init__(self, type_: int, channel: int, body: Any, payload: bytes = b""):
        self.type = type_
        self.channel = channel
        self.body = body
        self.payload = payload

    def __repr__(self) -> str:
        return f"Frame({self.type}, {self.channel}, {self.body!r}, {len(self.payload)} payload bytes)"


class FrameReader:
    """Bytes in, protocol headers and frames out. ``expect_header`` is True at the start and set
    again by the door after a SASL outcome (the client then sends the AMQP header)."""

    def __init__(self, max_frame_size: int = MIN_MAX_FRAME_SIZE):
        self.max_frame_size = max_frame_size
        self.expect_header = True
        self._buf = b""
        self._pos = 0  # frames are read at this offset; the buffer is cut once per receive_data

    def receive_data(self, data: bytes) -> None:
        rest = self._buf[self._pos:] if self._pos else self._buf
        self._buf = rest + data if rest else bytes(data)
        self._pos = 0

    def next_event(self):
        buf, p = self._buf, self._pos
        left = len(buf) - p
        if self.expect_header:
            if left < 8:
                return NEED_DATA
            self._pos = p + 8
            self.expect_header = False
            return ProtocolHeader(buf[p:p + 8])
        if left < 8:
            return NEED_DATA
        size, doff, type_, channel = _HEAD.unpack_from(buf, p)
        if size > self.max_frame_size:
            raise FrameError(f"frame of {size} bytes is larger than the max-frame-size {self.max_frame_size}",
                             FRAME_SIZE_TOO_SMALL)
        if doff < 2 or doff * 4 > size:
            raise FrameError(f"frame data offset {doff} does not fit its size {size}", "amqp:connection:framing-error")
        if type_ not in (AMQP_FRAME, SASL_FRAME):
            raise FrameError(f"unknown frame type {type_}", "amqp:connection:framing-error")
        if left < size:
            return NEED_DATA
        self._pos = p + size
        start = p + doff * 4
        if type_ == AMQP_FRAME and buf.startswith(b"\x00\x53\x14", start, p + size):
            try:  # the one performative per message: no value tree (as decode_transfer)
                fast = _transfer_fields(buf, start, p + size)
            except (IndexError, struct.error):
                fast = None
            if fast is not None:
                return Frame(AMQP_FRAME, channel, fast[0], fast[1])
        data = buf[start:p + size]
        if not data:
            return Heartbeat(channel)
        return Frame(type_, channel, *decode_body(type_, data))


def decode_body(type_: int, data: bytes) -> tuple[Any, bytes]:
    """(performative, payload) of a frame body."""
    try:
        value, end = decode_value(data, 0)
    except AMQP10Error as exc:
        raise FrameError(f"malformed frame body: {exc}") from None
    if type(value) is not Described:
        raise FrameError("a frame body must be a described list")
    table = PERFORMATIVES if type_ == AMQP_FRAME else SASL_FRAMES
    d = value.descriptor
    cls = table.get(d) if type(d) is int else _SYMBOLIC.get(d)
    if cls is None or cls.CODE not in table:
        raise FrameError(f"unknown {'performative' if type_ == AMQP_FRAME else 'SASL frame'} {d!r}")
    body = cls.from_list(value.value)
    if end != len(data) and cls is not Transfer:
        raise FrameError(f"{cls.NAME} frame has {len(data) - end} bytes after its performative")
    return body, data[end:]


# --- the transfer fast path -------------------------------------------------------------------
# A transfer is a described list in a fixed field order. Its fields are read here straight from
# the frame, for the constructors clients use; any other constructor (a state, a 0x56 boolean, a
# field past batchable...) returns None and the frame takes the generic path, so both paths give
# equal results on any bytes (tests/test_amqp10_frames.py checks it on random transfers).
_UINT_FIELD, _BIN_FIELD, _BOOL_FIELD, _UBYTE_FIELD, _NULL_FIELD = range(5)
_TRANSFER_KINDS = (_UINT_FIELD, _UINT_FIELD, _BIN_FIELD, _UINT_FIELD, _BOOL_FIELD, _BOOL_FIELD, _UBYTE_FIELD,
                   _NULL_FIELD, _BOOL_FIELD, _BOOL_FIELD, _BOOL_FIELD)
_U32 = struct.Struct(">I")
_U32_AT = _U32.unpack_from


def decode_transfer(buf: bytes, start: int, stop: int) -> tuple[Any, bytes] | None:
    """(Transfer, payload) of the frame body buf[start:stop] (which starts ``00 53 14``), or None
    when it uses a constructor this path does not read (the caller then decodes it generically)."""
    try:
        return _transfer_fields(buf, start, stop)
    except (IndexError, struct.error):  # a field runs past the buffer: the generic path says how
        return None


def _transfer_fields(buf: bytes, start: int, stop: int) -> tuple[Any, bytes] | None:
    code = buf[start + 3] if start + 3 < stop else -1
    if code == 0xc0 and start + 6 <= stop:
        p, end, count = start + 6, start + 5 + buf[start + 4], buf[start + 5]
    elif code == 0xd0 and start + 12 <= stop:
        p, count = start + 12, _U32_AT(buf, start + 8)[0]
        end = start + 8 + _U32_AT(buf, start + 4)[0]
    else:
        return None
    if count > 11 or end > stop:
        return None
    # The six fields clients write (handle, delivery-id, delivery-tag, message-format, settled,
    # more) are read in line, once per message; fields past them by the loop over their kinds.
    # Each field takes at least one byte, so a field read past ``end`` leaves p > end and the
    # check at the bottom refuses the frame (reads past the buffer raise IndexError).
    handle = delivery_id = tag = fmt = settled = more = None
    if count:
        c = buf[p]
        if c == 0x52:
            handle, p = buf[p + 1], p + 2
        elif c == 0x43:
            handle, p = 0, p + 1
        elif c == 0x70:
            handle, p = _U32_AT(buf, p + 1)[0], p + 5
        elif c == 0x40:
            p += 1
        else:
            return None
    if count > 1:
        c = buf[p]
        if c == 0x70:
            delivery_id, p = _U32_AT(buf, p + 1)[0], p + 5
        elif c == 0x52:
            delivery_id, p = buf[p + 1], p + 2
        elif c == 0x43:
            delivery_id, p = 0, p + 1
        elif c == 0x40:
            p += 1
        else:
            return None
    if count > 2:
        c = buf[p]
        if c == 0xa0:
            q = p + 2 + buf[p + 1]
            tag, p = bytes(buf[p + 2:q]), q
        elif c == 0x40:
            p += 1
        else:
            return None
    if count > 3:
        c = buf[p]
        if c == 0x43:
            fmt, p = 0, p + 1
        elif c == 0x52:
            fmt, p = buf[p + 1], p + 2
        elif c == 0x70:
            fmt, p = _U32_AT(buf, p + 1)[0], p + 5
        elif c == 0x40:
            p += 1
        else:
            return None
    if count > 4:
        c = buf[p]
        if c == 0x42 or c == 0x41:
            settled = c == 0x41
        elif c != 0x40:
            return None
        p += 1
    if count > 5:
        c = buf[p]
        if c == 0x42 or c == 0x41:
            more = c == 0x41
        elif c != 0x40:
            return None
        p += 1
    t = _new(Transfer)  # (Transfer's slots are plain attributes: stored directly)
    t.handle, t.delivery_id, t.delivery_tag, t.message_format, t.settled, t.more = \
        handle, delivery_id, tag, fmt, settled, more
    t.rcv_settle_mode = t.state = t.resume = t.aborted = t.batchable = None
    if count > 6:
        values = [None] * 5
        kinds = _TRANSFER_KINDS
        for i in range(6, count):
            c = buf[p]
            if c == 0x40:
                p += 1
                continue
            kind = kinds[i]
            if kind == _BOOL_FIELD and (c == 0x41 or c == 0x42):
                values[i - 6], p = c == 0x41, p + 1
            elif kind == _UBYTE_FIELD and c == 0x50:
                values[i - 6], p = buf[p + 1], p + 2
            else:
                return None
        t.rcv_settle_mode, t.state, t.resume, t.aborted, t.batchable = values
    if p != end:
        return None
    return t, bytes(buf[end:stop])


def encode_frame(channel: int, body: Any, payload: bytes = b"", type_: int = AMQP_FRAME) -> bytes:
    """One frame: the performative (a composite) and the payload after it."""
    encoded = encode_value(described(body))
    return _HEAD.pack(8 + len(encoded) + len(payload), 2, type_, channel) + encoded + payload


def _uint_bytes(v: int) -> bytes:
    return b"\x43" if v == 0 else (b"\x52" + bytes((v,)) if v < 256 else b"\x70" + v.to_bytes(4, "big"))


def encode_transfer(channel: int, handle: int, delivery_id: int, tag: bytes, settled: bool, more: bool,
                    payload: bytes) -> bytes:
    """The first transfer frame of a delivery (message-format 0), the bytes :func:`encode_frame`
    makes of ``Transfer(handle, delivery_id, tag, 0, settled, more)``, without the generic encoder
    (one per delivered message)."""
    if len(tag) > 32:
        return encode_frame(channel, Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag,
                                              message_format=0, settled=settled, more=more), payload)
    fields = b"".join((_uint_bytes(handle), _uint_bytes(delivery_id), b"\xa0", bytes((len(tag),)), tag,
                       b"\x43\x41" if settled else b"\x43\x42", b"\x41" if more else b"\x42"))
    size = 14 + len(fields) + len(payload)  # frame header 8, 00 53 14 c0 size count 6
    return b"".join((_HEAD.pack(size, 2, AMQP_FRAME, channel), b"\x00\x53\x14\xc0",
                     bytes((len(fields) + 1, 6)), fields, payload))


_DELIVERY_HEADS: dict[tuple[int, bool], tuple[bytes, bytes]] = {}  # (handle, settled) -> constant parts


def encode_delivery(channel: int, handle: int, delivery_id: int, settled: bool, payload: bytes) -> bytes:
    """The transfer frame of a delivery in one frame whose delivery-tag is its delivery-id as 4
    bytes: ``Transfer(handle, delivery_id, tag, 0, settled, more=False)`` with the delivery-id
    always a 4-byte uint, so all but the id and the payload is the same for a link and made once
    (one per delivered message)."""
    parts = _DELIVERY_HEADS.get((handle, settled))
    if parts is None:
        h = _uint_bytes(handle)  # list: count, handle, delivery-id (5), tag (6), format, settled, more
        parts = (b"\x00\x53\x14\xc0" + bytes((len(h) + 15, 6)) + h + b"\x70",
                 b"\x43\x41\x42" if settled else b"\x43\x42\x42")
        if len(_DELIVERY_HEADS) < 1024:
            _DELIVERY_HEADS[(handle, settled)] = parts
    tag = _U32.pack(delivery_id)
    return b"".join((_HEAD.pack(len(parts[0]) + 21 + len(payload), 2, AMQP_FRAME, channel), parts[0], tag,
                     b"\xa0\x04", tag, parts[1], payload))


def encode_heartbeat() -> bytes:
    return _HEAD.pack(8, 2, AMQP_FRAME, 0)


def transfer_overhead(tag: bytes) -> int:
    """Bytes a transfer frame spends besides its payload (frame header and performative) at most:
    used to cut a message into frames under max-frame-size."""
    return 8 + 64 + len(tag)
