"""Direct Reply-To on a channel (routing.direct_reply holds the rules and the registry).

Mixed into gateway.amqp.channel.Channel: the channel's one reply consumer (basic.consume of
``amq.rabbitmq.reply-to``, no-ack only), the rewrite of ``reply_to`` on the requests it
publishes, the replies it publishes to other requesters (through no queue: to this broker's
registry, or to the broker holding the requester in a spread cluster), and queue.declare of
these names. Error texts are RabbitMQ's.
"""
from __future__ import annotations

from pamqp import commands as spec

from gateway.amqp.counters import AMQP as COUNTS
from routing import amqp_properties
from routing.broker import Publish
from routing.direct_reply import PREFIX, PSEUDO_QUEUE, node_of, route_reply
from routing.errors import NOT_FOUND, PRECONDITION_FAILED, ChannelError
from wire.amqp import encode_delivery, unchecked

NO_ROUTE = 312


class DirectReplyTo:
    reply_consumer: tuple[str, str] | None = None  # (consumer tag, the name requests carry)

    def _consume_replies(self, m: spec.Basic.Consume, tag: str) -> None:
        if not m.no_ack:
            raise ChannelError(PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if self.reply_consumer is not None:
            raise ChannelError(PRECONDITION_FAILED, "reply consumer already set")
        self.reply_consumer = (tag, self.router.direct_replies.register(self._reply_arrived))
        if not m.nowait:
            self.reply(spec.Basic.ConsumeOk(tag))

    def _cancel_replies(self, m: spec.Basic.Cancel) -> bool:
        """basic.cancel of the reply consumer (True), or of another consumer (False)."""
        if self.reply_consumer is None or self.reply_consumer[0] != m.consumer_tag:
            return False
        self._drop_reply_consumer()
        if not m.nowait:
            self.reply(spec.Basic.CancelOk(m.consumer_tag))
        return True

    def _drop_reply_consumer(self) -> None:
        if self.reply_consumer is not None:
            self.router.direct_replies.unregister(self.reply_consumer[1])
            self.reply_consumer = None

    def _reply_arrived(self, exchange: str, routing_key: str, properties_raw: bytes, body: bytes) -> None:
        """A reply for this channel's consumer: delivered as it came, nothing to acknowledge."""
        if self.closing or self.reply_consumer is None:
            return
        tag = self.next_tag
        self.next_tag += 1
        connection = self.connection
        connection.send(encode_delivery(self.number, self.reply_consumer[0], tag, False, exchange, routing_key,
                                        properties_raw, body, connection.frame_max))

    def _request_properties(self, properties_raw: bytes) -> bytes:
        """A request's property section, with ``reply_to`` = the pseudo-queue made this channel's name."""
        if amqp_properties.reply_to(properties_raw) != PSEUDO_QUEUE:
            return properties_raw
        if self.reply_consumer is None:
            raise ChannelError(PRECONDITION_FAILED, "fast reply consumer does not exist")
        return amqp_properties.with_reply_to(properties_raw, self.reply_consumer[1])

    def _publish_reply(self, p: spec.Basic.Publish, properties_raw: bytes, body: bytes) -> Publish | None:
        """A publish to the default exchange whose routing key is a Direct Reply-To name. As RabbitMQ
        4.2+ routes it (to a "volatile queue"): a well-formed name of a broker of this cluster is
        routed, so the reply reaches its requester, or is dropped if the requester has gone, and
        is never returned; a name that does not decode, or names a broker that cannot be reached,
        is unroutable (returned if mandatory). Its confirm (the Publish returned) waits only for
        another broker's answer."""
        COUNTS.received += 1
        d = route_reply(self.router, self.vhost.name, p.routing_key, properties_raw, body)
        if d is None:
            self._unroutable(p, properties_raw, body)
            return None
        COUNTS.routed += 1
        if d is True:
            return None
        publish = None
        if self.confirm:
            publish = Publish()
            publish.forwarded = 1

        def unreachable(_failure) -> None:
            if not self.closing:
                COUNTS.routed -= 1
                self._unroutable(p, properties_raw, body)

        def settled(_) -> None:
            if publish is not None:
                publish.forwarded = 0
                if not self.closing:
                    self.send_confirms()

        d.addCallbacks(lambda _delivered: None, unreachable).addBoth(settled)
        return publish

    def _unroutable(self, p: spec.Basic.Publish, properties_raw: bytes, body: bytes) -> None:
        if p.mandatory:
            COUNTS.unroutable_returned += 1
            self.connection.send_message(self.number, unchecked(spec.Basic.Return, NO_ROUTE, "NO_ROUTE", p.exchange,
                                                                p.routing_key), properties_raw, body)
        else:
            COUNTS.unroutable_dropped += 1

    def _declare_reply_queue(self, m: spec.Queue.Declare) -> None:
        """queue.declare of ``amq.rabbitmq.reply-to`` (always there, one consumer) or of a name made
        from it (there while its requester's channel is), whatever ``passive`` says, as RabbitMQ."""
        name = m.queue
        if name == PSEUDO_QUEUE:
            return self._reply_declared(m, True)
        replies = self.router.direct_replies
        if not name.startswith(PREFIX) or replies.is_here(name) or self.router.reply_elsewhere is None:
            return self._reply_declared(m, replies.alive(name))
        d = self.router.reply_elsewhere(node_of(name), self.vhost.name, name, None, b"")
        d.addErrback(lambda _failure: False)
        self._later(d, m, lambda alive: self._reply_declared(m, alive))

    def _reply_declared(self, m: spec.Queue.Declare, exists: bool) -> None:
        if not exists:
            raise ChannelError(NOT_FOUND, f"no queue '{m.queue}' in vhost '{self.vhost.name}'")
        if not m.nowait:
            self.reply(unchecked(spec.Queue.DeclareOk, m.queue, 0, 1))
