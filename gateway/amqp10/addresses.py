"""Link addresses, as RabbitMQ 4 reads them (its "address v2" scheme, and the older v1 forms).

========================================= =====================================================
address                                   meaning
========================================= =====================================================
``/queues/:queue``                        a target: the default exchange with the queue's name
                                          as routing key; a source: consume from the queue
``/exchanges/:exchange/:routing-key``     a target: that exchange with that routing key
``/exchanges/:exchange``                  a target: that exchange, each message's ``subject``
                                          as its routing key
null target                               each message's ``to`` is one of the addresses above
                                          (the anonymous terminus)
``/management``                           the management node (request/response link pair)
``/amq/queue/:q``, ``/queue/:q``,         RabbitMQ 3's forms, still understood (``/queue/:q``
``/exchange/:x[/:key]``, ``/topic/:key``  and ``/amq/queue/:q`` name an existing queue here)
========================================= =====================================================

Segments are percent-encoded (RFC 3986 unreserved characters stay as they are): ``%2F`` is a
``/`` inside a name. An address that fits none of these forms is :class:`BadAddress`.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

MANAGEMENT = "/management"


class BadAddress(ValueError):
    """Not an address this broker understands (the link is refused with amqp:invalid-field)."""


@dataclass(frozen=True, slots=True)
class Node:
    """Where an address points: ``kind`` is "queue", "exchange" or "management"; for an exchange
    without a key in the address, ``routing_key`` is None (each message's subject is the key)."""
    kind: str
    name: str = ""
    routing_key: str | None = None


def _segment(text: str) -> str:
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise BadAddress(f"address segment {text!r} is not percent-encoded UTF-8") from None


def parse(address: str | None) -> Node:
    if not isinstance(address, str) or not address.startswith("/"):
        raise BadAddress(f"address {address!r} is not of the form /queues/:queue or /exchanges/:exchange[/:key]")
    if address == MANAGEMENT:
        return Node("management")
    parts = address[1:].split("/")
    head, rest = parts[0], [_segment(p) for p in parts[1:]]
    if head == "queues" and len(rest) == 1 and rest[0]:
        return Node("queue", rest[0])
    if head == "exchanges" and len(rest) in (1, 2):
        if rest[0] == "amq.default":
            raise BadAddress("the default exchange is addressed as /queues/:queue")
        return Node("exchange", rest[0], rest[1] if len(rest) == 2 else None)
    # RabbitMQ 3's address forms
    if head == "amq" and len(rest) == 2 and rest[0] == "queue" and rest[1]:
        return Node("queue", rest[1])
    if head == "queue" and len(rest) == 1 and rest[0]:
        return Node("queue", rest[0])
    if head == "exchange" and len(rest) in (1, 2) and rest[0]:
        return Node("exchange", rest[0], rest[1] if len(rest) == 2 else None)
    if head == "topic" and len(rest) == 1:
        return Node("exchange", "amq.topic", rest[0])
    raise BadAddress(f"address {address!r} is not of the form /queues/:queue or /exchanges/:exchange[/:key]")
