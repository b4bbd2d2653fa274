"""Consuming on a channel: basic.consume, basic.cancel, basic.get and the deliveries they bring.

Mixed into gateway.amqp.channel.Channel (which keeps the unacked deliveries, prefetch and
settling); :class:`Consumer` is what a queue (routing.queue) holds of a subscription.
"""
from __future__ import annotations

import base64
import os

from pamqp import commands as spec

from gateway.amqp.counters import BY_QUEUE_TYPE
from routing import amqp_properties, mapping
from routing.direct_reply import PSEUDO_QUEUE
from routing.errors import ACCESS_REFUSED, NOT_ALLOWED, NOT_IMPLEMENTED, PRECONDITION_FAILED, ChannelError, ConnectionError
from routing.queue import Queue
from wire.amqp import delivery_tag_at, encode_delivery, unchecked, with_delivery_tag


class Consumer:
    """A basic.consume subscription on ``channel`` (a gateway.amqp.channel.Channel); the queue calls
    ``has_credit`` and ``deliver``."""

    __slots__ = ("channel", "queue", "tag", "no_ack", "exclusive", "priority", "prefetch", "unacked", "owner",
                 "stream_position", "tag_at")

    def __init__(self, channel, queue: Queue, tag: str, no_ack: bool, exclusive: bool, priority: int,
                 prefetch: int):
        self.channel = channel
        self.owner = channel
        self.queue = queue
        self.tag = tag
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.priority = priority
        self.prefetch = prefetch
        self.unacked = 0
        self.stream_position = 0  # stream queues: the next offset this consumer reads
        self.tag_at = 0  # where the delivery tag goes in frames encoded by a queue's leader (encoded_target)

    def has_credit(self) -> bool:
        channel = self.channel
        if not channel.flow or channel.closing:
            return False
        if self.no_ack:
            return not channel.connection.write_blocked
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        if channel.global_prefetch and len(channel.unacked) >= channel.global_prefetch:
            return False
        return not channel.connection.write_blocked

    def deliver(self, queue: Queue, offset: int, record, redelivered: bool) -> None:
        self.channel.send_delivery(self, queue, offset, record, redelivered)

    def encoded_target(self) -> tuple[int, int, str]:
        """(channel, frame-max, consumer tag): what a queue's leader on another broker needs to
        encode this consumer's deliveries itself (gateway.cluster.amqp_consume, wire.amqp_link)."""
        self.tag_at = delivery_tag_at(self.tag)
        return self.channel.number, self.channel.connection.frame_max, self.tag

    def deliver_encoded(self, queue: Queue, offset: int, frames: bytes, redelivered: bool) -> None:
        """A delivery the queue's leader encoded for :meth:`encoded_target`, its tag still to fill in."""
        channel = self.channel
        tag = channel.track_delivery(self, queue, offset, redelivered)
        channel.connection.send(with_delivery_tag(frames, self.tag_at, tag))

    def cancelled_by_server(self, queue: Queue) -> None:
        self.channel.server_cancel(self)



class Consuming:
    def basic_consume(self, m: spec.Basic.Consume) -> None:
        tag = m.consumer_tag or "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if m.queue == PSEUDO_QUEUE:  # Direct Reply-To (gateway.amqp.direct_reply)
            if tag in self.consumers:
                raise ConnectionError(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
            self._consume_replies(m, tag)
            return
        queue = self.vhost.queue(self._queue_name(m.queue), self.connection)
        if tag in self.consumers:
            raise ConnectionError(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if any(c.exclusive for c in queue.consumers) or (m.exclusive and queue.consumers):
            raise ChannelError(ACCESS_REFUSED, f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use")
        arguments = m.arguments or {}
        priority = arguments.get("x-priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-priority' for consumer: {priority!r}")
        consumer = Consumer(self, queue, tag, m.no_ack, m.exclusive, priority, self.prefetch)
        if queue.is_stream:
            if not self.prefetch and not self.global_prefetch:
                raise ChannelError(PRECONDITION_FAILED, "consumer prefetch count is not set for stream queue "
                                                        f"'{queue.name}' in vhost '{self.vhost.name}'")
            consumer.stream_position = queue.stream_start(arguments.get("x-stream-offset"))
        self.consumers[tag] = consumer
        queue.add_consumer(consumer)
        if not m.nowait:
            self.reply(spec.Basic.ConsumeOk(tag))
        queue.dispatch()

    def basic_cancel(self, m: spec.Basic.Cancel) -> None:
        if self._cancel_replies(m):
            return
        consumer = self.consumers.pop(m.consumer_tag, None)
        if not m.nowait:
            self.reply(spec.Basic.CancelOk(m.consumer_tag))
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def server_cancel(self, consumer: Consumer) -> None:
        """The queue went away under a consumer: tell the client (consumer_cancel_notify)."""
        self.consumers.pop(consumer.tag, None)
        if not self.closing and self.connection.client_capability("consumer_cancel_notify"):
            if self._held_cancels is not None:  # this channel is deleting the queue: after delete-ok
                self._held_cancels.append(consumer.tag)
            else:
                self.reply(spec.Basic.Cancel(consumer.tag, nowait=True))

    def send_delivery(self, consumer: Consumer, queue: Queue, offset: int, record, redelivered: bool) -> None:
        tag = self.track_delivery(consumer, queue, offset, redelivered)
        exchange, routing_key, properties_raw = mapping.amqp_from_record(record)
        if queue.is_stream:  # as RabbitMQ: stream deliveries say where they are in the stream
            properties_raw = amqp_properties.with_entry(properties_raw, "x-stream-offset", "l", offset)
        elif queue.counts_deliveries:  # quorum queues: how often it came back (RabbitMQ's x-delivery-count)
            properties_raw = amqp_properties.with_entry(properties_raw, "x-delivery-count", "l",
                                                        queue.delivery_counts.get(offset, 0))
        connection = self.connection
        connection.send(encode_delivery(self.number, consumer.tag, tag, redelivered, exchange, routing_key,
                                        properties_raw, record.value or b"", connection.frame_max))

    def track_delivery(self, consumer: Consumer, queue: Queue, offset: int, redelivered: bool) -> int:
        """The next delivery tag, held unacked (unless no-ack) and counted."""
        tag = self.next_tag
        self.next_tag += 1
        counts = BY_QUEUE_TYPE[queue.args.queue_type]
        counts.delivered += 1
        if redelivered:
            counts.redelivered += 1
        if not consumer.no_ack:
            self.unacked[tag] = (queue, offset, consumer)
            consumer.unacked += 1
            counts.consume_manual_ack += 1
        else:
            counts.consume_auto_ack += 1
        return tag

    def basic_get(self, m: spec.Basic.Get) -> None:
        queue = self.vhost.queue(self._queue_name(m.queue), self.connection)
        if queue.is_stream:
            raise ConnectionError(NOT_IMPLEMENTED, f"basic.get not supported by stream queues queue '{queue.name}' "
                                                   f"in vhost '{self.vhost.name}'")
        if queue.remote:  # led by another broker: answered once it has said (gateway.cluster.amqp_consume)
            queue.get_remote(self, m.no_ack, lambda taken: self._got(queue, m.no_ack, taken))
            return
        self._got(queue, m.no_ack, queue.get(self, m.no_ack))

    def _got(self, queue: Queue, no_ack: bool, taken) -> None:
        if self.closing:
            return
        counts = BY_QUEUE_TYPE[queue.args.queue_type]
        if taken is None:
            counts.get_empty += 1
            self.reply(spec.Basic.GetEmpty())
            return
        offset, redelivered, record = taken
        counts.delivered += 1
        if redelivered:
            counts.redelivered += 1
        if no_ack:
            counts.get_auto_ack += 1
        else:
            counts.get_manual_ack += 1
        tag = self.next_tag
        self.next_tag += 1
        if not no_ack:
            self.unacked[tag] = (queue, offset, None)
        exchange, routing_key, properties_raw = mapping.amqp_from_record(record)
        if queue.counts_deliveries:
            properties_raw = amqp_properties.with_entry(properties_raw, "x-delivery-count", "l",
                                                        queue.delivery_counts.get(offset, 0))
        self.connection.send_message(self.number, unchecked(spec.Basic.GetOk, tag, redelivered, exchange, routing_key,
                                                            queue.message_count()),
                                     properties_raw, record.value or b"")

