"""Kafka-origin records: what a record no AMQP publish wrote (no ``amqp.`` header) looks like
over AMQP, and how a publish of exactly that delivery re-creates the record.

The other half of :mod:`routing.mapping`, which dispatches here; pure functions of bytes:

- :func:`delivery_properties` ``(key, tombstone, headers, timestamp_ms)`` ->
  ``(routing_key, properties_raw)``, once per delivery of such a record;
- :func:`original_record` ``(routing_key, properties_raw, body)`` ->
  ``(key, value, headers, timestamp_ms)``, or ``None`` when the publish is not such a delivery.

Delivered from exchange ``""`` with the key as routing key (null -> ``""``) and two properties:

- ``headers``: every record header in order as a long string ``S`` (a null value as void
  ``V``), then the broker's own entries: ``x-kafka-key`` (``x``, the key's bytes) when the key
  cannot be the routing key (empty, not UTF-8, or longer than 255 bytes; the routing key is then
  ``""``), ``x-kafka-tombstone`` (``t``, true) when the value is null, and always last
  ``x-kafka-timestamp`` (``l``, the record timestamp in milliseconds). If a header name is longer
  than a table key allows (255 bytes), all the record headers travel instead as one entry
  ``x-kafka-headers``: an array of ``[name S, value S|V]`` arrays.
- ``timestamp``: the record timestamp in seconds (floor), omitted for a negative timestamp or one
  past the year 9999 (clients turn it into a date; ``x-kafka-timestamp`` still has it).

:func:`routing.mapping.record_from_amqp` recognises exactly that shape (exchange ``""``, the same
routing key, the byte-identical property section, an empty body for a tombstone) and re-creates
the original record from it: same key, value, headers in order, and the timestamp of
``x-kafka-timestamp`` (not the publish time: a verbatim re-publish of a Kafka record keeps its
create time, as MirrorMaker does). So neither the timestamp property nor the marker entries
become ``amqp.`` headers, and Kafka record -> AMQP -> record is exact. Any other section is
AMQP-form, which in turn always carries an ``amqp.`` header (``amqp.exchange`` empty if nothing
else), so the two forms never meet.
"""
from __future__ import annotations

from collections.abc import Sequence

from routing.amqp_properties import (
    _I64, _LEN1, _RESERVED, _T_A, _T_S, _T_V, _T_t, _T_x, _U32, _U64, _decode_value, _entries, _key_bytes,
)
from wire.records import Header

__all__ = ["delivery_properties", "original_record"]

_X_KEY = b"x-kafka-key"
_X_TOMBSTONE = b"x-kafka-tombstone"
_X_TIMESTAMP = b"x-kafka-timestamp"
_X_HEADERS = b"x-kafka-headers"
_X_TOMBSTONE_ENTRY = bytes((len(_X_TOMBSTONE),)) + _X_TOMBSTONE + b"t\x01"
_X_TIMESTAMP_PREFIX = bytes((len(_X_TIMESTAMP),)) + _X_TIMESTAMP + b"l"
_X_KEY_PREFIX = bytes((len(_X_KEY),)) + _X_KEY + b"x"
_X_HEADERS_PREFIX = bytes((len(_X_HEADERS),)) + _X_HEADERS + b"A"
# the timestamp property of a Kafka-origin delivery stops at year 9999 (clients build dates from it)
_MAX_TIMESTAMP_MS = 253402300799999


def delivery_properties(key: bytes | None, tombstone: bool, headers: Sequence[Header],
                        ts: int) -> tuple[str, bytes]:
    """Routing key and property section delivering a Kafka-origin record (module docstring)."""
    table: list[bytes] = []
    u32 = _U32.pack
    len1 = _LEN1
    for h in headers:
        nb = _key_bytes(h.key)
        n = len(nb)
        if n > 255:
            table = [_long_headers_entry(headers)]
            break
        v = h.value
        if v is None:
            table += (len1[n], nb, b"V")
        else:
            table += (len1[n], nb, b"S", u32(len(v)), v)
    routing_key = ""
    if key is not None:
        if 0 < len(key) < 256:
            try:
                routing_key = key.decode()
            except UnicodeDecodeError:
                table += (_X_KEY_PREFIX, u32(len(key)), key)
        else:
            table += (_X_KEY_PREFIX, u32(len(key)), key)
    if tombstone:
        table.append(_X_TOMBSTONE_ENTRY)
    table += (_X_TIMESTAMP_PREFIX, _I64.pack(ts))
    body = b"".join(table)
    if 0 <= ts <= _MAX_TIMESTAMP_MS:
        return routing_key, b"".join((b"\x20\x40", u32(len(body)), body, _U64.pack(ts // 1000)))
    return routing_key, b"".join((b"\x20\x00", u32(len(body)), body))


def _long_headers_entry(headers: Sequence[Header]) -> bytes:
    u32 = _U32.pack
    items = []
    for h in headers:
        nb = _key_bytes(h.key)
        v = h.value
        pair = b"S" + u32(len(nb)) + nb + (b"V" if v is None else b"S" + u32(len(v)) + v)
        items.append(b"A" + u32(len(pair)) + pair)
    array = b"".join(items)
    return _X_HEADERS_PREFIX + u32(len(array)) + array


def original_record(routing_key: str, raw: bytes, body: bytes):
    """The Kafka record whose delivery is exactly (exchange "", routing_key, raw), else None."""
    end = len(raw)
    if end < 6:
        return None
    start = 6
    stop = start + _U32.unpack_from(raw, 2)[0]
    if stop > end or raw[stop - 27:stop - 8] != _X_TIMESTAMP_PREFIX:  # quick: no marker, no Kafka
        return None
    try:
        items = _entries(raw, start, stop)
    except ValueError:
        return None
    if not items:
        return None
    name, t, p, q = items.pop()
    if name != _X_TIMESTAMP or t != ord("l"):
        return None
    (ts,) = _I64.unpack_from(raw, p)
    value = body
    if items and items[-1][0] == _X_TOMBSTONE and items[-1][1] == _T_t:
        items.pop()
        value = None
        if body:
            return None
    key = routing_key.encode() if routing_key else None
    if items and items[-1][0] == _X_KEY and items[-1][1] == _T_x:
        _, _, p, q = items.pop()
        key = raw[p + 4:q]
    headers = []
    try:
        if len(items) == 1 and items[0][0] == _X_HEADERS and items[0][1] == _T_A:
            _, _, p, q = items[0]
            for pair in _decode_value(raw, p, _T_A, 0)[0]:
                name, v = pair  # [name S, value S|V]
                headers.append(Header(name if isinstance(name, str) else name.decode(),
                                      v.encode() if isinstance(v, str) else None if v is None else bytes(v)))
        else:
            for name, t, p, q in items:
                if t == _T_S:
                    v = raw[p + 4:q]
                elif t == _T_V:
                    v = None
                else:
                    return None
                text = name.decode()
                if text.startswith(_RESERVED):
                    return None
                headers.append(Header(text, v))
    except (ValueError, TypeError, AttributeError):
        return None
    if delivery_properties(key, value is None, headers, ts) != (routing_key, raw):
        return None
    return key, value, tuple(headers), ts
