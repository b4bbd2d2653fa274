"""The filters of an AMQP 1.0 receiver on a stream, as RabbitMQ 4.1 / 4.2 evaluate them on the
broker: only messages that pass every filter are delivered (so link credit counts only them).

A receiver's source ``filter`` map (name -> described value) may hold:

====================================== ==========================================================
descriptor                             meaning
====================================== ==========================================================
``rabbitmq:stream-offset-spec``        where to start (read by the link, echoed here)
``rabbitmq:stream-filter``             a string or list of strings: the message's
                                       ``x-stream-filter-value`` must be one of them
``rabbitmq:stream-match-unfiltered``   true: a message without a filter value passes that test too
``amqp:properties-filter`` (0x173)     a map field -> value over the properties section
``amqp:application-properties-filter`` a map name -> value over the application properties
(0x174)
``amqp:sql-filter`` (0x120)            an SQL expression (:mod:`wire.amqp10_sql`)
====================================== ==========================================================

Property filters (OASIS AMQP Filter Expressions §4): every field given must match; a string value
``&p:x`` matches a prefix, ``&s:x`` a suffix, ``&&x`` is ``&x`` itself (another ``&`` start is
invalid); numbers of any type compare by value, strings, symbols and binaries by their bytes;
in the application-properties filter a null value matches any value of a present key. At most
:data:`MAX_FIELDS` fields per filter (RabbitMQ's bound). SQL and property filters cannot be
combined, nor two property filters of the same section.

RabbitMQ's Bloom-filter values only skip whole chunks and leave the rest to the client; here the
values are tested per message, which delivers exactly what a client-side check would keep.

Where RabbitMQ quietly leaves an invalid filter out of the attach it echoes (so the client may
notice it is not in place), this broker refuses the link (:class:`FilterError`, sent as
``amqp:invalid-field`` with the reason): a mistyped expression then fails loudly instead of
delivering every message. Filters of other descriptors are not in place and are not echoed.
"""
from __future__ import annotations

import uuid

from routing.stream_message import stream_from_record
from routing.streams import FILTER_HEADER
from wire.amqp10 import AMQP10Error, PROPERTIES_FIELDS, Described, Symbol, Typed, decode_message
from wire.amqp10_sql import Fields, SqlError, compile_sql

__all__ = ["FilterError", "FilterSet", "MAX_FIELDS", "parse_filter_set"]

MAX_FIELDS = 16
PROPERTIES, APPLICATION_PROPERTIES, SQL = "amqp:properties-filter", "amqp:application-properties-filter", \
    "amqp:sql-filter"
_CODES = {0x173: PROPERTIES, 0x174: APPLICATION_PROPERTIES, 0x120: SQL}
OFFSET_SPEC, STREAM_FILTER, MATCH_UNFILTERED = "rabbitmq:stream-offset-spec", "rabbitmq:stream-filter", \
    "rabbitmq:stream-match-unfiltered"
CAPABILITIES = ("AMQP_FILTEX_PROP_V1_0", "AMQP_FILTEX_SQL_V1_0")  # offered on a stream's attach
_STRINGS = {"to", "subject", "reply-to", "group-id", "reply-to-group-id"}
_IDS = {"message-id", "correlation-id"}
_SYMBOLS = {"content-type", "content-encoding"}
_NUMBERS = {"absolute-expiry-time", "creation-time", "group-sequence"}
_INDEX = {name.replace("_", "-"): i for i, name in enumerate(PROPERTIES_FIELDS)}


class FilterError(ValueError):
    """A filter this broker knows is malformed: the link is refused with amqp:invalid-field."""


def plain_value(v):
    """An AMQP value as the filters compare it: None, bool, int, float or bytes (strings and
    symbols as UTF-8, a uuid as its 16 octets); None for values no filter can compare."""
    t = type(v)
    if t is str or t is Symbol:
        return v.encode()
    if t is bytes or t is bool or t is int or t is float:
        return v
    if t is Typed:
        x = v.value
        return x if type(x) in (bool, int, float) else None
    if t is uuid.UUID:
        return v.bytes
    return None


class _Affix:
    __slots__ = ("text", "prefix")

    def __init__(self, text: bytes, prefix: bool):
        self.text, self.prefix = text, prefix

    def matches(self, v) -> bool:
        if type(v) is not bytes:
            return False
        return v.startswith(self.text) if self.prefix else v.endswith(self.text)


def _reference(v, modifiers: bool):
    """A filter's reference value: an :class:`_Affix` or a plain value."""
    if modifiers and type(v) is str and v.startswith("&"):
        if v.startswith("&p:") or v.startswith("&s:"):
            return _Affix(v[3:].encode(), v[1] == "p")
        if v.startswith("&&"):
            return v[1:].encode()
        raise FilterError(f"string {v!r} starts with '&' but is no &p:, &s: or && form")
    p = plain_value(v)
    if p is None and v is not None:
        raise FilterError(f"value {v!r} cannot be compared")
    return p


def _matches(ref, v) -> bool:
    if ref is None:
        return True
    if type(ref) is _Affix:
        return ref.matches(v)
    if type(ref) in (int, float) and type(v) in (int, float):
        return ref == v
    return type(ref) is type(v) and ref == v


def _properties(value: dict) -> list[tuple[int, object]]:
    out = []
    for key, v in value.items():
        name = key if isinstance(key, str) else None
        if name not in _INDEX:
            raise FilterError(f"properties filter: unknown field {key!r}")
        if name in _STRINGS:
            ok = type(v) is str
        elif name in _IDS:
            ok = type(v) in (str, bytes, uuid.UUID) or (type(v) is Typed and v.code == 0x80)
        elif name in _SYMBOLS:
            ok = isinstance(v, str)
        elif name == "user-id":
            ok = type(v) is bytes
        else:  # timestamps and group-sequence: any integer
            ok = type(v) is int or (type(v) is Typed and type(v.value) is int)
        if not ok:
            raise FilterError(f"properties filter: {name} cannot be {v!r}")
        out.append((_INDEX[name], _reference(v, name in _STRINGS or name in _IDS)))
    return out


def _application_properties(value: dict) -> list[tuple[str, object]]:
    out = []
    for key, v in value.items():
        if not isinstance(key, str) or type(key) is Symbol:
            raise FilterError(f"application-properties filter: key {key!r} is not a string")
        out.append((key, _reference(v, True)))
    return out


class FilterSet:
    """The filters in place on one receiver: :meth:`accepts` says whether a record passes."""

    def __init__(self):
        self.in_place: dict = {}  # what the attach echoes: "the filter actually in place"
        self.values: set[bytes] | None = None
        self.match_unfiltered = False
        self.properties: list[tuple[int, object]] | None = None
        self.application_properties: list[tuple[str, object]] | None = None
        self.sql = None

    @property
    def filtering(self) -> bool:
        return (self.values is not None or self.properties is not None
                or self.application_properties is not None or self.sql is not None)

    def accepts(self, record) -> bool:
        if self.values is not None:
            value = next((h.value for h in record.headers if h.key == FILTER_HEADER), None)
            if value is None:
                if not self.match_unfiltered:
                    return False
            elif bytes(value) not in self.values:
                return False
        if self.properties is None and self.application_properties is None and self.sql is None:
            return True
        fields = message_fields(record)
        if self.properties is not None:
            props = fields.properties
            for index, ref in self.properties:
                if not _matches(ref, props.get(PROPERTIES_FIELDS[index])):
                    return False
        if self.application_properties is not None:
            app = fields.application_properties
            for key, ref in self.application_properties:
                if key not in app or not _matches(ref, app[key]):
                    return False
        return self.sql is None or self.sql(fields)


def message_fields(record) -> Fields:
    """What the filters read of a record: the AMQP 1.0 message a stream consumer gets."""
    try:
        msg = decode_message(stream_from_record(record))
    except AMQP10Error:  # raw bytes: no sections
        return Fields()
    header = msg.header or ()
    priority = plain_value(header[1]) if len(header) > 1 else None
    props = {PROPERTIES_FIELDS[i]: plain_value(v) for i, v in enumerate(msg.properties or ()) if v is not None}
    app = {k: plain_value(v) for k, v in (msg.application_properties or {}).items() if isinstance(k, str)}
    return Fields(priority, props, app)


def _descriptor(value) -> str | None:
    if type(value) is not Described:
        return None
    d = value.descriptor
    return _CODES.get(d) if type(d) is int else (str(d) if isinstance(d, str) else None)


def parse_filter_set(filters) -> FilterSet:
    """The filters of a receiver's source ``filter`` map; FilterError for an invalid one."""
    fs = FilterSet()
    if not isinstance(filters, dict):
        return fs
    for name, value in filters.items():
        kind = _descriptor(value)
        v = value.value if kind is not None else None
        if kind == OFFSET_SPEC:
            pass
        elif kind == STREAM_FILTER:
            items = v if isinstance(v, list) else [v]
            if not items or not all(type(x) is str for x in items):
                raise FilterError("rabbitmq:stream-filter takes a string or a list of strings")
            fs.values = (fs.values or set()) | {x.encode() for x in items}
        elif kind == MATCH_UNFILTERED:
            if type(v) is not bool:
                raise FilterError("rabbitmq:stream-match-unfiltered takes a boolean")
            fs.match_unfiltered = v
        elif kind in (PROPERTIES, APPLICATION_PROPERTIES):
            if not isinstance(v, dict) or not v or len(v) > MAX_FIELDS:
                raise FilterError(f"{kind} takes a map of 1 to {MAX_FIELDS} entries")
            if fs.sql is not None:
                raise FilterError("SQL and property filter expressions cannot be combined")
            attr = "properties" if kind == PROPERTIES else "application_properties"
            if getattr(fs, attr) is not None:
                raise FilterError(f"more than one {kind}")
            setattr(fs, attr, _properties(v) if kind == PROPERTIES else _application_properties(v))
        elif kind == SQL:
            if fs.properties is not None or fs.application_properties is not None:
                raise FilterError("SQL and property filter expressions cannot be combined")
            if fs.sql is not None:
                raise FilterError("more than one SQL filter")
            try:
                fs.sql = compile_sql(v)
            except SqlError as exc:
                raise FilterError(f"SQL filter {name!s}: {exc}") from None
        else:
            continue  # not ours: not in place, so not echoed
        fs.in_place[name] = value
    return fs
