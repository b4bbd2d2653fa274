"""AMQP 0-9-1 for the server side, without I/O (h11 style), over pamqp.

- :mod:`wire.amqp.codec`: :class:`ServerCodec` turns received bytes into events
  (:class:`ProtocolHeader`, :class:`MethodFrame`, :class:`Message`, :class:`Heartbeat`) or raises
  :class:`AmqpFrameError` with RabbitMQ's reply code and text; its docstring is the state table.
- :mod:`wire.amqp.encoding`: functions that turn methods and messages into frames.
"""
from .codec import (
    COMMAND_INVALID, FRAME_ERROR, FRAME_MAX_DEFAULT, MAX_BODY_SIZE, NEED_DATA, PROTOCOL_HEADER, UNEXPECTED_FRAME,
    AmqpFrameError, Event, Heartbeat, Message, MethodFrame, ProtocolHeader, ServerCodec,
)
from .encoding import (
    delivery_tag_at, encode_delivery, encode_heartbeat, encode_message, encode_method, encode_properties, unchecked,
    with_delivery_tag,
)

__all__ = [
    "NEED_DATA", "PROTOCOL_HEADER", "FRAME_MAX_DEFAULT", "MAX_BODY_SIZE",
    "FRAME_ERROR", "COMMAND_INVALID", "UNEXPECTED_FRAME",
    "AmqpFrameError", "ProtocolHeader", "MethodFrame", "Message", "Heartbeat", "Event", "ServerCodec",
    "encode_method", "encode_message", "encode_delivery", "encode_properties", "encode_heartbeat", "unchecked",
    "delivery_tag_at", "with_delivery_tag",
]
