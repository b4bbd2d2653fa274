"""A RabbitMQ stream-protocol message as a Kafka record and back.

Stream clients publish and receive AMQP 1.0 message-format bytes (:mod:`wire.amqp10`), or any
raw bytes. The log stores records; a stream-published message is stored as the AMQP 0-9-1
message RabbitMQ would convert it to (its documented AMQP 1.0 -> 0-9-1 conversion), through
:func:`routing.mapping.record_from_amqp`, so AMQP consumers get normal properties and headers and
Kafka consumers the documented ``amqp.*`` headers and the body as the record value.

- :func:`record_from_stream` ``(message, now_ms)`` -> ``(key, value, headers, timestamp_ms)``;
- :func:`stream_from_record` ``(record)`` -> the AMQP 1.0 bytes a stream consumer receives.

AMQP 1.0 -> AMQP 0-9-1 (RabbitMQ's rules; ``x-amqp-*`` entries are ours, for fields 0-9-1 lacks)
-------------------------------------------------------------------------------------------------

======================================= ============================================================
AMQP 1.0                                AMQP 0-9-1 (record: see :mod:`routing.mapping`)
======================================= ============================================================
header durable true / false             delivery-mode 2 / 1
header priority                         priority
header ttl                              expiration (milliseconds as decimal text)
properties message-id, correlation-id   message-id, correlation-id: a string up to 255 bytes as is,
                                        a uuid as ``urn:uuid:<uuid>``, a ulong as decimal text; a
                                        longer string (``S``) or binary (``x``) as header
                                        ``x-message-id`` / ``x-correlation-id``
properties user-id                      user-id (if UTF-8, up to 255 bytes)
properties reply-to, group-id           reply-to, app-id (up to 255 bytes); a reply-to
                                        ``/queues/amq.rabbitmq.reply-to.<suffix>`` (Direct Reply-To)
                                        as ``amq.rabbitmq.reply-to.<suffix>``, the name a 0-9-1
                                        responder publishes to
properties content-type, -encoding      content-type, content-encoding
properties creation-time                timestamp (seconds); if not a whole second (or negative),
                                        also header ``x-amqp-creation-time`` (``l``, milliseconds)
properties to, subject,                 headers ``x-amqp-to``, ``x-amqp-subject``,
reply-to-group-id                       ``x-amqp-reply-to-group-id`` (``S``)
properties absolute-expiry-time         header ``x-amqp-absolute-expiry-time`` (``l``, milliseconds)
properties group-sequence               header ``x-amqp-group-sequence`` (``i``)
message-annotations ``x-exchange``,     the exchange and the routing key (so the record key)
``x-routing-key`` (strings)
message-annotations ``x-basic-type``    type
other ``x-`` message-annotations        headers, same name, typed as below
application-properties                  headers, same name, typed as below
data section(s)                         the body (the record value), concatenated
amqp-value / amqp-sequence body         the body sections (and footer) encoded, as the body;
                                        type ``amqp-1.0``
======================================= ============================================================

Value types: string, symbol -> ``S``; binary ``x``; boolean ``t``; byte ``b``, ubyte ``B``,
short ``s``, ushort ``u``, int ``I``, uint ``i``, long and ulong ``l`` (a ulong past 2^63 - 1 is
left out); float ``f``, double ``d``; timestamp ``T`` (seconds; a negative one is left out); null
``V``; list and array ``A``; map ``F``. char, uuid, decimal and described values are left out.

The way back (:func:`stream_from_record`, :func:`amqp10_from_amqp091`) inverts that table - a
0-9-1 reply-to that is a Direct Reply-To name becomes ``/queues/<name>``, delivery-mode 2 -> durable (other
values not durable), type -> ``x-basic-type``, ``x-`` headers -> message annotations (symbol
keys), other headers -> application properties (``A`` and ``F`` left out), ``S`` -> string if
UTF-8 else binary, ``T`` -> timestamp, ``D`` and cluster-id left out, a canonical ``urn:uuid:``
id -> uuid - and builds the message as the rstream client encodes it (all 5 header and 13
properties fields, one-octet booleans, compact integers, one data section), so an rstream
message that the table carries completely comes back byte for byte. Headers named in
:data:`STREAM_ONLY_HEADERS` never become message fields.

Exactness: every stream-published message is delivered back byte for byte.
:func:`record_from_stream` rebuilds what :func:`stream_from_record` would deliver; where that
differs from the input (delivery annotations, a footer after a data body, a ulong id, a string id
in ``urn:uuid:`` form, an application property that is a symbol, uuid, sub-second timestamp or has
an ``x-`` name, any encoding other than the one above...) the record also carries header
``x-stream-message``: the original bytes, delivered verbatim. Bytes that are not an AMQP 1.0
message are stored as the value with one header ``x-stream-raw`` (null) and delivered as they are.

Kafka-origin records (no ``amqp.`` header) are delivered with the record headers as application
properties (string if UTF-8, else binary; null stays null), the key as message annotation
``x-routing-key`` when :func:`routing.mapping.amqp_from_record` makes it the routing key, else
application property ``x-kafka-key`` (binary), a tombstone flagged ``x-kafka-tombstone`` (true)
with an empty data section, and the record timestamp as creation-time (when not negative).

An AMQP 0-9-1 consumer of a stream-published record sees ``x-stream-message`` (and the
front door's ``x-stream-filter-value`` / ``x-stream-writer``) as plain long-string headers,
``x-stream-raw`` as a void one; Kafka consumers see them as record headers.
"""
from __future__ import annotations

import struct
import uuid

from routing.amqp_properties import _HEADERS_INDEX, _PROPERTIES, _T_S, _U64, encode_table
from routing.mapping import record_from_amqp, stored_form
from routing.stream_delivery import (
    STREAM_ONLY_HEADERS, X_STREAM_MESSAGE, X_STREAM_RAW, _AMQP_TYPE, _CACHE_MAX, _CACHED_MAX, _INT_091,
    _NOT_ANNOTATIONS, _PROPERTY_HEADERS, _QUEUES_PREFIX, _REPLY_ADDRESS, _URN, _X_CORRELATION_ID, _X_MESSAGE_ID,
    _deliver, _form, amqp10_from_amqp091, stream_from_record,
)
from wire.amqp10 import (Array, Message, Symbol, Typed, bare_message, data_section_body, data_section_header,
                         data_section_start, decode_message, value_end)
from wire.records import Header, Record

__all__ = ["STREAM_ONLY_HEADERS", "X_STREAM_MESSAGE", "amqp091_from_amqp10", "amqp10_from_amqp091", "bare_kept",
           "data_body", "record_from_stream", "stream_from_record"]


# --- stream -> record ------------------------------------------------------------------------

# A publisher repeats its non-body sections: keep, per those sections' bytes, what they convert
# to and whether the rebuilt message reproduced them (so a hit costs a few slices, no decoding).
_IN: dict[bytes, tuple[str, str, bytes, bool]] = {}


def record_from_stream(message: bytes, now_ms: int) -> tuple[bytes | None, bytes | None, tuple[Header, ...], int]:
    """(key, value, headers, timestamp_ms) of the record that stores a stream-published message."""
    data = message if type(message) is bytes else bytes(message)
    p = data_section_start(data)
    if 0 <= p <= _CACHED_MAX:
        hit = _IN.get(data[:p])
        if hit is not None:
            exchange, routing_key, props, exact = hit
            body, compact = data_section_body(data, p)
            key, value, headers, ts, _ = stored_form(exchange, routing_key, props, body, now_ms)
            if value is body:  # else mapping's Kafka-record form (an empty body can make it): see below
                if not (exact and compact):
                    headers += (Header(X_STREAM_MESSAGE, data),)
                return key, value, headers, ts
    try:
        msg = decode_message(data)
        exchange, routing_key, props, body = _to_091(msg, data)
        key, value, headers, ts = record_from_amqp(exchange, routing_key, props, body, now_ms)
    except ValueError:  # not an AMQP 1.0 message (AMQP10Error); or one we failed to convert (a bug):
        return None, data, (Header(X_STREAM_RAW, None),), now_ms  # stored raw, still delivered exactly
    amqp_form = value is body and any(h.key[:5] == "amqp." for h in headers)
    if amqp_form and len(key or b"") < 256 and len(exchange.encode()) < 256:
        # what stream_from_record delivers, without re-reading the record: mapping guarantees that
        # amqp_from_record gives back (exchange, routing key, section) for such a record
        prefix, amqp_body = _form(exchange, routing_key, props)
        rebuilt = _deliver(prefix, amqp_body, body)
    else:
        rebuilt = stream_from_record(Record(0, ts, key, value, headers))
    if rebuilt != data:
        headers += (Header(X_STREAM_MESSAGE, data),)
    if 0 <= p <= _CACHED_MAX and amqp_form:
        # the cached verdict must not depend on the body: only AMQP-form records, one data section
        if len(_IN) >= _CACHE_MAX:
            _IN.clear()
        _IN[data[:p]] = (exchange, routing_key, props, rebuilt == data[:p] + data_section_header(len(body)) + body)
    return key, value, headers, ts


def amqp091_from_amqp10(data: bytes) -> tuple[Message, str, str, bytes, bytes]:
    """(the decoded message, exchange and routing key from its annotations, 0-9-1 property
    section, body) of an AMQP 1.0 message, by the table above (the AMQP 1.0 door publishes
    through the router with these). AMQP10Error if ``data`` is not one message."""
    msg = decode_message(data)
    return (msg, *_to_091(msg, data))


def data_body(data: bytes) -> tuple[int, bytes] | None:
    """(where its one data section starts, that section's bytes) of a message whose only body is
    one data section at its end, else None: the sections before it can be cached as a key."""
    p = data_section_start(data)
    if p < 0:
        return None
    return p, data_section_body(data, p)[0]


def bare_kept(data: bytes, exchange: str, routing_key: str, props: bytes, body: bytes) -> bool:
    """Whether a stream consumer of the record stored from (exchange, routing key, props, body)
    gets ``data``'s bare message (properties to the end) back byte for byte."""
    prefix, amqp_body = _form(exchange, routing_key, props)
    return bare_message(_deliver(prefix, amqp_body, body)) == bare_message(data)


def _field(fields: list | None, i: int):
    return fields[i] if fields is not None and i < len(fields) else None


def _short(value) -> bytes | None:
    """A short-string property's wire form (length octet + UTF-8), or None if it cannot be one."""
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, bytes):
        return None
    return bytes((len(value),)) + value if len(value) < 256 else None


def _typed(v, code: int):
    return v.value if type(v) is Typed and v.code == code else None


def _to_091(msg: Message, data: bytes) -> tuple[str, str, bytes, bytes]:
    """(exchange, routing key, property section, body) RabbitMQ would convert ``msg`` to."""
    slots: list[bytes | None] = [None] * 14  # in _PROPERTIES order
    entries: list[tuple] = []  # the headers table: (name, type, value)
    header, props = msg.header, msg.properties

    durable = _field(header, 0)
    if type(durable) is Typed and durable.code == 0x56:
        durable = durable.value
    if type(durable) is bool:
        slots[3] = b"\x02" if durable else b"\x01"
    priority = _typed(_field(header, 1), 0x50)
    if priority is not None:
        slots[4] = bytes((priority,))
    ttl = _typed(_field(header, 2), 0x70)
    if ttl is not None:
        slots[7] = _short(str(ttl))

    for index, slot, name in ((0, 8, _X_MESSAGE_ID), (5, 5, _X_CORRELATION_ID)):
        ident = _field(props, index)
        if isinstance(ident, str):
            slots[slot] = _short(ident)
            if slots[slot] is None:
                entries.append((name, "S", ident))
        elif isinstance(ident, uuid.UUID):
            slots[slot] = _short(_URN + str(ident))
        elif type(ident) is Typed and ident.code == 0x80:
            slots[slot] = _short(str(ident.value))
        elif isinstance(ident, bytes):
            entries.append((name, "x", ident))
    user_id = _field(props, 1)
    if isinstance(user_id, bytes):
        try:
            user_id.decode()
            slots[11] = _short(user_id)
        except UnicodeDecodeError:
            pass
    for index, slot in ((4, 6), (6, 0), (7, 1), (10, 12)):  # reply-to, content-type, -encoding, group-id
        value = _field(props, index)
        if isinstance(value, str):
            if index == 4 and value.startswith(_REPLY_ADDRESS):  # as RabbitMQ 4.2: the name a 0-9-1 responder uses
                value = value[_QUEUES_PREFIX:]
            slots[slot] = _short(value)
    created = _typed(_field(props, 9), 0x83)
    if created is not None:
        if created >= 0:
            slots[9] = _U64.pack(created // 1000)
        if created % 1000 or created < 0:
            entries.append(("x-amqp-creation-time", "l", created))
    for name, (index, t) in _PROPERTY_HEADERS.items():
        value = _field(props, index)
        if index == 9:  # creation-time: above
            continue
        if t == _T_S and isinstance(value, str):
            entries.append((name, "S", value))
        elif t != _T_S and type(value) is Typed and value.code == (0x83 if t == ord("l") else 0x70):
            entries.append((name, chr(t), value.value))

    exchange = routing_key = ""
    for k, v in (msg.message_annotations or {}).items():
        if not isinstance(k, str) or k[:2] != "x-" or len(k.encode()) > 255:
            continue
        if k in _NOT_ANNOTATIONS:
            if isinstance(v, str):
                if k == "x-exchange":
                    exchange = v
                else:
                    routing_key = v
        elif k == "x-basic-type" and isinstance(v, str) and msg.body_kind in ("data", None) and v != "amqp-1.0":
            slots[10] = _short(v)
        else:
            tv = _value_091(v)
            if tv is not None:
                entries.append((k, *tv))
    for k, v in (msg.application_properties or {}).items():
        if isinstance(k, str) and len(k.encode()) < 256:
            tv = _value_091(v)
            if tv is not None:
                entries.append((k, *tv))

    if msg.body_kind == "data":
        body = msg.body[0] if len(msg.body) == 1 else b"".join(msg.body)
    elif msg.body_kind is None:
        body = b""
    else:  # RabbitMQ: the body sections (and footer) stay AMQP 1.0 encoded, typed amqp-1.0
        sections = sum(s is not None for s in (msg.header, msg.delivery_annotations, msg.message_annotations,
                                                msg.properties, msg.application_properties))
        p = 0
        for _ in range(sections):
            p = value_end(data, p)
        body = data[p:]
        slots[10] = _short(_AMQP_TYPE)
    if entries:
        slots[_HEADERS_INDEX] = encode_table(entries)
    flags = 0
    for (bit, _, _), wire in zip(_PROPERTIES, slots):
        if wire is not None:
            flags |= bit
    return exchange, routing_key, struct.pack(">H", flags) + b"".join(filter(None, slots)), body


def _value_091(v) -> tuple[str, object] | None:
    """(0-9-1 field type, value for encode_table) of an AMQP 1.0 value, None if it has none."""
    if v is None:
        return "V", None
    t = type(v)
    if t is bool:
        return "t", v
    if t is Typed:
        code, x = v.code, v.value
        if code == 0x56:
            return "t", x
        if code in _INT_091:
            return _INT_091[code], x
        if code == 0x80:
            return ("l", x) if x < (1 << 63) else None
        if code == 0x72:
            return "f", x
        if code == 0x83:
            return ("T", x // 1000) if x >= 0 else None
        return None  # char, decimals
    if isinstance(v, str):
        return "S", v
    if isinstance(v, bytes):
        return "x", v
    if t is float:
        return "d", v
    if isinstance(v, list):
        if isinstance(v, Array) and v.descriptor is not None:
            return None
        items = [_value_091(x) for x in (_typed_items(v) if isinstance(v, Array) else v)]
        return None if None in items else ("A", items)
    if t is dict:
        fields = []
        for k, x in v.items():
            tv = _value_091(x)
            if not isinstance(k, str) or len(k.encode()) > 255 or tv is None:
                return None
            fields.append((k, *tv))
        return "F", fields
    return None  # uuid, described


def _typed_items(a: Array) -> list:
    """An array's plain items as scalar values of its type."""
    if a.code == 0x56:
        return [bool(x) for x in a]
    if a.code in _INT_091 or a.code in (0x80, 0x72, 0x83, 0x73, 0x74, 0x84, 0x94):
        return [Typed(a.code, x) for x in a]
    if a.code == 0xa3:
        return [Symbol(x) for x in a]
    return list(a)
