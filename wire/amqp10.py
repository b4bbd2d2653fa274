"""AMQP 1.0 type system and message format, without I/O (spec part 1 "Types", part 3 "Messaging").

A message is described sections in this order, each optional: header (0x70), delivery-annotations
(0x71), message-annotations (0x72), properties (0x73), application-properties (0x74), a body of
data (0x75) or amqp-sequence (0x76) sections or one amqp-value (0x77), footer (0x78).
:func:`decode_message` refuses anything else (order, mixed bodies, trailing bytes): AMQP10Error.

Values decode to small Python representations that keep the AMQP type where plain Python would
lose it, so that a decoded message re-encodes with the same types:

=================================== =========================================================
AMQP type                           Python
=================================== =========================================================
null, boolean (true / false)        ``None``, ``bool``
boolean in its one-octet form 0x56  ``Typed(0x56, bool)`` (rstream writes it: kept, so its
                                    messages re-encode byte for byte)
ubyte ushort uint ulong             ``Typed(0x50 / 0x60 / 0x70 / 0x80, int)``; signed:
byte short int long                 ``Typed(0x51 / 0x61 / 0x71 / 0x81, int)``
float, double                       ``Typed(0x72, float)``, ``float``
decimal32 / 64 / 128, char          ``Typed(0x74 / 0x84 / 0x94, raw bytes)``, ``Typed(0x73, str)``
timestamp, uuid                     ``Typed(0x83, milliseconds)``, ``uuid.UUID``
binary, string, symbol              ``bytes``, ``str``, :class:`Symbol` (a ``str`` subclass)
list, map                           ``list``, ``dict`` (map keys must be hashable: scalars)
array                               :class:`Array`: plain items (``int``, ``str``...) + type code
described value                     :class:`Described` (a ulong descriptor as a plain ``int``)
=================================== =========================================================

Encoding picks the compact forms (uint0/smalluint, ulong0/smallulong, smallint, smalllong, list0,
the 8-bit-size variants when the size fits). A plain ``int`` encodes as an int, or a long beyond
32 bits (as the Python stream clients do). Symbols may hold UTF-8 (the spec says ASCII; RabbitMQ
and the clients pass it through).
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AMQP10Error", "Symbol", "Typed", "Described", "Array", "Message", "HEADER_FIELDS",
           "PROPERTIES_FIELDS", "bare_message", "data_section_body", "data_section_header", "data_section_start",
           "decode_message", "decode_value", "encode_message", "encode_value", "value_end"]

HEADER_FIELDS = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTIES_FIELDS = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                     "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
                     "reply_to_group_id")

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = range(0x70, 0x75)
DATA, SEQUENCE, VALUE, FOOTER = range(0x75, 0x79)
_SYMBOLIC = {f"amqp:{name}": code for code, name in enumerate((  # the sections' symbolic descriptors
    "header:list delivery-annotations:map message-annotations:map properties:list application-properties:map "
    "data:binary amqp-sequence:list amqp-value:* footer:map").split(), HEADER)}
_BODY_KIND = {DATA: "data", SEQUENCE: "sequence", VALUE: "value"}
_SECTIONS = {HEADER: ("header", list), DELIVERY_ANNOTATIONS: ("delivery_annotations", dict),  # Message attribute,
             MESSAGE_ANNOTATIONS: ("message_annotations", dict), PROPERTIES: ("properties", list),  # value type
             APPLICATION_PROPERTIES: ("application_properties", dict), DATA: ("body", bytes),
             SEQUENCE: ("body", list), VALUE: ("body", None), FOOTER: ("footer", dict)}
_MAX_DEPTH = 64  # nested compounds; deeper input is refused rather than overflowing the stack
_MAX_EMPTY_ITEMS = 1 << 16  # zero-width array elements cost no input bytes: bound their count


class AMQP10Error(ValueError):
    """The bytes are not a well-formed AMQP 1.0 message (or a value cannot be encoded)."""


class Symbol(str):
    """An AMQP symbol (as opposed to a string)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


@dataclass(frozen=True, slots=True)
class Typed:
    """A value of the AMQP type ``code`` (the type's full-width constructor, e.g. 0x70 uint)."""
    code: int
    value: Any


@dataclass(frozen=True, slots=True)
class Described:
    descriptor: Any
    value: Any


class Array(list):
    """An AMQP array: items of one type ``code`` (canonical: 0x70 for uint whatever the input
    used, 0xa1 for strings...), optionally all described by ``descriptor``."""

    def __init__(self, code: int, items=(), descriptor: Any = None):
        super().__init__(items)
        self.code = code
        self.descriptor = descriptor

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Array) and self.code == other.code and self.descriptor == other.descriptor
                and list.__eq__(self, other))  # (defining __eq__ leaves Array unhashable, as a list)


@dataclass
class Message:
    """The sections of a message; ``None`` for an absent section. ``header`` and ``properties``
    are their field lists as sent (see HEADER_FIELDS, PROPERTIES_FIELDS; trailing fields may be
    missing). ``body_kind`` is "data" (``body``: one bytes per section), "sequence" (one list
    per section), "value" (``body == [value]``), or None (no body section)."""
    header: list | None = None
    delivery_annotations: dict | None = None
    message_annotations: dict | None = None
    properties: list | None = None
    application_properties: dict | None = None
    body_kind: str | None = None
    body: list = field(default_factory=list)
    footer: dict | None = None


# --- constructors --------------------------------------------------------------------------

_S = struct.Struct
_U8, _U32, _SIZES32 = _S(">B"), _S(">I"), _S(">II")
# fixed-width constructor -> (struct, canonical type code)
_FIXED = {
    0x56: (_U8, 0x56), 0x50: (_U8, 0x50), 0x60: (_S(">H"), 0x60), 0x70: (_U32, 0x70), 0x52: (_U8, 0x70),
    0x80: (_S(">Q"), 0x80), 0x53: (_U8, 0x80), 0x51: (_S(">b"), 0x51), 0x61: (_S(">h"), 0x61),
    0x71: (_S(">i"), 0x71), 0x54: (_S(">b"), 0x71), 0x81: (_S(">q"), 0x81), 0x55: (_S(">b"), 0x81),
    0x72: (_S(">f"), 0x72), 0x82: (_S(">d"), 0x82), 0x83: (_S(">q"), 0x83), 0x73: (_U32, 0x73),
}
_ZERO = {0x40: (None, 0x40), 0x41: (True, 0x56), 0x42: (False, 0x56), 0x43: (0, 0x70), 0x44: (0, 0x80),
         0x45: (None, 0xc0)}
_RAW = {0x74: 4, 0x84: 8, 0x94: 16, 0x98: 16}  # decimals (kept as octets) and uuid
# variable-width and compound constructors -> (width of their size field, canonical 8-bit form)
_SIZED = {c + wide: (4 if wide else 1, c) for c in (0xa0, 0xa1, 0xa3, 0xc0, 0xc1, 0xe0) for wide in (0, 0x10)}
_CANONICAL = {code: entry[1] for table in (_FIXED, _ZERO, _SIZED) for code, entry in table.items()}
# constructor -> the Typed code its value gets (the types without a Python type of their own)
_WRAP = {code: c for code, c in (_CANONICAL | {0x74: 0x74, 0x84: 0x84, 0x94: 0x94}).items()
         if c in (0x56, 0x50, 0x60, 0x70, 0x80, 0x51, 0x61, 0x71, 0x81, 0x72, 0x73, 0x83, 0x74, 0x84, 0x94)
         and code not in (0x41, 0x42)}
_SHORT = frozenset((0xa0, 0xa1, 0xa3))
_new, _set_code, _set_value = object.__new__, Typed.code.__set__, Typed.value.__set__  # type: ignore[attr-defined]
_WIDTH = {c: s.size for c, (s, _) in _FIXED.items()} | dict.fromkeys(_ZERO, 0) | _RAW  # fixed-width constructors


# --- decoding -------------------------------------------------------------------------------

_PAST = "a value runs past its container"


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise AMQP10Error(what)


def _body(code: int, d: bytes, p: int, end: int, depth: int) -> tuple[Any, int]:
    """The value after constructor ``code`` at d[p:], as a plain Python value; its end."""
    fixed = _FIXED.get(code)
    if fixed is not None:
        q = p + fixed[0].size
        _check(q <= end, _PAST)
        (v,) = fixed[0].unpack_from(d, p)
        if code == 0x56:
            _check(v <= 1, "boolean octet other than 0 or 1")
            v = v == 1
        elif code == 0x73:
            _check(v <= 0x10FFFF, "char beyond U+10FFFF")
            v = chr(v)
        return v, q
    if code in _ZERO:
        return ([] if code == 0x45 else _ZERO[code][0]), p
    if code in _RAW:
        q = p + _RAW[code]
        _check(q <= end, _PAST)
        return (uuid.UUID(bytes=d[p:q]) if code == 0x98 else d[p:q]), q
    _check(code in _SIZED, "unknown constructor")
    width, kind = _SIZED[code]
    _check(p + (2 * width if kind >= 0xc0 else width) <= end, _PAST)  # the size (and a compound's count)
    size = d[p] if width == 1 else _U32.unpack_from(d, p)[0]
    p += width
    q = p + size
    _check(q <= end, _PAST)
    if kind < 0xc0:  # binary, string, symbol
        return _variable(kind, d[p:q]), q
    _check(depth < _MAX_DEPTH, "compound values nested too deep")
    _check(size >= width, "compound value too small for its count")
    count = d[p] if width == 1 else _U32.unpack_from(d, p)[0]
    result, p = _compound_body(kind, count, d, p + width, q, depth + 1)
    _check(p == q, "compound value size does not match its items")
    return result, q


def _variable(kind: int, raw: bytes) -> bytes | str:
    if kind == 0xa0:
        return raw
    try:
        return Symbol(raw.decode()) if kind == 0xa3 else raw.decode()
    except UnicodeDecodeError:
        raise AMQP10Error("string or symbol that is not UTF-8") from None


def _compound_body(kind: int, count: int, d: bytes, p: int, q: int, depth: int) -> tuple[Any, int]:
    items: list = []
    if kind == 0xc0:
        for _ in range(count):
            v, p = _value(d, p, q, depth)
            items.append(v)
        return items, p
    if kind == 0xc1:
        _check(count % 2 == 0, "map with an odd number of items")
        result = {}
        for _ in range(count // 2):
            k, p = _value(d, p, q, depth)
            v, p = _value(d, p, q, depth)
            try:
                result[k] = v
            except TypeError:
                raise AMQP10Error("map key that is a compound value") from None
        return result, p
    _check(p < q, "array without an element constructor")
    element, descriptor = d[p], None
    if element == 0x00:
        descriptor, p = _value(d, p + 1, q, depth)
        descriptor = _descriptor(descriptor)
        _check(p < q and d[p] != 0x00, "array element constructor missing or nested descriptor")
        element = d[p]
    _check(element not in _ZERO or count <= _MAX_EMPTY_ITEMS, "array of too many zero-width elements")
    p += 1
    for _ in range(count):
        v, p = _body(element, d, p, q, depth)
        items.append(v)
    return Array(_CANONICAL.get(element, element), items, descriptor), p


def _descriptor(v: Any) -> Any:
    """A descriptor as its ulong (an ``int``) or Symbol; the spec allows no other type, and a list or
    map here would be unhashable where descriptors are looked up."""
    v = v.value if type(v) is Typed and v.code == 0x80 else v
    _check(type(v) is int or type(v) is Symbol, "a descriptor must be a symbol or a ulong")
    return v


def _value(d: bytes, p: int, end: int, depth: int) -> tuple[Any, int]:
    """The value (constructor included) at d[p:], never reading at or past ``end``; its end."""
    if p >= end or depth > _MAX_DEPTH:
        raise AMQP10Error("value missing: the container ends" if p >= end else f"nested more than {_MAX_DEPTH} deep")
    code = d[p]
    if code == 0x40:
        return None, p + 1
    if code in _SHORT:  # str8, sym8, vbin8: most values of a message, so decoded here directly
        q = p + 2 + (d[p + 1] if p + 1 < end else end)
        _check(q <= end, _PAST)
        return _variable(code, d[p + 2:q]), q
    if code == 0x00:
        descriptor, p = _value(d, p + 1, end, depth + 1)
        v, p = _value(d, p, end, depth + 1)
        return Described(_descriptor(descriptor), v), p
    v, p = _body(code, d, p + 1, end, depth)
    canonical = _WRAP.get(code)
    if canonical is not None:  # bypass the frozen dataclass's __init__: this is per value
        t = _new(Typed)
        _set_code(t, canonical)
        _set_value(t, v)
        return t, p
    return v, p


def decode_value(data: bytes, p: int = 0, end: int | None = None) -> tuple[Any, int]:
    """The one value at data[p:end] (described values kept as :class:`Described`) and its end;
    AMQP10Error for anything malformed."""
    try:
        return _value(data, p, len(data) if end is None else end, 0)
    except AMQP10Error:
        raise
    except (IndexError, struct.error, ValueError, RecursionError) as e:
        raise AMQP10Error(f"malformed: {e}") from None


def value_end(data: bytes, p: int = 0) -> int:
    """End of the encoded value (descriptors included) that starts at data[p], from its size
    fields only: cheap, and it checks nothing inside compound values."""
    end = len(data)
    try:
        while data[p] == 0x00:  # a descriptor, then the described value
            p = value_end(data, p + 1)
        code = data[p]
        if code in _SIZED:
            width = _SIZED[code][0]
            q = p + 1 + width + (data[p + 1] if width == 1 else _U32.unpack_from(data, p + 1)[0])
        else:
            q = p + 1 + _WIDTH[code]
    except (IndexError, KeyError, struct.error, RecursionError):
        raise AMQP10Error("value runs past the end") from None
    _check(q <= end, "value runs past the end")
    return q


def decode_message(data: bytes, any_order: bool = False) -> Message:
    """The sections of an AMQP 1.0 message; AMQP10Error if ``data`` is not exactly one.
    ``any_order`` lets sections come in any order (each at most once; one kind of body)."""
    d = data if type(data) is bytes else bytes(data)
    end = len(d)
    _check(end > 0, "no sections")
    msg = Message()
    last = p = 0
    try:
        while p < end:
            _check(d[p] == 0x00, "a section must be a described value")
            descriptor, p = _value(d, p + 1, end, 1)
            descriptor = _descriptor(descriptor)
            code = _SYMBOLIC.get(descriptor) if type(descriptor) is Symbol else descriptor
            _check(type(code) is int and HEADER <= code <= FOOTER, "unknown section descriptor")
            value, p = _value(d, p, end, 1)
            kind = _BODY_KIND.get(code)
            _check((code > last or (code == last and code in (DATA, SEQUENCE)) or any_order)
                   and (not kind or msg.body_kind in (None, kind)), "sections out of order")
            last = code
            attr, expected = _SECTIONS[code]
            _check(expected is None or type(value) is expected, "a section of the wrong type")
            if kind:
                msg.body_kind = kind
                msg.body.append(value)
            else:
                setattr(msg, attr, value)
    except AMQP10Error:
        raise
    except (IndexError, struct.error, ValueError, RecursionError) as e:
        raise AMQP10Error(f"malformed: {e}") from None
    return msg


# --- encoding -------------------------------------------------------------------------------

def _sized(code8: int, payload: bytes) -> bytes:
    n = len(payload)
    return bytes((code8, n)) + payload if n < 256 else bytes((code8 + 0x10,)) + _U32.pack(n) + payload


def _frame(count: int, inner: bytes, wide: bool) -> bytes:
    """Size and count fields (8- or 32-bit) of a compound, then its items."""
    return (_SIZES32.pack(len(inner) + 4, count) if wide else bytes((len(inner) + 1, count))) + inner


def _fits8(count: int, inner: bytes) -> bool:
    return count < 256 and len(inner) < 255


def _compound(v: Any) -> tuple[int, int, bytes]:
    """(8-bit constructor, count, encoded items) of a list, map or Array."""
    if isinstance(v, Array):
        return 0xe0, len(v), _array_items(v)
    if isinstance(v, dict):
        return 0xc1, 2 * len(v), b"".join(_enc(x) for kv in v.items() for x in kv)
    return 0xc0, len(v), b"".join(map(_enc, v))


def _array_items(a: Array) -> bytes:
    code = a.code
    head = b"" if a.descriptor is None else b"\x00" + _enc(_ulong(a.descriptor))
    fixed = _FIXED.get(code)
    if code == 0x40:
        _check(all(x is None for x in a), "array of nulls with a non-null item")
        return head + b"\x40"
    if fixed is not None and fixed[1] == code:
        pack = fixed[0].pack
        return head + bytes((code,)) + b"".join(pack(ord(x) if code == 0x73 else x) for x in a)
    if code in _RAW:
        raws = [x.bytes if code == 0x98 else bytes(x) for x in a]
        _check(all(len(r) == _RAW[code] for r in raws), f"array item of the wrong size for type {code:#04x}")
        return head + bytes((code,)) + b"".join(raws)
    if code in (0xa0, 0xa1, 0xa3):
        raws = [x.encode() if isinstance(x, str) else bytes(x) for x in a]
        wide = any(len(r) > 255 for r in raws)
        return head + bytes((code + (0x10 if wide else 0),)) + b"".join(
            (_U32.pack(len(r)) if wide else bytes((len(r),))) + r for r in raws)
    if code in (0xc0, 0xc1, 0xe0):
        parts = [_compound(x) for x in a]
        _check(all(kind == code for kind, _, _ in parts), f"array item of another type than {code:#04x}")
        wide = not all(_fits8(n, inner) for _, n, inner in parts)
        return head + bytes((code + (0x10 if wide else 0),)) + b"".join(_frame(n, i, wide) for _, n, i in parts)
    raise AMQP10Error(f"unknown array element type {code:#04x}")


def _ulong(v: Any) -> Any:
    return Typed(0x80, v) if type(v) is int else v


def _typed(code: int, x: Any) -> bytes:
    if code == 0x56:
        return b"\x56\x01" if x else b"\x56\x00"
    if code in (0x70, 0x80):  # uint0 / ulong0, smalluint / smallulong
        if x == 0:
            return b"\x43" if code == 0x70 else b"\x44"
        if 0 < x < 256:
            return bytes((0x52 if code == 0x70 else 0x53, x))
    elif code in (0x71, 0x81) and -128 <= x < 128:  # smallint / smalllong
        return bytes((0x54 if code == 0x71 else 0x55, x & 0xFF))
    if code in _RAW:
        _check(len(x) == _RAW[code], f"decimal of {len(x)} octets for type {code:#04x}")
        return bytes((code,)) + bytes(x)
    fixed = _FIXED.get(code)
    _check(fixed is not None and fixed[1] == code, f"unknown type code {code:#04x}")
    return bytes((code,)) + fixed[0].pack(ord(x) if code == 0x73 else x)


def _enc(v: Any) -> bytes:
    if v is None:
        return b"\x40"
    t = type(v)
    if isinstance(v, str):  # the common types first: this runs per value
        return _sized(0xa3 if t is Symbol else 0xa1, v.encode())
    if t is Typed:
        return _typed(v.code, v.value)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _sized(0xa0, bytes(v))
    if t is bool:
        return b"\x41" if v else b"\x42"
    if t is int:
        return _typed(0x71 if -(1 << 31) <= v < (1 << 31) else 0x81 if -(1 << 63) <= v < (1 << 63) else 0x80, v)
    if t is float:
        return b"\x82" + _FIXED[0x82][0].pack(v)
    if t is uuid.UUID:
        return b"\x98" + v.bytes
    if t is Described:
        return b"\x00" + _enc(_ulong(v.descriptor)) + _enc(v.value)
    if isinstance(v, (list, dict)):
        code, count, inner = _compound(v)
        if code == 0xc0 and not count:
            return b"\x45"
        wide = not _fits8(count, inner)
        return bytes((code + (0x10 if wide else 0),)) + _frame(count, inner, wide)
    raise AMQP10Error(f"cannot encode a {t.__name__} as an AMQP value")


def encode_value(v: Any) -> bytes:
    """The encoding of one value (constructor included), in its compact form."""
    return _guarded(_enc, v)


def _guarded(encode, v: Any) -> bytes:
    try:
        return encode(v)
    except AMQP10Error:
        raise
    except (struct.error, TypeError, AttributeError, ValueError) as e:  # a value its type cannot hold
        raise AMQP10Error(f"cannot encode: {e}") from None


def _section(code: int, value: Any) -> bytes:
    return bytes((0x00, 0x53, code)) + _enc(value)


def encode_message(msg: Message) -> bytes:
    """The bytes of a message's sections, in spec order, compactly encoded."""
    return _guarded(_encode_message, msg)


def _encode_message(msg: Message) -> bytes:
    out = []
    for code in range(HEADER, DATA):
        attr, kind = _SECTIONS[code]
        value = getattr(msg, attr)
        if value is not None:
            out.append(_section(code, kind(value)))
    if msg.body_kind in ("data", "sequence"):
        kind = bytes if msg.body_kind == "data" else list
        out += (_section(DATA if kind is bytes else SEQUENCE, kind(b)) for b in msg.body)
    elif msg.body_kind == "value":
        _check(len(msg.body) == 1, "an amqp-value body is exactly one value")
        out.append(_section(VALUE, msg.body[0]))
    else:
        _check(msg.body_kind is None and not msg.body, f"unknown body kind {msg.body_kind!r}")
    if msg.footer is not None:
        out.append(_section(FOOTER, dict(msg.footer)))
    return b"".join(out)


# --- where a message's data section is, from its bytes (the AMQP 1.0 door's fast path) -------

def bare_message(data: bytes) -> bytes:
    """The bare message: ``data`` without its leading header and annotation sections."""
    p = 0
    try:
        while data[p:p + 2] == b"\x00\x53" and data[p + 2] in (0x70, 0x71, 0x72):
            p = value_end(data, p)
    except (AMQP10Error, IndexError):
        return data
    return data[p:]


_SMALL_SIZED = frozenset((0xa0, 0xa1, 0xa3, 0xc0, 0xc1))  # size in one octet after the constructor
_WIDE_SIZED = frozenset((0xb0, 0xb1, 0xb3, 0xd0, 0xd1))  # size in four


def data_section_start(data: bytes) -> int:
    """Offset of the message's only data section if it is the last section, else -1."""
    p, end = 0, len(data)
    try:
        while p < end:
            if data.startswith(b"\x00\x53\x75", p):  # its end from its size field: the last section?
                c = data[p + 3] if p + 4 < end else -1
                if c == 0xa0:
                    return p if p + 5 + data[p + 4] == end else -1
                return p if c == 0xb0 and p + 8 <= end and p + 8 + _U32.unpack_from(data, p + 4)[0] == end else -1
            # a section with a small-ulong descriptor and a sized value: skipped from its size
            # (once per published message); any other shape is measured by value_end
            c = data[p + 3] if data[p:p + 2] == b"\x00\x53" and p + 4 < end else -1
            if c in _SMALL_SIZED:
                p += 5 + data[p + 4]
            elif c in _WIDE_SIZED and p + 8 <= end:
                p += 8 + _U32.unpack_from(data, p + 4)[0]
            else:
                p = value_end(data, p)
            if p > end:
                return -1
    except AMQP10Error:
        pass
    return -1


def data_section_body(data: bytes, p: int) -> tuple[bytes, bool]:
    """The data section's bytes, and whether its length was encoded as we encode it."""
    if data[p + 3] == 0xa0:
        return data[p + 5:], True
    body = data[p + 8:]
    return body, len(body) > 255


_SHORT_DATA_HEADERS = tuple(b"\x00\x53\x75\xa0" + bytes((n,)) for n in range(256))  # (one per delivery)


def data_section_header(n: int) -> bytes:
    return _SHORT_DATA_HEADERS[n] if n < 256 else b"\x00\x53\x75\xb0" + _U32.pack(n)
