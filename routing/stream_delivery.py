"""How a stored record is delivered as AMQP 1.0 message bytes: the way back of
:mod:`routing.stream_message`'s table, for stream-protocol and AMQP 1.0 consumers.

- :func:`stream_from_record` ``(record)`` -> the AMQP 1.0 bytes a stream consumer receives;
- :func:`amqp10_from_amqp091` ``(exchange, routing_key, properties, body)`` -> the same for an
  AMQP 0-9-1 message that is not (yet) a record.

The rules, and the names shared with the conversion into the log, are described in
:mod:`routing.stream_message`; they live here because that module builds on this one (a
stream-published message is stored with what this module would deliver).
"""
from __future__ import annotations

import uuid

from routing.amqp_properties import (
    _DOUBLE, _FLOAT, _HEADERS_INDEX, _I64, _INTS, _OCTET, _PROPERTIES, _STR, _TS, _T_A, _T_D, _T_F, _T_S, _T_T, _T_V,
    _T_d, _T_f, _T_t, _T_x, _U64, _entries, _skip, _split,
)
from routing.direct_reply import PREFIX as REPLY_PREFIX
from routing.mapping import amqp_from_record
from wire.amqp10 import AMQP10Error, Message, Symbol, Typed, data_section_header, decode_message, encode_message
from wire.records import Record

X_STREAM_MESSAGE = "x-stream-message"
X_STREAM_RAW = "x-stream-raw"
_VERBATIM_091 = "amqp.h.x." + X_STREAM_MESSAGE  # the record header of a 0-9-1 'x' header of that name
STREAM_ONLY_HEADERS = frozenset({"x-stream-filter-value", "x-stream-writer", X_STREAM_MESSAGE, X_STREAM_RAW})

_AMQP_TYPE = b"amqp-1.0"  # the 0-9-1 type of a body that is AMQP 1.0 encoded sections (RabbitMQ's)
_URN = "urn:uuid:"
_X_MESSAGE_ID, _X_CORRELATION_ID = "x-message-id", "x-correlation-id"
# 0-9-1 headers that carry properties fields: name -> (properties index, table type)
_PROPERTY_HEADERS = {
    "x-amqp-to": (2, _T_S), "x-amqp-subject": (3, _T_S), "x-amqp-absolute-expiry-time": (8, ord("l")),
    "x-amqp-creation-time": (9, ord("l")), "x-amqp-group-sequence": (11, ord("i")),
    "x-amqp-reply-to-group-id": (12, _T_S),
}
_NOT_ANNOTATIONS = frozenset(("x-exchange", "x-routing-key"))  # come from the record itself
# AMQP 1.0 integer type <-> 0-9-1 field type (RabbitMQ's; ulong -> l is handled apart)
_INT_091 = {0x51: "b", 0x50: "B", 0x61: "s", 0x60: "u", 0x71: "I", 0x70: "i", 0x81: "l"}
_INT_10 = {ord(t): code for code, t in _INT_091.items()} | {ord("L"): 0x81}
_NO = object()  # "no AMQP 1.0 equivalent"
# Direct Reply-To's names (routing.direct_reply.PREFIX) as AMQP 1.0 addresses: base64url, no escaping
_REPLY_ADDRESS = "/queues/" + REPLY_PREFIX
_QUEUES_PREFIX = len("/queues/")
_CACHE_MAX = 1024  # entries per cache
_CACHED_MAX = 4096  # bytes of non-body sections (or property section) worth caching: keeps caches small


# --- record -> stream ------------------------------------------------------------------------

# Delivering: the non-body sections depend on (exchange, routing key, property section) only,
# and records of one publisher repeat them: keep them encoded. Bounded.
_OUT: dict[tuple[str, str, bytes], tuple[bytes, bool]] = {}


# A log reader shares one headers tuple between the records of a batch that carry the same
# headers (mapping's delivery forms are keyed alike): the sections before a data body, by
# (id of the headers tuple, record key), checked by identity. One lookup per delivery.
_BY_HEADERS: dict[tuple[int, bytes | None], tuple[tuple, bytes]] = {}


def stream_from_record(record: Record) -> bytes:
    """The AMQP 1.0 message bytes a stream consumer receives for ``record``; never raises."""
    headers = record.headers
    if type(headers) is tuple:
        hit = _BY_HEADERS.get((id(headers), record.key))
        if hit is not None and hit[0] is headers:
            body = record.value or b""
            return hit[1] + data_section_header(len(body)) + body
    verbatim = None
    raw = False
    kafka = True
    for h in record.headers:
        k = h.key
        if k[:5] == "amqp.":
            kafka = False
            if k == _VERBATIM_091 and h.value is not None:  # set by the AMQP 1.0 door (a 0-9-1 binary header)
                verbatim = h.value
        elif k in STREAM_ONLY_HEADERS:
            if k == X_STREAM_MESSAGE and h.value is not None:
                verbatim = h.value
            elif k == X_STREAM_RAW:
                raw = True
    if verbatim is not None:
        return bytes(verbatim)
    body = record.value or b""
    if raw:
        return body
    exchange, routing_key, props = amqp_from_record(record)
    if kafka:  # (its properties depend on the record's timestamp too: not kept)
        return _sections(exchange, routing_key, props, True) + data_section_header(len(body)) + body
    prefix, amqp_body = _form(exchange, routing_key, props)
    if amqp_body:  # (whether the body is AMQP sections depends on the body)
        return _deliver(prefix, amqp_body, body)
    if type(headers) is tuple and len(prefix) <= _CACHED_MAX:
        if len(_BY_HEADERS) >= _CACHE_MAX:
            _BY_HEADERS.clear()
        _BY_HEADERS[(id(headers), record.key)] = (headers, prefix)
    return prefix + data_section_header(len(body)) + body


def amqp10_from_amqp091(exchange: str, routing_key: str, props: bytes, body: bytes) -> bytes:
    """The AMQP 1.0 message an AMQP 1.0 consumer receives for a 0-9-1 message (a Direct Reply-To
    reply, which reaches its requester without a record); never raises."""
    return _deliver(*_form(exchange, routing_key, props), body)


def _form(exchange: str, routing_key: str, props: bytes) -> tuple[bytes, bool]:
    """(the encoded sections before the body, whether the body is AMQP 1.0 encoded sections) of
    an AMQP-form delivery. Cached."""
    cache_key = (exchange, routing_key, props)
    form = _OUT.get(cache_key)
    if form is None:
        _, _, spans, _ = _split(props)
        type_span = spans[10]
        amqp_body = type_span is not None and props[type_span[0] + 1:type_span[1]] == _AMQP_TYPE
        form = _sections(exchange, routing_key, props, False), amqp_body
        if len(props) <= _CACHED_MAX:
            if len(_OUT) >= _CACHE_MAX:
                _OUT.clear()
            _OUT[cache_key] = form
    return form


def _deliver(prefix: bytes, amqp_body: bool, body: bytes) -> bytes:
    if amqp_body and _body_sections(body):
        return prefix + body
    return prefix + data_section_header(len(body)) + body


def _body_sections(body: bytes) -> bool:
    """Whether ``body`` is an AMQP 1.0 body (amqp-value or amqp-sequence sections, maybe a footer)."""
    try:
        msg = decode_message(body)
    except AMQP10Error:
        return False
    return msg.body_kind in ("value", "sequence") and msg.header is msg.delivery_annotations is \
        msg.message_annotations is msg.properties is msg.application_properties is None


def _sections(exchange: str, routing_key: str, raw: bytes, kafka: bool) -> bytes:
    """The encoded sections before the body, for a delivery (exchange, routing key, properties)."""
    _, _, spans, _ = _split(raw)
    header: list = [None] * 5
    props: list = [None] * 13
    annotations: dict = {}
    app: dict = {}
    if routing_key:
        annotations[Symbol("x-routing-key")] = routing_key
    if not kafka:
        if exchange:
            annotations = {Symbol("x-exchange"): exchange, **annotations}
        prop = [None if span is None else _property(raw, kind, span) for (_, _, kind), span in zip(_PROPERTIES, spans)]
        if prop[10] is not None and prop[10] != _AMQP_TYPE:
            annotations[Symbol("x-basic-type")] = _text(prop[10])
        if prop[3] is not None:
            header[0] = Typed(0x56, prop[3] == 2)
        if prop[4] is not None:
            header[1] = Typed(0x50, prop[4])
        if prop[7] is not None and prop[7].isdigit() and (prop[7][:1] != b"0" or prop[7] == b"0") \
                and int(prop[7]) < (1 << 32):
            header[2] = Typed(0x70, int(prop[7]))
        for slot, index in ((8, 0), (5, 5)):  # message-id, correlation-id
            if prop[slot] is not None:
                text = _text(prop[slot])
                props[index] = _uuid(text) if isinstance(text, str) and text.startswith(_URN) else text
        if prop[11] is not None:
            props[1] = prop[11]
        for slot, index, kind in ((6, 4, str), (0, 6, Symbol), (1, 7, Symbol), (12, 10, str)):
            if prop[slot] is not None:
                text = _text(prop[slot])
                props[index] = kind(text) if isinstance(text, str) else text
        if isinstance(props[4], str) and props[4].startswith(REPLY_PREFIX):
            props[4] = "/queues/" + props[4]
        if prop[9] is not None and prop[9] * 1000 < (1 << 63):
            props[9] = Typed(0x83, prop[9] * 1000)
    span = spans[_HEADERS_INDEX]
    for name, t, p, q in (_entries(raw, span[0] + 4, span[1]) if span is not None else ()):
        try:
            key = name.decode()
        except UnicodeDecodeError:
            continue
        if key in STREAM_ONLY_HEADERS:
            continue
        if kafka:
            if key == "x-kafka-timestamp" and t == ord("l"):
                ts = _I64.unpack_from(raw, p)[0]
                if ts >= 0:
                    props[9] = Typed(0x83, ts)
            elif key == "x-kafka-headers" and t == _T_A:
                for pair in _value_10(raw, t, p, q, 0):  # [name, value] arrays
                    if len(pair) == 2 and isinstance(pair[0], str):
                        app[pair[0]] = pair[1]
            else:
                v = _value_10(raw, t, p, q, 0)
                if v is not _NO:
                    app[key] = v
            continue
        target = _PROPERTY_HEADERS.get(key)
        if target is not None and target[1] == t:
            v = _value_10(raw, t, p, q, 0)
            index = target[0]
            if t == _T_S:
                props[index] = v
            else:
                props[index] = Typed(0x83 if index in (8, 9) else 0x70, v.value)
            continue
        if key in (_X_MESSAGE_ID, _X_CORRELATION_ID) and t in (_T_S, _T_x):
            props[0 if key == _X_MESSAGE_ID else 5] = _value_10(raw, t, p, q, 0)
            continue
        if key in _NOT_ANNOTATIONS:
            continue
        v = _value_10(raw, t, p, q, 0)
        if v is _NO:
            continue
        if key[:2] == "x-":
            annotations[Symbol(key)] = v
        elif t != _T_A and t != _T_F:
            app[key] = v
    return encode_message(Message(
        header=header if any(x is not None for x in header) else None,
        message_annotations=annotations or None,
        properties=props if any(x is not None for x in props) else None,
        application_properties=app or None,
    ))


def _property(raw: bytes, kind: int, span: tuple[int, int]) -> bytes | int | None:
    start, end = span
    if kind == _STR:
        return raw[start + 1:end]
    if kind == _OCTET:
        return raw[start]
    return _U64.unpack_from(raw, start)[0] if kind == _TS else None  # the headers table: read apart


def _text(data: bytes) -> str | bytes:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data


def _uuid(text: str):
    try:
        u = uuid.UUID(text[len(_URN):])
    except ValueError:
        return text
    return u if _URN + str(u) == text else text  # only the canonical form, so it converts back


def _value_10(raw: bytes, t: int, p: int, q: int, depth: int):
    """The AMQP 1.0 value of the 0-9-1 field value raw[p:q] of type t, _NO if it has none."""
    if t == _T_S:
        return _text(raw[p + 4:q])
    if t == _T_x:
        return raw[p + 4:q]
    if t == _T_V:
        return None
    if t == _T_t:
        return Typed(0x56, raw[p] != 0)
    code = _INT_10.get(t)
    if code is not None:
        return Typed(code, _INTS[t][0].unpack_from(raw, p)[0])
    if t == _T_f:
        return Typed(0x72, _FLOAT.unpack_from(raw, p)[0])
    if t == _T_d:
        return _DOUBLE.unpack_from(raw, p)[0]
    if t == _T_T:
        ms = _U64.unpack_from(raw, p)[0] * 1000
        return Typed(0x83, ms) if ms < (1 << 63) else _NO
    if t == _T_A:
        items = []
        p += 4
        while p < q:
            end = _skip(raw, p + 1, raw[p], q, depth + 1)
            v = _value_10(raw, raw[p], p + 1, end, depth + 1)
            if v is _NO:
                return _NO
            items.append(v)
            p = end
        return items
    if t == _T_F:
        table = {}
        for name, t2, a, b in _entries(raw, p + 4, q):
            v = _value_10(raw, t2, a, b, depth + 1)
            try:
                table[Symbol(name.decode())] = v
            except UnicodeDecodeError:
                return _NO
            if v is _NO:
                return _NO
        return table
    assert t == _T_D
    return _NO  # decimal: no rule in RabbitMQ's conversion
