"""One property of a stored AMQP message, read without building its delivery.

For routing and queue decisions made per message (priority queues, per-message TTL,
persistence, ``x-death`` and headers exchanges): :func:`delivery_mode`, :func:`priority`,
:func:`expiration`, :func:`message_id`, :func:`timestamp` and :func:`headers_table` take a
:class:`~wire.records.Record`, its headers, or a property section as it came off the wire.
"""
from __future__ import annotations

from collections.abc import Sequence

from routing.amqp_properties import (
    _DELIVERY_MODE_INDEX, _EXPIRATION_INDEX, _HEADERS_INDEX, _MESSAGE_ID_INDEX, _OCTET, _PRIORITY_INDEX, _PROPERTIES,
    _RESERVED, _STR, _TIMESTAMP_INDEX, _decode_table, _raw_property, _split, _utf8,
)
from routing.mapping import _FORMS_MAX, _H_PROPERTIES, _uint, amqp_from_record
from wire.records import Header, Record

__all__ = ["Source", "delivery_mode", "priority", "expiration", "message_id", "timestamp", "headers_table"]

Source = Record | Sequence[Header] | bytes | bytearray | memoryview


def _property(source: Source, index: int) -> bytes | int | None:
    """Property ``index`` of a record (its headers) or of a property section; None if absent."""
    kind = _PROPERTIES[index][2]
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _raw_property(bytes(source), index)
    headers = source.headers if isinstance(source, Record) else source
    name = _PROPERTIES[index][1]
    found = None
    for h in headers:
        k = h.key
        if k == name:
            if found is None and h.value is not None:
                v = h.value
                if kind == _STR:
                    found = v if len(v) <= 255 and _utf8(v) else None
                elif kind == _OCTET:
                    found = _uint(v, 255)
                else:
                    found = _uint(v, (1 << 64) - 1)
        elif k == _H_PROPERTIES and h.value is not None:
            try:
                return _raw_property(bytes(h.value), index)
            except ValueError:
                pass
    return found


def delivery_mode(source: Source) -> int | None:
    """The delivery-mode property (2 = persistent) of a record or property section, or None."""
    return _property(source, _DELIVERY_MODE_INDEX)


def priority(source: Source) -> int | None:
    """The priority property (0..255) of a record or property section, or None."""
    return _property(source, _PRIORITY_INDEX)


_EXPIRATIONS: dict[int, tuple[tuple[Header, ...], int | None]] = {}


def expiration(source: Source) -> int | None:
    """The per-message TTL in milliseconds (the expiration property), or None if absent or not a
    non-negative decimal integer (RabbitMQ refuses such publishes; this accessor does not judge)."""
    if type(source) is Record and type(source.headers) is tuple:  # asked once per delivery: by headers
        headers = source.headers
        known = _EXPIRATIONS.get(id(headers))
        if known is not None and known[0] is headers:
            return known[1]
        value = _expiration(source)
        if len(_EXPIRATIONS) >= _FORMS_MAX:
            _EXPIRATIONS.clear()
        _EXPIRATIONS[id(headers)] = (headers, value)
        return value
    return _expiration(source)


def _expiration(source: Source) -> int | None:
    v = _property(source, _EXPIRATION_INDEX)
    if not v or not v.isdigit():
        return None
    return int(v)


def message_id(source: Source) -> bytes | None:
    """The message-id property of a record or property section, or None."""
    return _property(source, _MESSAGE_ID_INDEX)


def timestamp(source: Source) -> int | None:
    """The timestamp property in seconds of a record's delivery or of a property section, or None."""
    if isinstance(source, Record) and not any(h.key.startswith(_RESERVED) for h in source.headers):
        return source.timestamp // 1000 if source.timestamp >= 0 else None  # Kafka-origin
    return _property(source, _TIMESTAMP_INDEX)


def headers_table(source: Source) -> dict:
    """The headers table decoded as pamqp would (last key wins), {} without one.

    Long strings are ``str`` when UTF-8 (else ``bytes``), ``x`` is ``bytes``, ``t`` ``bool``,
    ``T`` an aware UTC ``datetime``, ``D`` a ``Decimal``, ``F`` a dict, ``A`` a list.
    For a record this is the table its delivery carries.
    """
    if isinstance(source, Record):
        raw = amqp_from_record(source)[2]
    elif isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
    else:
        raw = amqp_from_record(Record(0, 0, None, b"", tuple(source)))[2]
    _, _, spans, _ = _split(raw)
    span = spans[_HEADERS_INDEX]
    if span is None:
        return {}
    start, end = span
    return _decode_table(raw, start + 4, end, 0)

