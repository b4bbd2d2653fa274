"""RabbitMQ's Direct Reply-To: replies that go straight to the requesting channel, through no queue.

A channel consumes (no-ack) from the pseudo-queue ``amq.rabbitmq.reply-to``; a request it then
publishes with that ``reply_to`` leaves with a name of its own instead,
``amq.rabbitmq.reply-to.<suffix>``; a reply published to the default exchange with that name as
routing key is handed to the channel's consumer as it is, or dropped when the channel has gone
(routed either way, as RabbitMQ 4.2+ routes it to a "volatile queue": never returned).

The suffix is the base64url form of the requester's broker (a signed 32-bit node id, -1 on a
single broker) and 16 random bytes. The random part makes a name unguessable, as RabbitMQ's
secure key does; the node id lets any broker of a cluster send a reply to the one holding the
requester (gateway.cluster, the AmqpReply inter-broker call). This module is the registry of one
broker's reply consumers, the name's codec and :func:`route_reply`, the one way a reply leaves a
publisher; the 0-9-1 channels (gateway.amqp.direct_reply), the AMQP 1.0 sessions
(gateway.amqp10.direct_reply: a receiver link with a dynamic ``rabbitmq:volatile-queue`` source
is a reply consumer, its address ``/queues/<name>``) and the inter-broker call use it. A consumer
is a :data:`Sink`: the reply reaches it in its 0-9-1 form whichever door published it.
"""
from __future__ import annotations

import base64
import binascii
import os
import struct
from typing import Callable

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."
_NODE = struct.Struct(">i")
_SUFFIX_BYTES = _NODE.size + 16

# (exchange, routing key, properties section, body) -> None: what a reply consumer is handed
Sink = Callable[[str, str, bytes, bytes], None]


def is_reply_name(name: str) -> bool:
    return name.startswith(PREFIX)


def node_of(name: str) -> int | None:
    """The broker holding the requester that ``name`` was made for; None if it is no such name."""
    raw = _decode(name)
    return None if raw is None else _NODE.unpack_from(raw)[0]


def _decode(name: str) -> bytes | None:
    if not name.startswith(PREFIX):
        return None
    suffix = name[len(PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(suffix + "=" * (-len(suffix) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == _SUFFIX_BYTES else None


def route_reply(router, vhost_name: str, name: str, properties_raw: bytes, body: bytes):
    """Send a reply published to ``name`` (the default exchange, or an AMQP 1.0 ``/queues/<name>``).

    None: unroutable (``name`` does not decode, or names another broker and this one cannot reach
    others). True: handed to its consumer here, or dropped because the requester has gone (routed
    either way, as RabbitMQ's volatile queue). Otherwise the Deferred of the call to the broker
    holding the requester (``router.reply_elsewhere``): fires with whether it was delivered, or
    fails if that broker cannot be reached."""
    replies = router.direct_replies
    node = node_of(name)
    if node is None:
        return None
    if node == replies.node_id:
        replies.deliver("", name, properties_raw, body)
        return True
    if router.reply_elsewhere is None:
        return None
    return router.reply_elsewhere(node, vhost_name, name, properties_raw, body)


class DirectReplies:
    """The reply consumers of this broker, by the name their requests carry."""

    def __init__(self) -> None:
        self.node_id = -1  # set by cluster mode 'spread' (gateway.cluster.amqp_spread)
        self._sinks: dict[str, Sink] = {}
        self.delivered = self.dropped = 0  # replies, for tests and metrics

    def register(self, sink: Sink) -> str:
        """A new reply consumer: the name its requests' ``reply_to`` becomes."""
        raw = _NODE.pack(self.node_id) + os.urandom(16)
        name = PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")
        self._sinks[name] = sink
        return name

    def unregister(self, name: str) -> None:
        self._sinks.pop(name, None)

    def is_here(self, name: str) -> bool:
        """Whether the requester ``name`` was made for is served by this broker (or is gone from it)."""
        node = node_of(name)
        return node is None or node == self.node_id

    def alive(self, name: str) -> bool:
        return name in self._sinks

    def deliver(self, exchange: str, routing_key: str, properties_raw: bytes, body: bytes) -> bool:
        """Hand a reply to its consumer on this broker; False if there is none (dropped)."""
        sink = self._sinks.get(routing_key)
        if sink is None:
            self.dropped += 1
            return False
        self.delivered += 1
        sink(exchange, routing_key, properties_raw, body)
        return True
