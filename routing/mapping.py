"""An AMQP 0-9-1 message as a Kafka record and back, byte for byte.

A publish is appended as one record; a delivery is made from one record. Both directions are
pure functions of bytes (no I/O, no global state):

- :func:`record_from_amqp` ``(exchange, routing_key, properties_raw, body, now_ms)`` ->
  ``(key, value, headers, timestamp_ms)``, once per published message;
- :func:`amqp_from_record` ``(record)`` -> ``(exchange, routing_key, properties_raw)``, once per
  delivery (the body is ``record.value or b""``);
- one property of a stored message without building its delivery: :mod:`routing.message_fields`
  (``delivery_mode``, ``priority``, ``expiration``, ``headers_table``...);
- the property section itself, parsed and rebuilt (``with_headers``, ``dead_lettered`` with
  RabbitMQ's ``x-death`` bookkeeping, ``encode_table``): :mod:`routing.amqp_properties`.

``properties_raw`` is the property section of a Basic content header as it came off the wire:
16-bit flag words (bit 15 content-type ... bit 2 cluster-id, bit 0 "another flag word follows"),
then the present properties in flag order.

AMQP-origin records
-------------------

==================== ============================== ==================================================
AMQP                 Kafka record                   encoding
==================== ============================== ==================================================
body                 value                          as is
routing key          key                            UTF-8; the empty routing key is a null key
exchange             header ``amqp.exchange``       UTF-8; omitted for the default exchange ``""``
                                                    (then written empty only if the record would
                                                    carry no other ``amqp.`` header, see below)
content-type         header ``amqp.content-type``   the short string's (UTF-8) bytes, as sent
content-encoding     ``amqp.content-encoding``      bytes as sent
headers (table)      one header per table entry     see the next table; an empty table (present, no
                                                    entries) is ``amqp.headers`` with an empty value
delivery-mode        ``amqp.delivery-mode``         decimal text (``2``)
priority             ``amqp.priority``              decimal text (``0``..``255``)
correlation-id       ``amqp.correlation-id``        bytes as sent
reply-to             ``amqp.reply-to``              bytes as sent
expiration           ``amqp.expiration``            bytes as sent (milliseconds as text, ``60000``)
message-id           ``amqp.message-id``            bytes as sent
timestamp            ``amqp.timestamp``             decimal text, seconds since the epoch
type                 ``amqp.type``                  bytes as sent
user-id              ``amqp.user-id``               bytes as sent
app-id               ``amqp.app-id``                bytes as sent
cluster-id           ``amqp.cluster-id``            bytes as sent
(publish time)       record timestamp               ``now_ms``, the broker's clock at the publish
==================== ============================== ==================================================

Headers-table entries, in table order, after the properties:

============================= ===================================== ====================================
table entry (type octet)      record header name                    record header value
============================= ===================================== ====================================
``S`` long string             ``<name>``                            the string's bytes
``V`` void                    ``<name>``                            null
any other type, and every     ``amqp.h.<type>.<name>``              ``b B s u I i l L``: decimal text
entry whose name starts         (e.g. ``amqp.h.I.retries``,         (``b s I l L`` signed, ``B u i``
with ``amqp.``                  ``amqp.h.S.amqp.x``)                unsigned); ``t``: the octet in
                                                                    decimal (``1`` true, ``0`` false);
                                                                    ``T``: decimal seconds; ``f d``:
                                                                    the shortest decimal text that
                                                                    reads back to the same bits
                                                                    (``1.5``, ``-0``, ``inf``), a NaN
                                                                    as its 4/8 raw IEEE bytes; ``D``:
                                                                    decimal text with *scale* digits
                                                                    after the point (``123.45``);
                                                                    ``S x``: the bytes; ``V``: null;
                                                                    ``F A``: their wire encoding
                                                                    without the 4-byte length
============================= ===================================== ====================================

Types are RabbitMQ's (``s`` is a signed 16-bit integer, not a short string; ``u`` unsigned 16,
``i`` unsigned 32, ``l`` and ``L`` signed 64, ``x`` byte array); ``U`` or any other octet is a
malformed table. Names of record headers starting with ``amqp.`` are reserved: a record carrying
at least one of them is AMQP-form, a record carrying none is Kafka-origin.

When a property section cannot be rebuilt exactly from those headers - extra flag words or the
reserved flag bit 1, bytes after the last property, a short-string property or a table key
(at any depth) that is not UTF-8 (pamqp-based clients could not read those either) - the
record carries ``amqp.properties`` (the section verbatim) and ``amqp.exchange`` instead, so an
AMQP -> record -> AMQP round trip is always byte-exact. Malformed sections (truncated, unknown
field type, a value running past its table) raise :class:`ValueError`; the caller reports them
as 501 FRAME_ERROR.

Kafka-origin records (no ``amqp.`` header)
------------------------------------------

Delivered from exchange ``""`` with the key as routing key and a property section of their own
(the record headers as a ``headers`` table, ``x-kafka-*`` entries, the ``timestamp``);
:func:`record_from_amqp` recognises exactly that section and re-creates the original record, so
Kafka record -> AMQP -> record is exact. Both directions, and the format: :mod:`routing.kafka_origin`.

A Kafka producer may set properties by writing ``amqp.`` headers itself. Headers of this form
that do not decode (``amqp.priority: high``, a duplicate, an unknown ``amqp.`` name, a value
text in a non-canonical form such as ``02``) are delivered as long-string table entries under
their full name rather than refused. A valid ``amqp.properties`` is delivered as is and the
other headers (but ``amqp.exchange``) are then not delivered; a plain header whose name is longer
than 255 bytes is left out of an AMQP-form delivery; an AMQP-form record whose key is not UTF-8
(or longer than 255 bytes) gets a lossy routing key. Those are the only lossy cases, and only
for records no AMQP publish produced.

:func:`headers_table` decodes as pamqp does (the last of duplicate keys wins, long strings as
``str`` when UTF-8) except that ``D`` decimals are unsigned, as RabbitMQ reads them (pamqp reads
the 32-bit value signed), and ``x`` is ``bytes``.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence

from routing.amqp_properties import (  # the section layout and field types both modules read
    _DOUBLE, _FLOAT, _HEADERS_INDEX, _INTS, _LEN1, _OCTET, _PROPERTIES, _RESERVED, _STR, _TS, _T_A, _T_D, _T_F,
    _T_V, _T_d, _T_f, _U16, _U32, _U64, _Unrepresentable, _VARIABLE, _WIDTH, _key_bytes, _malformed, _skip,
    _split, _utf8,
)
from routing.kafka_origin import delivery_properties, original_record
from wire.records import Header, Record, encode_headers

__all__ = ["record_from_amqp", "amqp_from_record", "stored_form"]

_HEADERS_BIT = 0x2000
_PROPERTY_SLOT = {name: (i, bit, kind) for i, (bit, name, kind) in enumerate(_PROPERTIES) if i != _HEADERS_INDEX}
_H_EXCHANGE = "amqp.exchange"
_H_HEADERS = "amqp.headers"
_H_PROPERTIES = "amqp.properties"
# constant tables (not caches): octet -> decimal text, decimal text -> octet
_DEC = tuple(b"%d" % i for i in range(256))
_OCTET_WIRE = {b"%d" % i: bytes((i,)) for i in range(256)}
_TYPE_CHARS = {chr(t): t for t in (*_WIDTH, *_VARIABLE)}


# --- AMQP -> record ---------------------------------------------------------------------

# Header is a frozen slots dataclass; its generated __init__ (object.__setattr__ per field) is
# half the cost of a publish, so the hot loops fill the two slots directly. Same objects.
_new = object.__new__
_set_key = Header.key.__set__  # type: ignore[attr-defined]
_set_value = Header.value.__set__  # type: ignore[attr-defined]
_NAMES = tuple(name for _, name, _ in _PROPERTIES)
_KINDS = tuple(kind for _, _, kind in _PROPERTIES)


# The record headers of a publish depend on its exchange and property section only (not on its
# routing key or body), except in the Kafka-record form; publishers mostly repeat one section, so
# the publish path keeps each (exchange, section)'s headers, already encoded, in a bounded cache.
_FORMS: dict[tuple[str, bytes], tuple[tuple[Header, ...], bytes]] = {}
_FORMS_MAX = 1024


def stored_form(exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
                now_ms: int) -> tuple[bytes | None, bytes | None, tuple[Header, ...], int, bytes]:
    """:func:`record_from_amqp` plus the headers' encoding (:func:`wire.records.encode_headers`)."""
    if type(properties_raw) is not bytes:
        properties_raw = bytes(properties_raw)
    cache_key = (exchange, properties_raw)
    form = _FORMS.get(cache_key)
    if form is not None:
        return (routing_key.encode() if routing_key else None), body, form[0], now_ms, form[1]
    key, value, headers, timestamp = record_from_amqp(exchange, routing_key, properties_raw, body, now_ms)
    encoded = encode_headers(headers)
    flags = properties_raw[0] << 8 | properties_raw[1]
    if (exchange or flags not in (0x2000, 0x2040)) and value is body and timestamp == now_ms \
            and key == (routing_key.encode() if routing_key else None):
        if len(_FORMS) >= _FORMS_MAX:
            _FORMS.clear()
        _FORMS[cache_key] = (headers, encoded)
    return key, value, headers, timestamp, encoded


def record_from_amqp(exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
                     now_ms: int) -> tuple[bytes | None, bytes | None, tuple[Header, ...], int]:
    """(key, value, headers, timestamp_ms) of the record that stores this publish.

    ``value`` is ``body`` (``None`` only when re-publishing a delivered Kafka tombstone).
    Raises ValueError (with the reason) when ``properties_raw`` is malformed.
    """
    raw = properties_raw if type(properties_raw) is bytes else bytes(properties_raw)
    end = len(raw)
    if end < 2:
        raise _malformed("no property flags")
    flags = raw[0] << 8 | raw[1]
    if flags & 3:  # another flag word follows, or the reserved bit: keep the section verbatim
        return _verbatim(exchange, routing_key, raw, body, now_ms)
    if (flags == 0x2000 or flags == 0x2040) and not exchange:
        kafka = original_record(routing_key, raw, body)
        if kafka is not None:
            return kafka
    new, set_key, set_value = _new, _set_key, _set_value
    headers = []
    if exchange:
        h = new(Header)
        set_key(h, _H_EXCHANGE)
        set_value(h, exchange.encode())
        headers.append(h)
    entries = None
    pos = 2
    if flags:
        rest = flags
        names, kinds = _NAMES, _KINDS
        try:
            while rest:
                i = 16 - rest.bit_length()  # bit 15 is property 0
                rest ^= 0x8000 >> i
                kind = kinds[i]
                if kind == _STR:
                    start = pos + 1
                    pos = start + raw[pos]
                    if pos > end:
                        raise _malformed(f"{names[i][5:]} runs past the end")
                    value = raw[start:pos]
                    if not value.isascii():
                        value.decode()  # not UTF-8: UnicodeDecodeError -> stored verbatim
                elif kind == _OCTET:
                    value = _DEC[raw[pos]]
                    pos += 1
                elif kind == _TS:
                    value = b"%d" % _U64.unpack_from(raw, pos)
                    pos += 8
                else:
                    start = pos + 4
                    pos = start + _U32.unpack_from(raw, pos)[0]
                    if pos > end:
                        raise _malformed("headers table runs past the end")
                    if pos != start:
                        entries = _table_headers(raw, start, pos)
                        continue
                    value = b""  # a present, empty table
                h = new(Header)
                set_key(h, names[i])
                set_value(h, value)
                headers.append(h)
        except (IndexError, struct.error):
            raise _malformed("truncated") from None
        except (_Unrepresentable, UnicodeDecodeError):
            return _verbatim(exchange, routing_key, raw, body, now_ms)
    if pos != end:  # bytes after the last property
        return _verbatim(exchange, routing_key, raw, body, now_ms)
    if entries is not None:
        if not headers and not any(h.key.startswith(_RESERVED) for h in entries):
            headers.append(Header(_H_EXCHANGE, b""))  # mark AMQP-form (see the module docstring)
        headers += entries
    elif not headers:
        headers.append(Header(_H_EXCHANGE, b""))
    return (routing_key.encode() if routing_key else None), body, tuple(headers), now_ms


def _verbatim(exchange: str, routing_key: str, raw: bytes, body: bytes, now_ms: int):
    _split(raw)  # raises ValueError if malformed
    return ((routing_key.encode() if routing_key else None), body,
            (Header(_H_EXCHANGE, exchange.encode()), Header(_H_PROPERTIES, raw)), now_ms)


def _table_headers(raw: bytes, p: int, end: int) -> list[Header]:
    """One record header per entry of the top-level table raw[p:end]."""
    out = []
    append = out.append
    u32 = _U32.unpack_from
    new, set_key, set_value = _new, _set_key, _set_value
    while p < end:
        start = p + 1
        p = start + raw[p]
        if p >= end:
            raise _malformed("a headers table entry runs past its table")
        try:
            name = raw[start:p].decode()
        except UnicodeDecodeError:
            raise _Unrepresentable from None
        t = raw[p]
        p += 1
        if t == 83:  # S
            start = p + 4
            p = start + u32(raw, p)[0]
            if p > end:
                raise _malformed("a headers table entry runs past its table")
            value = raw[start:p]
            if name[:5] == "amqp.":
                name = "amqp.h.S." + name
        elif t == 86 and name[:5] != "amqp.":  # V
            value = None
        else:
            q = _skip(raw, p, t, end, 0, True)
            value = _text(t, raw, p, q)
            name = f"amqp.h.{chr(t)}.{name}"
            p = q
        h = new(Header)
        set_key(h, name)
        set_value(h, value)
        append(h)
    return out




def _text(t: int, raw: bytes, p: int, q: int) -> bytes | None:
    """The record header value of the field value raw[p:q] of type t (see the module docstring)."""
    if t in _VARIABLE:
        return raw[p + 4:q]
    if t == _T_V:
        return None
    ints = _INTS.get(t)
    if ints is not None:
        return b"%d" % ints[0].unpack_from(raw, p)
    if t == _T_D:
        return _decimal_text(raw[p], _U32.unpack_from(raw, p + 1)[0])
    return _float_text(t, raw[p:q])


def _float_text(t: int, wire: bytes) -> bytes:
    codec = _FLOAT if t == _T_f else _DOUBLE
    (x,) = codec.unpack(wire)
    if x != x:  # NaN: keep its payload; raw NaN bytes are never ASCII float text (exponent bits)
        return wire
    if t == _T_d:
        return repr(x).encode()
    for precision in range(1, 10):  # the shortest text that reads back to the same float32
        text = b"%.*g" % (precision, x)
        if _FLOAT.pack(float(text)) == wire:
            return text
    raise AssertionError("9 significant digits always identify a float32")  # pragma: no cover


def _decimal_text(scale: int, value: int) -> bytes:
    digits = b"%d" % value
    if not scale:
        return digits
    digits = digits.rjust(scale + 1, b"0")
    return digits[:-scale] + b"." + digits[-scale:]


# --- record -> AMQP ---------------------------------------------------------------------

# Delivering: records read from one log mostly share one headers tuple (wire.records hands out the
# same tuple for the same header bytes), and in the AMQP form the exchange and property section
# depend on the headers alone: keep them per tuple, by identity (the entry holds the tuple, so its
# id cannot be reused while it is cached). Bounded.
_DELIVERY_FORMS: dict[int, tuple[tuple[Header, ...], str, bytes]] = {}


def amqp_from_record(record: Record) -> tuple[str, str, bytes]:
    """(exchange, routing_key, properties_raw) to deliver this record with; never raises."""
    headers = record.headers
    form = _DELIVERY_FORMS.get(id(headers))
    if form is not None and form[0] is headers:
        return form[1], _routing_key(record.key), form[2]
    for h in headers:
        if h.key[:5] == "amqp.":
            exchange, routing_key, raw = _amqp_form(headers, record.key)
            if type(headers) is tuple:
                if len(_DELIVERY_FORMS) >= _FORMS_MAX:
                    _DELIVERY_FORMS.clear()
                _DELIVERY_FORMS[id(headers)] = (headers, exchange, raw)
            return exchange, routing_key, raw
    routing_key, raw = delivery_properties(record.key, record.value is None, headers, record.timestamp)
    return "", routing_key, raw


def _amqp_form(headers: Sequence[Header], key: bytes | None) -> tuple[str, str, bytes]:
    slots: list[bytes | None] = [None] * 14
    table: list[bytes] = []
    flags = 0
    exchange = None
    verbatim = None
    u32 = _U32.pack
    len1 = _LEN1
    slot_of = _PROPERTY_SLOT
    for h in headers:
        k = h.key
        v = h.value
        if k[:5] == "amqp.":
            prop = slot_of.get(k)
            if prop is not None:
                i, bit, kind = prop
                if slots[i] is None and v is not None:
                    if kind == _STR:
                        wire = len1[len(v)] + v if len(v) < 256 and _utf8(v) else None
                    elif kind == _OCTET:
                        wire = _OCTET_WIRE.get(v)
                    else:
                        n = _uint(v, (1 << 64) - 1)
                        wire = None if n is None else _U64.pack(n)
                    if wire is not None:
                        slots[i] = wire
                        flags |= bit
                        continue
            elif k[:7] == "amqp.h.":
                t = _TYPE_CHARS.get(k[7:8]) if k[8:9] == "." else None
                wire = None if t is None else _wire(t, v)
                if wire is not None:
                    nb = _key_bytes(k[9:])
                    if len(nb) < 256:
                        table += (len1[len(nb)], nb, len1[t], wire)
                        continue
            elif k == _H_EXCHANGE:
                if exchange is None and v is not None and len(v) < 256:
                    try:
                        exchange = v.decode()
                        continue
                    except UnicodeDecodeError:
                        pass
            elif k == _H_HEADERS:
                if v == b"" and not flags & _HEADERS_BIT:
                    flags |= _HEADERS_BIT
                    continue
            elif k == _H_PROPERTIES:
                if verbatim is None and v is not None:
                    try:
                        _split(v)
                        verbatim = bytes(v)
                        continue
                    except ValueError:
                        pass
        # a plain header, or a reserved one that does not decode: a long-string (or void) entry
        nb = _key_bytes(k)
        n = len(nb)
        if n < 256:  # else it cannot be a table key (only for headers no AMQP publish wrote)
            if v is None:
                table += (len1[n], nb, b"V")
            else:
                table += (len1[n], nb, b"S", u32(len(v)), v)
    routing_key = _routing_key(key)
    if verbatim is not None:
        return exchange or "", routing_key, verbatim
    if table or flags & _HEADERS_BIT:
        body = b"".join(table)
        slots[_HEADERS_INDEX] = u32(len(body)) + body
        flags |= _HEADERS_BIT
    return exchange or "", routing_key, _U16.pack(flags) + b"".join(filter(None, slots))


def _routing_key(key: bytes | None) -> str:
    if key is None:
        return ""
    try:
        return key.decode() if len(key) < 256 else _routing_key_lossy(key)
    except UnicodeDecodeError:
        return _routing_key_lossy(key)


def _uint(v: bytes, top: int) -> int | None:
    """Canonical unsigned decimal text (no sign, no leading zero) to int, else None."""
    if not v or len(v) > 20 or not v.isdigit() or (v[0] == 48 and len(v) > 1):
        return None
    n = int(v)
    return n if n <= top else None


def _int(v: bytes, low: int, high: int) -> int | None:
    if v[:1] == b"-":
        n = _uint(v[1:], -low)
        return None if n is None or n == 0 else -n
    return _uint(v, high)


def _wire(t: int, v: bytes | None) -> bytes | None:
    """The field value encoding (after the type octet) of a typed header value, or None if the
    value is not exactly what :func:`_text` produces for some value of that type."""
    if t == _T_V:
        return b"" if v is None else None
    if v is None:
        return None
    if t in _VARIABLE:
        if len(v) > 0xFFFFFFFF:
            return None
        wire = _U32.pack(len(v)) + v
        if t == _T_F or t == _T_A:  # must decode, with UTF-8 keys, or the client could not read it
            try:
                _skip(wire, 0, t, len(wire), 0, True)
            except (ValueError, _Unrepresentable):
                return None
        return wire
    ints = _INTS.get(t)
    if ints is not None:
        codec, low, high = ints
        n = _int(v, low, high)
        return None if n is None else codec.pack(n)
    if t == _T_D:
        before, dot, after = v.partition(b".")
        if dot and not after:
            return None
        digits = before + after
        n = _uint(digits.lstrip(b"0") or b"0", 0xFFFFFFFF) if digits.isdigit() and len(digits) <= 300 else None
        if n is None or len(after) > 255:
            return None
        wire = bytes((len(after),)) + _U32.pack(n)
    else:  # f, d
        codec = _FLOAT if t == _T_f else _DOUBLE
        if len(v) == codec.size and codec.unpack(v)[0] != codec.unpack(v)[0]:
            return v  # a NaN, kept as its raw bytes
        try:
            wire = codec.pack(float(v))
        except (ValueError, OverflowError):
            return None
    return wire if _text(t, bytes((t,)) + wire, 1, 1 + len(wire)) == v else None


def _routing_key_lossy(key: bytes | None) -> str:
    if not key:
        return ""
    if len(key) <= 255:
        try:
            return key.decode()
        except UnicodeDecodeError:
            pass
    return key.decode("utf-8", "replace").encode()[:255].decode("utf-8", "ignore")
