"""AMQP exceptions as the RabbitMQ model raises them: a reply code, a text, and a scope.

A :class:`ChannelError` closes one channel (404 NOT_FOUND, 405 RESOURCE_LOCKED, 406
PRECONDITION_FAILED, 403 ACCESS_REFUSED); a :class:`ConnectionError` closes the whole
connection (530 NOT_ALLOWED, 501 FRAME_ERROR, 503 COMMAND_INVALID, 505 UNEXPECTED_FRAME,
541 INTERNAL_ERROR). Texts follow RabbitMQ's ("NOT_FOUND - no queue 'q' in vhost '/'"),
which clients show to users and some match on.
"""
from __future__ import annotations

ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
CONNECTION_FORCED = 320
NO_ROUTE = 312
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

_NAMES = {ACCESS_REFUSED: "ACCESS_REFUSED", NOT_FOUND: "NOT_FOUND", RESOURCE_LOCKED: "RESOURCE_LOCKED",
          PRECONDITION_FAILED: "PRECONDITION_FAILED", CONNECTION_FORCED: "CONNECTION_FORCED",
          FRAME_ERROR: "FRAME_ERROR", SYNTAX_ERROR: "SYNTAX_ERROR", COMMAND_INVALID: "COMMAND_INVALID",
          CHANNEL_ERROR: "CHANNEL_ERROR", UNEXPECTED_FRAME: "UNEXPECTED_FRAME", RESOURCE_ERROR: "RESOURCE_ERROR",
          NOT_ALLOWED: "NOT_ALLOWED", NOT_IMPLEMENTED: "NOT_IMPLEMENTED", INTERNAL_ERROR: "INTERNAL_ERROR"}


class AmqpError(Exception):
    def __init__(self, reply_code: int, text: str):
        self.reply_code = reply_code
        self.reply_text = f"{_NAMES.get(reply_code, 'ERROR')} - {text}"
        super().__init__(self.reply_text)


class ChannelError(AmqpError):
    """Closes the channel the offending method came on."""


class ConnectionError(AmqpError):  # noqa: A001 - the AMQP name
    """Closes the connection."""


def not_found(kind: str, name: str, vhost: str) -> ChannelError:
    return ChannelError(NOT_FOUND, f"no {kind} '{name}' in vhost '{vhost}'")


def inequivalent(kind: str, name: str, vhost: str, what: str, stored, given) -> ChannelError:
    return ChannelError(PRECONDITION_FAILED, f"inequivalent arg '{what}' for {kind} '{name}' in vhost '{vhost}': "
                                             f"received '{given}' but current is '{stored}'")


_QUEUE_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue", "stream": "rabbit_stream_queue"}


def unsupported_argument(name: str, queue: str, vhost: str, queue_type: str) -> ChannelError:
    """RabbitMQ's refusal of an argument the queue's type does not take (e.g. x-max-priority on a
    quorum queue), naming the type by its Erlang module."""
    return ChannelError(PRECONDITION_FAILED, f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}' of queue "
                                             f"type {_QUEUE_MODULES.get(queue_type, queue_type)}")
