"""Sending AMQP 0-9-1 from the server: values in, bytes out, ready for one transport write.

:func:`encode_method` (one method frame), :func:`encode_message` (method + content header + body
frames split at ``frame_max``), :func:`encode_properties`, :func:`encode_heartbeat`.

Methods sent once per message (``Basic.Deliver``, ``Basic.GetOk``, and ``Basic.Ack``/``Basic.Nack``
for publisher confirms) are encoded by hand with ``struct``; every other method by a generic
loop over pamqp's field types. The tests prove both byte-identical to pamqp's own
``pamqp.frame.marshal``. Neither runs pamqp's ``validate()``: its name pattern refuses exchange
and queue names that RabbitMQ accepts.
"""
from __future__ import annotations

import inspect
import struct
from functools import cache

from pamqp import encode as pamqp_encode, heartbeat as pamqp_heartbeat
from pamqp.commands import Basic

from .codec import FRAME_MAX_DEFAULT

__all__ = ["encode_method", "encode_message", "encode_delivery", "encode_properties", "encode_heartbeat",
           "delivery_tag_at", "with_delivery_tag"]

_METHOD, _HEADER, _BODY = 1, 2, 3
_BASIC = 60
_FRAME_END_BYTE = b"\xce"
_FRAME_HEAD = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">HH")
_INDEX = struct.Struct(">I")
_CONTENT_HEAD = struct.Struct(">HHQ")


def encode_heartbeat() -> bytes:
    return _HEARTBEAT_FRAME


_HEARTBEAT_FRAME = pamqp_heartbeat.Heartbeat.marshal()


def _shortstr(value: str) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"short string expected, got {type(value).__name__}")
    data = value.encode()
    if len(data) > 255:
        raise ValueError(f"short string of {len(data)} bytes (255 at most): {value[:40]!r}...")
    return bytes((len(data),)) + data


# Hand encoders for methods sent once per message: payload bytes after class/method ids.
_DELIVER_PREFIX = _CLASS_METHOD.pack(60, 60)
_GET_OK_PREFIX = _CLASS_METHOD.pack(60, 71)
_ACK = struct.Struct(">HHQB")
_QB = struct.Struct(">QB")


def _deliver_payload(m: Basic.Deliver) -> bytes:
    return b"".join((_DELIVER_PREFIX, _shortstr(m.consumer_tag), _QB.pack(m.delivery_tag, 1 if m.redelivered else 0),
                     _shortstr(m.exchange), _shortstr(m.routing_key)))


def _get_ok_payload(m: Basic.GetOk) -> bytes:
    return b"".join((_GET_OK_PREFIX, _QB.pack(m.delivery_tag, 1 if m.redelivered else 0),
                     _shortstr(m.exchange), _shortstr(m.routing_key), struct.pack(">I", m.message_count)))


def _ack_payload(m: Basic.Ack) -> bytes:
    return _ACK.pack(60, 80, m.delivery_tag, 1 if m.multiple else 0)


def _nack_payload(m: Basic.Nack) -> bytes:
    return _ACK.pack(60, 120, m.delivery_tag, (1 if m.multiple else 0) | (2 if m.requeue else 0))


_HOT = {Basic.Deliver: _deliver_payload, Basic.GetOk: _get_ok_payload, Basic.Ack: _ack_payload,
        Basic.Nack: _nack_payload}


_LAYOUTS: dict[type, tuple[bytes, tuple[tuple[str, str], ...]]] = {}


def _layout(cls) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = (_INDEX.pack(cls.index),
                                  tuple((name, getattr(cls, "_" + name)) for name in cls.__slots__))
    return layout


def _method_payload(method) -> bytes:
    """Class and method ids, then the fields in spec order, consecutive bits packed into octets.

    The field types come from pamqp's command classes and each value is encoded by
    ``pamqp.encode``; unlike ``Frame.marshal`` this does not run pamqp's ``validate()``, whose
    name pattern refuses exchange and queue names RabbitMQ accepts (any UTF-8, up to 255 bytes).
    """
    hot = _HOT.get(type(method))
    if hot is not None:
        return hot(method)
    prefix, layout = _layout(type(method))
    out, bits, nbits = [prefix], 0, 0
    for name, kind in layout:
        value = getattr(method, name)
        if kind == "bit":
            if nbits == 8:
                out.append(bytes((bits,)))
                bits = nbits = 0
            if value:
                bits |= 1 << nbits
            nbits += 1
            continue
        if nbits:
            out.append(bytes((bits,)))
            bits = nbits = 0
        if kind == "shortstr":
            out.append(_shortstr(value))
        else:
            out.append(pamqp_encode.by_type(value, kind))
    if nbits:
        out.append(bytes((bits,)))
    return b"".join(out)


@cache
def _init_names(cls) -> tuple[str, ...]:
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")


def unchecked(cls, *args):
    """A pamqp method made without running its ``validate()`` (see the module docstring): for
    replies that carry a queue or exchange name the broker accepted, e.g. ``Queue.DeclareOk``."""
    method = cls.__new__(cls)
    names = _init_names(cls)
    for name, value in zip(names, args):
        setattr(method, name, value)
    for name in names[len(args):]:
        setattr(method, name, inspect.signature(cls.__init__).parameters[name].default)
    return method


def encode_method(channel: int, method) -> bytes:
    """One method frame. Raises ValueError/TypeError for values the protocol cannot carry."""
    payload = _method_payload(method)
    return b"".join((_FRAME_HEAD.pack(_METHOD, channel, len(payload)), payload, _FRAME_END_BYTE))


_EMPTY_PROPERTIES = b"\x00\x00"


def encode_properties(properties: Basic.Properties | bytes | None) -> bytes:
    """Flags + property list as carried in a content header (``bytes`` pass through as is)."""
    if properties is None:
        return _EMPTY_PROPERTIES
    if isinstance(properties, (bytes, bytearray)):
        return bytes(properties)
    return properties.marshal()


def encode_message(channel: int, method, properties: Basic.Properties | bytes | None, body: bytes,
                   frame_max: int = FRAME_MAX_DEFAULT) -> bytes:
    """Method + content header + body frames (each body payload at most ``frame_max - 8``).

    ``properties`` may be a pamqp ``Basic.Properties``, None (no properties), or the raw
    flags-and-list bytes (e.g. :attr:`Message.properties_raw`, or a cached encoding).
    A zero-length body is sent as no body frame at all, as RabbitMQ does.
    """
    return _with_content(channel, _method_payload(method), encode_properties(properties), body, frame_max)


def encode_delivery(channel: int, consumer_tag: str, delivery_tag: int, redelivered: bool, exchange: str,
                    routing_key: str, properties_raw: bytes, body: bytes, frame_max: int = FRAME_MAX_DEFAULT) -> bytes:
    """``encode_message(channel, Basic.Deliver(...), properties_raw, body, frame_max)``, byte for byte,
    without making the pamqp method object (whose constructor validates every field): once per delivery."""
    payload = b"".join((_DELIVER_PREFIX, _short(consumer_tag), _QB.pack(delivery_tag, 1 if redelivered else 0),
                        _short(exchange), _short(routing_key)))
    return _with_content(channel, payload, properties_raw, body, frame_max)


_TAG = struct.Struct(">Q")


def delivery_tag_at(consumer_tag: str) -> int:
    """Where the delivery tag starts in :func:`encode_delivery`'s bytes for ``consumer_tag``: after
    the frame head, the class and method ids and the consumer tag."""
    return _FRAME_HEAD.size + _CLASS_METHOD.size + len(_short(consumer_tag))


def with_delivery_tag(frames: bytes, at: int, delivery_tag: int) -> bytes:
    """``frames`` (an :func:`encode_delivery` made elsewhere, its tag left zero) with ``delivery_tag``
    at ``at`` (:func:`delivery_tag_at`)."""
    return b"".join((frames[:at], _TAG.pack(delivery_tag), frames[at + 8:]))


_SHORTS: dict[str, bytes] = {}


def _short(value: str) -> bytes:
    """:func:`_shortstr` through a bounded cache: consumer tags, exchanges and routing keys repeat."""
    data = _SHORTS.get(value)
    if data is None:
        data = _shortstr(value)
        if len(_SHORTS) >= 1024:
            _SHORTS.clear()
        _SHORTS[value] = data
    return data


def _with_content(channel: int, payload: bytes, props: bytes, body: bytes, frame_max: int) -> bytes:
    size = len(body)
    head = _FRAME_HEAD.pack
    parts = [head(_METHOD, channel, len(payload)), payload, _FRAME_END_BYTE,
             head(_HEADER, channel, 12 + len(props)), _CONTENT_HEAD.pack(_BASIC, 0, size), props, _FRAME_END_BYTE]
    chunk = frame_max - 8 if frame_max > 0 else size
    if size <= chunk:
        if size:
            parts += (head(_BODY, channel, size), body, _FRAME_END_BYTE)
    else:
        with memoryview(body) as view:
            for start in range(0, size, chunk):
                piece = view[start:start + chunk]
                parts += (head(_BODY, channel, len(piece)), piece, _FRAME_END_BYTE)
            return b"".join(parts)
    return b"".join(parts)

