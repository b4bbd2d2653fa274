"""One AMQP channel: its consumers, unacked deliveries, prefetch, confirms and transaction.

The channel turns methods into calls on the routing model (:mod:`routing.vhost`,
:mod:`routing.broker`) and the model's results into frames. Business rules live below, in
``routing``; what is here is the per-channel protocol state RabbitMQ keeps in its channel
process. A method that breaks a rule raises :class:`routing.errors.ChannelError` (the
connection closes this channel with it) or ``ConnectionError`` (the connection closes).
"""
from __future__ import annotations

from collections import deque
from itertools import takewhile
from typing import Any, Protocol

from pamqp import commands as spec

from gateway.amqp import permissions
from gateway.amqp.consuming import Consumer, Consuming
from gateway.amqp.counters import AMQP as COUNTS, BY_QUEUE_TYPE
from gateway.amqp.direct_reply import DirectReplyTo
from gateway.amqp.remote_replies import RemoteReplies
from routing.direct_reply import PSEUDO_QUEUE, is_reply_name
from routing.errors import ACCESS_REFUSED, NOT_FOUND, NOT_IMPLEMENTED, PRECONDITION_FAILED, ChannelError, ConnectionError
from routing.queue import Queue
from wire.amqp import unchecked



class ChannelOwner(Protocol):
    """What a channel uses of its connection (gateway.amqp.connection.AmqpConnection), named here
    so that this module does not import the connection module that imports it."""

    username: str
    peer: str
    vhost: Any
    router: Any
    service: Any
    frame_max: int
    write_blocked: bool
    last_queue: str | None
    confirms_waiting: set

    def send(self, data: bytes) -> None: ...

    def send_method(self, channel: int, method) -> None: ...

    def send_message(self, channel: int, method, properties, body: bytes) -> None: ...

    def client_capability(self, name: str) -> bool: ...

NO_ROUTE = 312
_USER_ID, _HEADERS = spec.Basic.Properties.flags["user_id"], spec.Basic.Properties.flags["headers"]
_REPLY_TO = spec.Basic.Properties.flags["reply_to"]


class Channel(Consuming, DirectReplyTo, RemoteReplies):
    def __init__(self, connection: ChannelOwner, number: int):
        self.connection = connection
        self.number = number
        self.vhost = connection.vhost
        self.router = connection.router
        self.consumers: dict[str, Consumer] = {}
        # delivery tag -> (queue, offset, consumer or None for basic.get)
        self.unacked: dict[int, tuple[Queue, int, Consumer | None]] = {}
        self.next_tag = 1
        self.prefetch = 0  # for consumers created from now on (basic.qos global=false)
        self.global_prefetch = 0
        self.flow = True
        self.closing = False
        self.confirm = False
        self.publish_seq = 0
        self.pending_confirms: deque = deque()  # (seq, Publish)
        self.tx: list | None = None  # buffered operations while in tx mode
        self.publishing = False  # has published: a "publisher" in rabbitmq_global_publishers
        self._held_cancels: list[str] | None = None  # while this channel deletes a queue (see queue_delete)
        # (next delivery tag, time) noted about once a second: bounds on when each delivery was made,
        # for the consumer timeout, without a timestamp per delivery (see check_consumer_timeout)
        self._tag_marks: deque = deque()
        COUNTS.channels_opened += 1

    def __repr__(self) -> str:
        return f"<Channel {self.number} of {self.connection.peer}>"

    # --- dispatch -------------------------------------------------------------------------
    def handle(self, method) -> None:
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise ConnectionError(540, f"method {type(method).__name__} not implemented")
        check = permissions.CHECKS.get(type(method))
        if check is not None:
            check(self, method)  # 403 ACCESS_REFUSED before anything else, as RabbitMQ
        if type(method) in _SEES_PUBLISHES:
            self.router.settle_appends()  # what was published before must be in the queues this looks at
        handler(self, method)

    def reply(self, method) -> None:
        self.connection.send_method(self.number, method)

    # --- exchanges ------------------------------------------------------------------------
    def exchange_declare(self, m: spec.Exchange.Declare) -> None:
        self.vhost.declare_exchange(m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
                                    auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments or {})
        if not m.nowait:
            self._defined(m, spec.Exchange.DeclareOk())

    def exchange_delete(self, m: spec.Exchange.Delete) -> None:
        self.vhost.delete_exchange(m.exchange, if_unused=m.if_unused)
        if not m.nowait:
            self.reply(spec.Exchange.DeleteOk())

    def exchange_bind(self, m: spec.Exchange.Bind) -> None:
        self.vhost.bind_exchange(m.destination, m.source, m.routing_key, m.arguments or {})
        if not m.nowait:
            self._defined(m, spec.Exchange.BindOk())

    def exchange_unbind(self, m: spec.Exchange.Unbind) -> None:
        self.vhost.unbind_exchange(m.destination, m.source, m.routing_key, m.arguments or {})
        if not m.nowait:
            self.reply(spec.Exchange.UnbindOk())

    # --- queues ---------------------------------------------------------------------------
    def queue_declare(self, m: spec.Queue.Declare) -> None:
        if m.queue.startswith(PSEUDO_QUEUE):
            self._declare_reply_queue(m)
            return
        if not m.passive:
            self.connection.service.deprecated.check_queue_declare(durable=m.durable, exclusive=m.exclusive,
                                                                   arguments=m.arguments or {})
        queue = self.vhost.declare_queue(m.queue, owner=self.connection, passive=m.passive, durable=m.durable,
                                         exclusive=m.exclusive, auto_delete=m.auto_delete,
                                         arguments=m.arguments or {})
        self.connection.last_queue = queue.name
        COUNTS.queues_declared += 1
        if m.nowait:
            return
        if queue.remote and queue.ops is not None:  # led by another broker: its figures, once it said
            self._later(queue.ops.figures(queue), m, lambda f: self.reply(
                unchecked(spec.Queue.DeclareOk, queue.name, f.ready, f.consumers)))
            return
        self._defined(m, unchecked(spec.Queue.DeclareOk, queue.name, queue.message_count(), queue.consumer_count()))

    def _defined(self, m, reply) -> None:
        """A declaration's or binding's -ok; in a spread cluster once what it wrote to the AMQP model
        is committed, so a client that goes on through another broker finds it there (RabbitMQ
        answers once its metadata store has it)."""
        committed = self.connection.service.router.committed
        if committed is None:
            self.reply(reply)
        else:
            self._later(committed(), m, lambda _: self.reply(reply))

    def _queue_name(self, name: str) -> str:
        """An empty queue name means the last queue declared on this connection, as in AMQP."""
        if name:
            return name
        if self.connection.last_queue is None:
            raise ChannelError(NOT_FOUND, "no previously declared queue")
        return self.connection.last_queue

    def queue_bind(self, m: spec.Queue.Bind) -> None:
        _not_a_reply_queue(m.queue)
        self.vhost.bind_queue(self._queue_name(m.queue), m.exchange, m.routing_key, m.arguments or {},
                              self.connection)
        if not m.nowait:
            self._defined(m, spec.Queue.BindOk())

    def queue_unbind(self, m: spec.Queue.Unbind) -> None:
        _not_a_reply_queue(m.queue)
        self.vhost.unbind_queue(self._queue_name(m.queue), m.exchange, m.routing_key, m.arguments or {},
                                self.connection)
        self.reply(spec.Queue.UnbindOk())

    def queue_purge(self, m: spec.Queue.Purge) -> None:
        queue = self.vhost.queue(self._queue_name(m.queue), self.connection)
        if queue.remote and queue.ops is not None:  # purged by its leader
            self._later(queue.ops.purge(queue), m, lambda count: None if m.nowait else self.reply(spec.Queue.PurgeOk(count)))
            return
        count = self.vhost.purge_queue(queue.name, self.connection)
        if not m.nowait:
            self.reply(spec.Queue.PurgeOk(count))

    def queue_delete(self, m: spec.Queue.Delete) -> None:
        # As RabbitMQ: this channel's own consumers of the queue hear of it after delete-ok (py-amqp
        # raises ConsumerCancelled if a cancel comes while it waits for delete-ok); others at once.
        name = self._queue_name(m.queue)
        queue = self.vhost.queues.get(name)
        if queue is not None and queue.remote and queue.ops is not None:
            self.vhost.queue(name, self.connection)  # 405 if exclusive to another connection
            self._later(queue.ops.figures(queue), m, lambda f: self._delete_remote(m, name, f))
            return
        self._held_cancels = []
        try:
            count = self.vhost.delete_queue(name, owner=self.connection, if_unused=m.if_unused, if_empty=m.if_empty)
            if not m.nowait:
                self.reply(spec.Queue.DeleteOk(count))
        finally:
            held, self._held_cancels = self._held_cancels, None
        for tag in held:
            self.reply(spec.Basic.Cancel(tag, nowait=True))

    # --- publishing -----------------------------------------------------------------------
    def publish(self, message) -> None:
        """A whole message (method + header + body) arrived."""
        if message.publish.immediate:
            raise ConnectionError(NOT_IMPLEMENTED, "immediate=true")
        permissions.check_publish(self, message.publish.exchange)
        limit = self.connection.service.max_message_bytes
        if len(message.body) > limit:
            raise ChannelError(PRECONDITION_FAILED, f"message size {len(message.body)} is larger than configured "
                                                    f"max size {limit}")
        if self.tx is not None:
            exchange = message.publish.exchange
            if exchange:
                self.vhost.exchange(exchange)  # a missing exchange fails the publish now, not at commit
            self.tx.append(("publish", message))
            return
        self._publish(message)

    def _publish(self, message) -> None:
        p = message.publish
        flags = message.flags  # which properties are present: most publishes need none decoded
        if flags & _USER_ID:
            user_id = message.properties.user_id
            if user_id is not None and user_id != self.connection.username:
                raise ChannelError(PRECONDITION_FAILED, f"user_id property set to '{user_id}' but authenticated "
                                                        f"user was '{self.connection.username}'")
        properties_raw = message.properties_raw
        if flags & _REPLY_TO:
            properties_raw = self._request_properties(properties_raw)
        self.publishing = True
        if not p.exchange and is_reply_name(p.routing_key):  # a Direct Reply-To reply: no queue
            publish = self._publish_reply(p, properties_raw, message.body)
        else:
            publish = self._route(p, message, properties_raw)
        if self.confirm:
            COUNTS.received_confirm += 1
            self.publish_seq += 1
            self.pending_confirms.append((self.publish_seq, publish))
            self.connection.confirms_waiting.add(self)
            self.connection.service.confirming.add(self.connection)

    def _route(self, p: spec.Basic.Publish, message, properties_raw: bytes):
        headers = message.properties.headers if message.flags & _HEADERS else None
        publish, routed = self.router.publish(self.vhost, p.exchange, p.routing_key, properties_raw,
                                              message.body, headers, self.confirm)
        COUNTS.received += 1
        if routed:
            COUNTS.routed += 1
        elif p.mandatory:
            COUNTS.unroutable_returned += 1
        else:
            COUNTS.unroutable_dropped += 1
        if not routed and p.mandatory:
            self.connection.send_message(self.number, unchecked(spec.Basic.Return, NO_ROUTE, "NO_ROUTE", p.exchange,
                                                                p.routing_key),
                                         properties_raw, message.body)
        return publish

    def confirm_select(self, m: spec.Confirm.Select) -> None:
        if self.tx is not None:
            raise ChannelError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
        self.confirm = True
        if not m.nowait:
            self.reply(spec.Confirm.SelectOk())

    def send_confirms(self) -> bool:
        """Ack (or nack) every leading publish that is now durable; True when none is left waiting."""
        pending = self.pending_confirms
        acked_upto = None
        acked = 0
        while pending:
            seq, publish = pending[0]
            if publish is not None and not publish.durable():
                break
            pending.popleft()
            if publish is not None and publish.rejected:
                if acked_upto is not None:
                    self.reply(spec.Basic.Ack(acked_upto, multiple=True))
                    acked_upto = None
                self.reply(spec.Basic.Nack(seq, multiple=False, requeue=False))
            else:
                acked_upto = seq
                acked += 1
        if acked_upto is not None:
            self.reply(spec.Basic.Ack(acked_upto, multiple=True))
            COUNTS.confirmed += acked
        return not pending

    # --- consuming ------------------------------------------------------------------------
    def basic_qos(self, m: spec.Basic.Qos) -> None:
        if m.prefetch_size:
            raise ConnectionError(NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")  # as RabbitMQ
        if m.global_ and self.connection.service.deprecated.permitted("global_qos"):
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch = m.prefetch_count
        self.reply(spec.Basic.QosOk())
        self._dispatch_all()

    # --- settling -------------------------------------------------------------------------
    def _take_tags(self, tag: int, multiple: bool) -> list[tuple[Queue, int, Consumer | None]]:
        if multiple:
            # tags are held in delivery order (they only grow): the walk stops past the acked one, so
            # an ack of a few among tens of thousands unacked does not visit them all
            tags = list(takewhile(tag.__ge__, self.unacked)) if tag else list(self.unacked)
        else:
            if tag not in self.unacked:
                raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")
            tags = [tag]
        out = []
        for t in tags:
            entry = self.unacked.pop(t)
            consumer = entry[2]
            if consumer is not None:
                consumer.unacked -= 1
            out.append(entry)
        return out

    def basic_ack(self, m: spec.Basic.Ack) -> None:
        if self.tx is not None:
            self._check_tag(m.delivery_tag, m.multiple)
            self.tx.append(("ack", m))
            return
        self._settle(self._take_tags(m.delivery_tag, m.multiple), ack=True, requeue=False)

    def basic_nack(self, m: spec.Basic.Nack) -> None:
        if self.tx is not None:
            self._check_tag(m.delivery_tag, m.multiple)
            self.tx.append(("nack", m))
            return
        self._settle(self._take_tags(m.delivery_tag, m.multiple), ack=False, requeue=m.requeue)

    def basic_reject(self, m: spec.Basic.Reject) -> None:
        if self.tx is not None:
            self._check_tag(m.delivery_tag, False)
            self.tx.append(("reject", m))
            return
        self._settle(self._take_tags(m.delivery_tag, False), ack=False, requeue=m.requeue, failed=True)

    def _check_tag(self, tag: int, multiple: bool) -> None:
        if not multiple and tag not in self.unacked:
            raise ChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}")

    def _settle(self, entries, *, ack: bool, requeue: bool, failed: bool = False) -> None:
        """``failed``: basic.reject (a failed delivery, to a quorum queue's delayed retry)."""
        by_queue: dict[Queue, list[int]] = {}
        for queue, offset, _consumer in entries:
            by_queue.setdefault(queue, []).append(offset)
        for queue, offsets in by_queue.items():
            if queue.deleted:
                continue
            if ack:
                queue.ack(offsets)
                BY_QUEUE_TYPE[queue.args.queue_type].acknowledged += len(offsets)
            else:
                queue.reject(sorted(offsets), requeue, failed=failed)
        self._dispatch_all(by_queue)
        self.router.settle_appends()  # dead-lettered messages, if any

    def basic_recover(self, m) -> None:
        if not m.requeue:
            raise ConnectionError(NOT_IMPLEMENTED, "requeue=false")  # as RabbitMQ
        entries = self._take_tags(0, True)
        self._settle(entries, ack=False, requeue=True)
        if isinstance(m, spec.Basic.Recover):
            self.reply(spec.Basic.RecoverOk())

    def _dispatch_all(self, queues=None) -> None:
        targets = set(queues) if queues is not None else {c.queue for c in self.consumers.values()}
        for consumer in list(self.consumers.values()):
            targets.add(consumer.queue)
        for queue in targets:
            if not queue.deleted:
                queue.dispatch()

    # --- flow and transactions --------------------------------------------------------------
    def channel_flow(self, m: spec.Channel.Flow) -> None:
        if not m.active:
            raise ConnectionError(NOT_IMPLEMENTED, "active=false")  # RabbitMQ does not pause channels either
        self.flow = m.active
        self.reply(spec.Channel.FlowOk(m.active))
        if m.active:
            self._dispatch_all()

    def tx_select(self, m) -> None:
        if self.confirm:
            raise ChannelError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = []
        self.reply(spec.Tx.SelectOk())

    def tx_commit(self, m) -> None:
        if self.tx is None:
            raise ChannelError(PRECONDITION_FAILED, "channel is not transactional")
        operations, self.tx = self.tx, None
        try:
            for kind, item in operations:
                if kind == "publish":
                    self._publish(item)
                elif kind == "ack":
                    self.basic_ack(item)
                elif kind == "nack":
                    self.basic_nack(item)
                else:
                    self.basic_reject(item)
        finally:
            self.tx = []
        self.reply(spec.Tx.CommitOk())

    def tx_rollback(self, m) -> None:
        if self.tx is None:
            raise ChannelError(PRECONDITION_FAILED, "channel is not transactional")
        self.tx = []
        self.reply(spec.Tx.RollbackOk())

    # --- the consumer timeout -----------------------------------------------------------------
    def check_consumer_timeout(self, now: float, default_ms: int) -> None:
        """RabbitMQ's consumer timeout: a delivery unacknowledged for longer than its queue's
        ``x-consumer-timeout`` (else ``--consumer-timeout-ms``) closes the channel with 406, and
        its unacknowledged messages go back to their queues. Ages are known to about a second: a
        tag delivered before a mark is at least as old as the mark (never closed early)."""
        marks = self._tag_marks
        if not marks or marks[-1][0] != self.next_tag:
            marks.append((self.next_tag, now))
        if not self.unacked:
            while len(marks) > 1:
                marks.popleft()
            return
        oldest = next(iter(self.unacked))
        while len(marks) > 1 and marks[1][0] <= oldest:
            marks.popleft()
        limits = [t for t in (default_ms, *(c.queue.args.consumer_timeout for c in self.consumers.values())) if t]
        if not limits:
            return
        smallest, i = min(limits), 0
        for tag, (queue, _offset, _consumer) in self.unacked.items():  # in delivery order: oldest first
            while i < len(marks) and marks[i][0] <= tag:
                i += 1
            if i == len(marks):
                return
            age_ms = (now - marks[i][1]) * 1000
            if age_ms <= smallest:
                return  # this one and every later delivery are younger than any timeout
            timeout = queue.args.consumer_timeout or default_ms
            if timeout and age_ms > timeout:
                raise ChannelError(PRECONDITION_FAILED, f"delivery acknowledgement on channel {self.number} timed "
                                                        f"out. Timeout value used: {timeout} ms. This timeout value "
                                                        f"can be configured, see consumers doc guide to learn more")

    # --- closing --------------------------------------------------------------------------
    def release(self) -> None:
        """The channel is closing: cancel consumers, return unacked deliveries to their queues."""
        if not self.closing:
            COUNTS.channels_closed += 1
        self.closing = True
        for consumer in list(self.consumers.values()):
            consumer.queue.remove_consumer(consumer)
        self.consumers.clear()
        self._drop_reply_consumer()
        queues = {queue for queue, _, _ in self.unacked.values()}
        self.unacked.clear()
        for queue in queues:
            if not queue.deleted:
                queue.release(self)
        self.pending_confirms.clear()
        self.connection.confirms_waiting.discard(self)
        for queue in queues:
            if not queue.deleted:
                queue.dispatch()


def _not_a_reply_queue(name: str) -> None:
    """RabbitMQ 4.2+: a Direct Reply-To name is no queue to bind."""
    if is_reply_name(name):
        raise ChannelError(ACCESS_REFUSED, "cannot bind or unbind to a volatile (direct reply-to) queue")


_SEES_PUBLISHES = frozenset({spec.Queue.Declare, spec.Queue.Purge, spec.Queue.Delete, spec.Basic.Get,
                             spec.Basic.Consume, spec.Basic.Recover, spec.Exchange.Delete, spec.Queue.Unbind})

_HANDLERS = {
    spec.Exchange.Declare: Channel.exchange_declare,
    spec.Exchange.Delete: Channel.exchange_delete,
    spec.Exchange.Bind: Channel.exchange_bind,
    spec.Exchange.Unbind: Channel.exchange_unbind,
    spec.Queue.Declare: Channel.queue_declare,
    spec.Queue.Bind: Channel.queue_bind,
    spec.Queue.Unbind: Channel.queue_unbind,
    spec.Queue.Purge: Channel.queue_purge,
    spec.Queue.Delete: Channel.queue_delete,
    spec.Basic.Qos: Channel.basic_qos,
    spec.Basic.Consume: Channel.basic_consume,
    spec.Basic.Cancel: Channel.basic_cancel,
    spec.Basic.Get: Channel.basic_get,
    spec.Basic.Ack: Channel.basic_ack,
    spec.Basic.Nack: Channel.basic_nack,
    spec.Basic.Reject: Channel.basic_reject,
    spec.Basic.Recover: Channel.basic_recover,
    spec.Basic.RecoverAsync: Channel.basic_recover,
    spec.Confirm.Select: Channel.confirm_select,
    spec.Channel.Flow: Channel.channel_flow,
    spec.Tx.Select: Channel.tx_select,
    spec.Tx.Commit: Channel.tx_commit,
    spec.Tx.Rollback: Channel.tx_rollback,
}
