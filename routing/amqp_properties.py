"""The property section of an AMQP Basic content header, and field tables: layout, parsing,
building.

Pure functions of bytes, shared by :mod:`routing.mapping` (a message as a Kafka record and
back, with :mod:`routing.kafka_origin` for records Kafka clients produced) and
:mod:`routing.message_fields` (reading one property of a stored message): the flag
words and property order, validation of a section (:func:`split_section`), the field-table
value types as RabbitMQ and pamqp read them, and the builders that return a new section
(:func:`with_headers`, :func:`with_entry`, :func:`dead_lettered` with RabbitMQ's ``x-death``
bookkeeping, :func:`encode_table`).
"""
from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["encode_table", "with_headers", "with_entry", "dead_lettered", "reply_to", "with_reply_to"]

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_FLOAT = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")
_LEN1 = tuple(bytes((i,)) for i in range(256))  # n -> bytes((n,)): a constant table, not a cache

_STR, _TABLE, _OCTET, _TS = range(4)

# (flag bit, record header, kind), in wire order
_PROPERTIES = (
    (0x8000, "amqp.content-type", _STR),
    (0x4000, "amqp.content-encoding", _STR),
    (0x2000, "amqp.headers", _TABLE),
    (0x1000, "amqp.delivery-mode", _OCTET),
    (0x0800, "amqp.priority", _OCTET),
    (0x0400, "amqp.correlation-id", _STR),
    (0x0200, "amqp.reply-to", _STR),
    (0x0100, "amqp.expiration", _STR),
    (0x0080, "amqp.message-id", _STR),
    (0x0040, "amqp.timestamp", _TS),
    (0x0020, "amqp.type", _STR),
    (0x0010, "amqp.user-id", _STR),
    (0x0008, "amqp.app-id", _STR),
    (0x0004, "amqp.cluster-id", _STR),
)
_HEADERS_INDEX = 2
_REPLY_TO_INDEX = 6
_DELIVERY_MODE_INDEX, _PRIORITY_INDEX, _EXPIRATION_INDEX, _MESSAGE_ID_INDEX, _TIMESTAMP_INDEX = 3, 4, 7, 8, 9
# the prefix of the record headers that carry AMQP properties; a record with none is Kafka-origin
_RESERVED = "amqp."


_MAX_FLAG_WORDS = 8  # as pamqp (the codec refuses more before we see them)
_MAX_DEPTH = 200  # nested tables/arrays; deeper is refused rather than overflowing the stack

# field value types (RabbitMQ's set, as pamqp decodes them)
_T_S, _T_x, _T_F, _T_A, _T_V = ord("S"), ord("x"), ord("F"), ord("A"), ord("V")
_T_t, _T_f, _T_d, _T_D, _T_T = (ord(c) for c in "tfdDT")
_WIDTH = {ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4, ord("i"): 4,
          ord("l"): 8, ord("L"): 8, ord("f"): 4, ord("d"): 8, ord("D"): 5, ord("T"): 8, ord("V"): 0}
_VARIABLE = frozenset((_T_S, _T_x, _T_F, _T_A))
# integer types carried as decimal text: struct, min, max
_INTS = {
    ord("b"): (struct.Struct(">b"), -(1 << 7), (1 << 7) - 1),
    ord("B"): (struct.Struct(">B"), 0, 255),
    ord("t"): (struct.Struct(">B"), 0, 255),
    ord("s"): (struct.Struct(">h"), -(1 << 15), (1 << 15) - 1),
    ord("u"): (struct.Struct(">H"), 0, (1 << 16) - 1),
    ord("I"): (struct.Struct(">i"), -(1 << 31), (1 << 31) - 1),
    ord("i"): (struct.Struct(">I"), 0, (1 << 32) - 1),
    ord("l"): (_I64, -(1 << 63), (1 << 63) - 1),
    ord("L"): (_I64, -(1 << 63), (1 << 63) - 1),
    ord("T"): (_U64, 0, (1 << 64) - 1),
}


class _Unrepresentable(Exception):
    """The section is well formed but per-property headers cannot rebuild it: store it verbatim."""


def _malformed(what: str) -> ValueError:
    return ValueError(f"malformed content header properties: {what}")


def _utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode()
        return True
    except UnicodeDecodeError:
        return False


def _key_bytes(name: str) -> bytes:
    """A record header name as the bytes of a field-table key."""
    try:
        return name.encode()
    except UnicodeEncodeError:  # lone surrogates: only in records built in-process
        return name.encode("utf-8", "surrogatepass")


# --- validating field values -----------------------------------------------------------

def _skip(raw: bytes, p: int, t: int, end: int, depth: int, utf8: bool = False) -> int:
    """End of the field value of type t at raw[p:], validated, never beyond end. With ``utf8``,
    a nested table key that is not UTF-8 raises _Unrepresentable."""
    width = _WIDTH.get(t)
    if width is not None:
        q = p + width
        if q > end:
            raise _malformed(f"a field value of type {chr(t)!r} runs past its table")
        return q
    if t not in _VARIABLE:
        raise _malformed(f"unknown field value type {bytes((t,))!r}")
    if p + 4 > end:
        raise _malformed(f"a field value of type {chr(t)!r} runs past its table")
    q = p + 4 + _U32.unpack_from(raw, p)[0]
    if q > end:
        raise _malformed(f"a field value of type {chr(t)!r} runs past its table")
    if t == _T_S or t == _T_x:
        return q
    if depth >= _MAX_DEPTH:
        raise _malformed(f"field tables and arrays nested more than {_MAX_DEPTH} deep")
    p += 4
    if t == _T_F:
        while p < q:
            start = p + 1
            p = start + raw[p]
            if p >= q:
                raise _malformed("a field table entry runs past its table")
            if utf8 and not _utf8(raw[start:p]):
                raise _Unrepresentable
            p = _skip(raw, p + 1, raw[p], q, depth + 1, utf8)
    else:
        while p < q:
            p = _skip(raw, p + 1, raw[p], q, depth + 1, utf8)
    return q


# --- parsing a property section -----------------------------------------------------------

def _split(raw: bytes) -> tuple[int, int, list, int]:
    """Validate a property section: (flags of the first word, number of flag words,
    [(start, end) or None for each of the 14 properties], end of the known properties)."""
    end = len(raw)
    pos = 0
    words = 0
    flags = 0
    while True:
        if pos + 2 > end:
            raise _malformed("truncated property flags")
        word = raw[pos] << 8 | raw[pos + 1]
        if not words:
            flags = word
        pos += 2
        words += 1
        if not word & 1:
            break
        if words == _MAX_FLAG_WORDS:
            raise _malformed("too many property flag words")
    spans: list = [None] * 14
    try:
        for i, (bit, name, kind) in enumerate(_PROPERTIES):
            if not flags & bit:
                continue
            start = pos
            if kind == _STR:
                pos += 1 + raw[pos]
            elif kind == _OCTET:
                pos += 1
            elif kind == _TS:
                pos += 8
            else:
                q = pos + 4 + _U32.unpack_from(raw, pos)[0]
                if q > end:
                    raise _malformed("headers table runs past the end")
                _skip(raw, pos, _T_F, q, 0)
                pos = q
            if pos > end:
                raise _malformed(f"{name[5:]} runs past the end")
            spans[i] = (start, pos)
    except (IndexError, struct.error):
        raise _malformed("truncated") from None
    return flags, words, spans, pos


def _raw_property(raw: bytes, index: int) -> bytes | int | None:
    _, _, spans, _ = _split(raw)
    span = spans[index]
    if span is None:
        return None
    start, end = span
    kind = _PROPERTIES[index][2]
    if kind == _STR:
        return raw[start + 1:end]
    if kind == _OCTET:
        return raw[start]
    return _U64.unpack_from(raw, start)[0]


def _entries(raw: bytes, p: int, end: int) -> list[tuple[bytes, int, int, int]]:
    """(name, type, value start, value end) of each entry of the table raw[p:end], validated."""
    out = []
    while p < end:
        start = p + 1
        p = start + raw[p]
        if p >= end:
            raise _malformed("a field table entry runs past its table")
        t = raw[p]
        q = _skip(raw, p + 1, t, end, 0)
        out.append((raw[start:p], t, p + 1, q))
        p = q
    return out


def _decode_value(raw: bytes, p: int, t: int, depth: int) -> tuple[Any, int]:
    """A validated field value as pamqp decodes it (but ``x`` as bytes, integers by sign)."""
    ints = _INTS.get(t)
    if ints is not None:
        codec = ints[0]
        (n,) = codec.unpack_from(raw, p)
        p += codec.size
        if t == _T_t:
            return bool(n), p
        if t == _T_T:
            try:
                return datetime.datetime.fromtimestamp(n, tz=datetime.timezone.utc), p
            except (OverflowError, ValueError, OSError):
                return n, p
        return n, p
    if t == _T_S or t == _T_x:
        q = p + 4 + _U32.unpack_from(raw, p)[0]
        data = raw[p + 4:q]
        if t == _T_S:
            try:
                return data.decode(), q
            except UnicodeDecodeError:
                pass
        return data, q
    if t == _T_F:
        q = p + 4 + _U32.unpack_from(raw, p)[0]
        return _decode_table(raw, p + 4, q, depth + 1), q
    if t == _T_A:
        q = p + 4 + _U32.unpack_from(raw, p)[0]
        p += 4
        items = []
        while p < q:
            item, p = _decode_value(raw, p + 1, raw[p], depth + 1)
            items.append(item)
        return items, q
    if t == _T_V:
        return None, p
    if t == _T_f:
        return _FLOAT.unpack_from(raw, p)[0], p + 4
    if t == _T_d:
        return _DOUBLE.unpack_from(raw, p)[0], p + 8
    if t == _T_D:
        return decimal.Decimal(_U32.unpack_from(raw, p + 1)[0]).scaleb(-raw[p]), p + 5
    raise _malformed(f"unknown field value type {bytes((t,))!r}")


def _decode_table(raw: bytes, p: int, end: int, depth: int) -> dict:
    table = {}
    while p < end:
        start = p + 1
        p = start + raw[p]
        name = raw[start:p].decode("utf-8", "surrogateescape")
        table[name], p = _decode_value(raw, p + 1, raw[p], depth)
    return table

# --- building property sections -------------------------------------------------------------

def encode_table(entries: Iterable[tuple[str, str, Any]]) -> bytes:
    """A field table's wire encoding (length included) from (name, type, value) triples, the
    type being the field type octet as a one-character string and the value a Python value
    (``int``, ``float``, ``bool``, ``str``/``bytes``, ``Decimal``, ``datetime``/``int`` for
    ``T``, None for ``V``; for ``F`` a list of triples, for ``A`` a list of (type, value))."""
    body = b"".join(_entry(name, t, value) for name, t, value in entries)
    return _U32.pack(len(body)) + body


def _entry(name: str | bytes, t: str, value: Any) -> bytes:
    nb = name.encode() if isinstance(name, str) else name
    if len(nb) > 255:
        raise ValueError(f"field table key of {len(nb)} bytes (255 at most)")
    return bytes((len(nb),)) + nb + _field(t, value)


def _field(t: str, value: Any) -> bytes:
    code = ord(t)
    if code in (_T_S, _T_x):
        data = value.encode() if isinstance(value, str) else bytes(value)
        return t.encode() + _U32.pack(len(data)) + data
    if code == _T_F:
        return b"F" + encode_table(value)
    if code == _T_A:
        body = b"".join(_field(it, iv) for it, iv in value)
        return b"A" + _U32.pack(len(body)) + body
    if code == _T_V:
        return b"V"
    if code == _T_T and isinstance(value, datetime.datetime):
        value = int(value.timestamp())
    ints = _INTS.get(code)
    if ints is not None:
        return t.encode() + ints[0].pack(int(value))
    if code == _T_f:
        return b"f" + _FLOAT.pack(value)
    if code == _T_d:
        return b"d" + _DOUBLE.pack(value)
    if code == _T_D:
        sign, digits, exponent = decimal.Decimal(value).as_tuple()
        scale = max(0, -exponent)
        n = int("".join(map(str, digits)) or "0") * 10 ** max(0, exponent)
        return b"D" + bytes((scale,)) + _U32.pack(n)
    raise ValueError(f"unknown field value type {t!r}")


def with_headers(properties_raw: bytes, table: bytes | None = None, drop_expiration: bool = False) -> bytes:
    """A copy of a property section with its headers table replaced by ``table`` (a field table
    encoding, length included; None keeps the current one) and/or without ``expiration``.
    Other properties, extra flag words and trailing bytes are kept as they are."""
    raw = properties_raw if type(properties_raw) is bytes else bytes(properties_raw)
    flags, words, spans, known_end = _split(raw)
    parts = []
    new_flags = flags & 3
    for i, ((bit, _, _), span) in enumerate(zip(_PROPERTIES, spans)):
        if i == _HEADERS_INDEX and table is not None:
            parts.append(table)
            new_flags |= bit
        elif span is not None and not (i == _EXPIRATION_INDEX and drop_expiration):
            parts.append(raw[span[0]:span[1]])
            new_flags |= bit
    return b"".join((_U16.pack(new_flags), raw[2:2 * words], *parts, raw[known_end:]))


def reply_to(properties_raw: bytes) -> str | None:
    """The ``reply_to`` property of a section, if present."""
    value = _raw_property(properties_raw, _REPLY_TO_INDEX)
    return None if value is None else value.decode("utf-8", "replace")


def with_reply_to(properties_raw: bytes, name: str) -> bytes:
    """A copy of a property section whose ``reply_to`` is ``name`` (Direct Reply-To's rewrite)."""
    raw = properties_raw if type(properties_raw) is bytes else bytes(properties_raw)
    flags, words, spans, known_end = _split(raw)
    span = spans[_REPLY_TO_INDEX]
    value = name.encode()
    new = _LEN1[len(value)] + value
    if span is not None:
        return raw[:span[0]] + new + raw[span[1]:]
    at = next((s[0] for s in spans[_REPLY_TO_INDEX + 1:] if s is not None), known_end)
    bit = _PROPERTIES[_REPLY_TO_INDEX][0]
    return _U16.pack(flags | bit) + raw[2:at] + new + raw[at:]


def with_entry(properties_raw: bytes, name: str, t: str, value: Any) -> bytes:
    """A copy of a property section whose headers table has entry ``name`` set to (``t``, ``value``):
    replaced where it was, appended otherwise (e.g. ``x-stream-offset`` on stream deliveries)."""
    raw = properties_raw if type(properties_raw) is bytes else bytes(properties_raw)
    _, _, spans, _ = _split(raw)
    span = spans[_HEADERS_INDEX]
    key = name.encode()
    new = _entry(key, t, value)
    parts, replaced = [], False
    if span is not None:
        for entry_name, _t, value_start, value_end in _entries(raw, span[0] + 4, span[1]):
            if entry_name == key and not replaced:
                parts.append(new)
                replaced = True
            else:
                parts.append(raw[value_start - 2 - len(entry_name):value_end])
    if not replaced:
        parts.append(new)
    body = b"".join(parts)
    return with_headers(raw, _U32.pack(len(body)) + body)


def dead_lettered(properties_raw: bytes, *, queue: str, reason: str, exchange: str,
                  routing_keys: Sequence[str], now_s: int) -> bytes:
    """The property section of a message dead-lettered from ``queue``, as RabbitMQ makes it.

    ``expiration`` is removed (kept as ``original-expiration`` in the new death record). The
    ``x-death`` array gets, first, an entry for (queue, reason): an existing one has its
    ``count`` incremented and moves to the front, otherwise a new table ``count`` (l) 1,
    ``reason``, ``queue``, ``time`` (T), ``exchange``, ``routing-keys`` (A of S) and maybe
    ``original-expiration``. ``x-first-death-{reason,queue,exchange}`` are added if absent,
    ``x-last-death-{reason,queue,exchange}`` set. Other entries keep their place and encoding.
    """
    raw = properties_raw if type(properties_raw) is bytes else bytes(properties_raw)
    _, _, spans, _ = _split(raw)
    entries: list[tuple[bytes, bytes]] = []  # (name, whole entry bytes)
    span = spans[_HEADERS_INDEX]
    if span is not None:
        for name, t, p, q in _entries(raw, span[0] + 4, span[1]):
            entries.append((name, bytes((len(name),)) + name + raw[p - 1:q]))
    original_expiration = _raw_property(raw, _EXPIRATION_INDEX)

    deaths: list[bytes] = []  # whole field values (b"F" + table) of x-death's elements
    found = None
    index = next((i for i, (name, _) in enumerate(entries) if name == b"x-death"), None)
    if index is not None:
        entry = entries[index][1]
        p = 1 + entry[0]
        if entry[p] == _T_A:
            q = len(entry)
            p += 5
            while p < q:
                t = entry[p]
                end = _skip(entry, p + 1, t, q, 0)
                element = entry[p:end]
                if found is None and t == _T_F:
                    death = _decode_table(element, 5, len(element), 0)
                    if death.get("queue") == queue and death.get("reason") == reason:
                        found = _count_incremented(element, death.get("count"))
                        p = end
                        continue
                deaths.append(element)
                p = end
    if found is None:
        info = [("count", "l", 1), ("reason", "S", reason), ("queue", "S", queue), ("time", "T", now_s),
                ("exchange", "S", exchange), ("routing-keys", "A", [("S", k) for k in routing_keys])]
        if original_expiration is not None:
            info.append(("original-expiration", "S", original_expiration))
        found = b"F" + encode_table(info)
    deaths.insert(0, found)
    array = b"".join(deaths)
    x_death = b"\x07x-deathA" + _U32.pack(len(array)) + array
    if index is None:
        entries.append((b"x-death", x_death))
    else:
        entries[index] = (b"x-death", x_death)

    names = {name for name, _ in entries}
    values = {"reason": reason, "queue": queue, "exchange": exchange}
    for field in ("reason", "queue", "exchange"):
        name = f"x-first-death-{field}".encode()
        if name not in names:
            entries.append((name, _entry(name, "S", values[field])))
    for field in ("reason", "queue", "exchange"):
        name = f"x-last-death-{field}".encode()
        new = (name, _entry(name, "S", values[field]))
        for i, (existing, _) in enumerate(entries):
            if existing == name:
                entries[i] = new
                break
        else:
            entries.append(new)
    body = b"".join(entry for _, entry in entries)
    return with_headers(raw, _U32.pack(len(body)) + body, drop_expiration=True)


def _count_incremented(element: bytes, count: Any) -> bytes:
    """An x-death element (b"F" + table) with its ``count`` entry one higher (as ``l``)."""
    count = count + 1 if isinstance(count, int) and not isinstance(count, bool) else 1
    parts = []
    replaced = False
    for name, t, p, q in _entries(element, 5, len(element)):
        if name == b"count" and not replaced:
            parts.append(_entry(name, "l", count))
            replaced = True
        else:
            parts.append(bytes((len(name),)) + name + element[p - 1:q])
    if not replaced:
        parts.insert(0, _entry(b"count", "l", count))
    body = b"".join(parts)
    return b"F" + _U32.pack(len(body)) + body
