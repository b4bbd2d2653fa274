"""AMQP 1.0 links over the router: publishing (the client's sender links) and consuming (its
receiver links), both through the same router, queues and confirms as the 0-9-1 door.

A published message is converted to the 0-9-1 message RabbitMQ would make of it
(:func:`routing.stream_message.amqp091_from_amqp10`) and published with
:meth:`routing.broker.Router.publish`; a consumed record is delivered as the AMQP 1.0 message a
stream consumer reads (:func:`routing.stream_delivery.stream_from_record`), with the header's
delivery-count set on a quorum queue's redeliveries. Multi-frame transfers (``more``) are joined
on the way in and cut to max-frame-size on the way out.
"""
from __future__ import annotations

import datetime

from gateway.amqp import permissions
from gateway.amqp10 import addresses, direct_reply
from gateway.amqp10.errors import LinkError, condition_of
from gateway.amqp10.filtering import FilterGate
from routing.amqp10_filters import CAPABILITIES, FilterError, parse_filter_set
from routing.errors import AmqpError, ChannelError
from routing.amqp_properties import with_entry
from routing.direct_reply import is_reply_name
from routing.stream_message import X_STREAM_MESSAGE, amqp091_from_amqp10, bare_kept, data_body, stream_from_record
from wire.amqp10 import AMQP10Error, Described, Message, Symbol, Typed, decode_message, encode_message, value_end
from wire.amqp10_frames import Attach, Error, Flow, Rejected, Released, Transfer

LINK_CREDIT = 2000  # granted to a publishing link, topped up when half is used
UINT = 1 << 32
# a published message's sections before its data body -> (decoded message, 0-9-1 properties, headers)
_CONVERTED: dict[bytes, tuple] = {}
_CACHED_MAX = 4096  # bytes of sections worth keeping as a key
_CACHE_ENTRIES = 1024
FILTER_CAPABILITIES = [Symbol(c) for c in CAPABILITIES]  # a stream receiver's attach offers them
_RELEASED = Released()


def plain(v):
    """An AMQP value as plain Python (Typed unwrapped), for queue arguments and header routing."""
    if type(v) is Typed:
        return v.value
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if type(v) is Described:
        return plain(v.value)
    return v


class IncomingLink:
    """The client sends: each message is a publish (``basic.publish``); unsettled ones are
    settled once durable (publisher confirms)."""

    def __init__(self, session, m: Attach, node):
        self.session = session
        self.attach = m
        self.handle = m.handle
        self.node = node  # None: the anonymous terminus (each message's "to")
        self.settled_mode = m.snd_settle_mode
        self.credit = 0
        self.delivery_count = m.initial_delivery_count or 0
        self._parts: list[bytes] = []
        self._size = 0
        self._delivery: tuple[int, bool] | None = None  # (delivery id, settled) of a delivery in frames
        self._prefix = b""  # the sections before the data body of the last message converted...
        self._converted: tuple = ()  # ...and their conversion (message, 0-9-1 properties, headers)
        self.unsettled = 0
        self.blocked = False  # no credit granted while a resource alarm is on
        if node is not None:
            self._check_node(node)

    def _check_node(self, node) -> None:
        vhost = self.session.vhost
        if node.kind == "queue" and is_reply_name(node.name):  # a Direct Reply-To requester, not a queue
            return direct_reply.check_target(self, node.name)
        try:
            if node.kind == "queue":  # published through the default exchange: write on it, as 0-9-1
                vhost.queue(node.name, self.session.connection)
                permissions.check(self.session, "exchange", "", "write")
            else:
                vhost.exchange(node.name)
                permissions.check(self.session, "exchange", node.name, "write")
        except AmqpError as exc:
            raise LinkError(self.handle, condition_of(exc), exc.reply_text) from None

    def attached(self) -> None:
        m = self.attach
        self.session.send(Attach(name=m.name, handle=m.handle, role=True, snd_settle_mode=m.snd_settle_mode,
                                 rcv_settle_mode=0, source=m.source, target=m.target,
                                 max_message_size=self.session.connection.service.max_message_bytes))
        self.grant()

    def grant(self) -> None:
        """Top the link credit up, unless a resource alarm is on: then the publisher waits for
        credit (the connection grants it when the alarm clears), as 0-9-1 publishers are blocked."""
        if self.session.connection.service.alarm_reason:
            self.blocked = True
            return
        self.blocked = False
        self.credit = LINK_CREDIT
        self.session.send_flow(self)

    def flow_fields(self, f: Flow) -> None:
        f.handle, f.delivery_count, f.link_credit = self.handle, self.delivery_count, self.credit

    def flow(self, m: Flow) -> None:
        if m.delivery_count is not None:
            self.delivery_count = m.delivery_count
        if m.echo:
            self.session.send_flow(self)

    def release(self) -> None:
        self._parts = []

    def transfer(self, m: Transfer, payload: bytes) -> None:
        if self._delivery is None and not m.more and not m.aborted and m.delivery_id is not None:
            # a delivery in one frame (the usual case): no joining of parts
            limit = self.session.connection.service.max_message_bytes
            if len(payload) > limit:
                raise LinkError(self.handle, "amqp:link:message-size-exceeded",
                                f"message size {len(payload)} is larger than the max message size {limit}")
            self.delivery_count = (self.delivery_count + 1) % UINT
            self.credit -= 1
            if self.credit < LINK_CREDIT // 2 and not self.blocked:
                self.grant()
            self.message(m.delivery_id, bool(m.settled) or self.settled_mode == 1, payload)
            return
        if self._delivery is None:
            if m.delivery_id is None:
                raise LinkError(self.handle, "amqp:decode-error", "the first transfer of a delivery has no delivery-id")
            settled = bool(m.settled) or self.settled_mode == 1
            self._delivery = (m.delivery_id, settled)
        elif m.settled:
            self._delivery = (self._delivery[0], True)
        if m.aborted:
            self._parts, self._size, self._delivery = [], 0, None
            return
        self._parts.append(payload)
        self._size += len(payload)
        limit = self.session.connection.service.max_message_bytes
        if self._size > limit:
            raise LinkError(self.handle, "amqp:link:message-size-exceeded",
                            f"message size {self._size} is larger than the max message size {limit}")
        if m.more:
            return
        data = payload if len(self._parts) == 1 else b"".join(self._parts)
        delivery_id, settled = self._delivery
        self._parts, self._size, self._delivery = [], 0, None
        self.delivery_count = (self.delivery_count + 1) % UINT
        self.credit -= 1
        if self.credit < LINK_CREDIT // 2 and not self.blocked:
            self.grant()
        self.message(delivery_id, settled, data)

    def message(self, delivery_id: int, settled: bool, data: bytes) -> None:
        session = self.session
        prefix = self._prefix
        k, n = len(prefix), len(data)
        # the link's last converted sections again, then one data section to the end: the
        # conversion is reused without a lookup (what data_body and _CONVERTED would find)
        body = None
        if self._converted and n > k + 4 and data.startswith(prefix) and data.startswith(b"\x00\x53\x75", k):
            c = data[k + 3]
            if c == 0xa0 and data[k + 4] == n - k - 5:
                body = data[k + 5:]
            elif c == 0xb0 and n >= k + 8 and int.from_bytes(data[k + 4:k + 8], "big") == n - k - 8:
                body = data[k + 8:]
        if body is not None:
            msg, props, headers = self._converted
        else:
            msg, props, headers, body = self._convert(data)
        node = self.node
        if node is None:  # the anonymous terminus: the message's "to" says where it goes
            to = msg.properties[2] if msg.properties and len(msg.properties) > 2 else None
            try:
                node = addresses.parse(to)
                if node.kind == "management":
                    raise addresses.BadAddress("the management node is not a publish target")
            except addresses.BadAddress as exc:
                self._outcome(delivery_id, settled, None, Rejected(error=Error(
                    condition="amqp:invalid-field", description=str(exc))))
                return
        if node.kind == "queue":
            exchange, routing_key = "", node.name
        else:
            exchange = node.name
            routing_key = node.routing_key
            if routing_key is None:  # /exchanges/:x: the subject is the routing key
                subject = msg.properties[3] if msg.properties and len(msg.properties) > 3 else None
                routing_key = subject if isinstance(subject, str) else ""
        if exchange == "":  # to a stream: the bare message stays byte for byte (RabbitMQ 4 keeps it)
            queue = session.vhost.queues.get(routing_key)
            if queue is not None and queue.is_stream and not bare_kept(data, exchange, routing_key, props, body):
                props = with_entry(props, X_STREAM_MESSAGE, "x", data)
        try:
            if self.node is None:
                permissions.check(session, "exchange", exchange, "write")
            if not exchange and is_reply_name(routing_key):  # Direct Reply-To: to the requester, no queue
                return direct_reply.send_reply(self, delivery_id, settled, routing_key, props, body)
            publish, routed = session.router.publish(session.vhost, exchange, routing_key, props, body, headers,
                                                     not settled)
        except ChannelError as exc:
            if self.node is not None:  # the target went away under the link
                raise LinkError(self.handle, condition_of(exc), exc.reply_text) from None
            self._outcome(delivery_id, settled, None, Rejected(error=Error(
                condition=condition_of(exc), description=exc.reply_text)))
            return
        session.connection.has_published = True
        if not settled:
            session.confirm_later(delivery_id, publish, None if routed else _RELEASED)

    def _convert(self, data: bytes) -> tuple:
        """(message, 0-9-1 properties, headers, body) of a published message; a publisher repeats
        its properties, so the sections before a data body are converted once (and remembered
        as this link's last prefix)."""
        split = data_body(data)
        hit = _CONVERTED.get(data[:split[0]]) if split is not None and split[0] <= _CACHED_MAX else None
        if hit is not None:
            msg, props, headers = hit
            body = split[1]
        else:
            try:
                msg, _, _, props, body = amqp091_from_amqp10(data)
            except AMQP10Error as exc:
                raise LinkError(self.handle, "amqp:decode-error", f"the message is malformed: {exc}") from None
            headers = plain(msg.application_properties) if msg.application_properties else None
            if split is None or split[0] > _CACHED_MAX or body != split[1]:
                return msg, props, headers, body
            if len(_CONVERTED) >= _CACHE_ENTRIES:
                _CONVERTED.clear()
            hit = _CONVERTED[data[:split[0]]] = (msg, props, headers)
        self._prefix, self._converted = data[:split[0]], hit
        return msg, props, headers, body

    def _outcome(self, delivery_id: int, settled: bool, publish, outcome) -> None:
        if not settled:
            self.session.confirm_later(delivery_id, publish, outcome)


class OutgoingLink:
    """The client receives from a queue: a consumer whose link credit is its prefetch. Pre-settled
    links (snd-settle-mode settled) consume like ``no_ack``."""

    exclusive = False
    priority = 0
    accepts = None  # a stream receiver's filters (gateway.amqp10.filtering), when it has some
    filter_paused = False  # its filters read many non-matching records: resumed next reactor turn

    def __init__(self, session, m: Attach, node):
        self.session = session
        self.attach = m
        self.handle = m.handle
        self.tag = m.name
        if node is None or node.kind != "queue":
            raise LinkError(m.handle, "amqp:invalid-field", "a receiver's source must be /queues/:queue")
        try:
            self.queue = session.vhost.queue(node.name, session.connection)
            permissions.check(session, "queue", node.name, "read")
        except AmqpError as exc:
            raise LinkError(m.handle, condition_of(exc), exc.reply_text) from None
        self.no_ack = m.snd_settle_mode == 1
        self.owner = self
        self.credit = 0
        self.delivery_count = 0
        self.drain = False
        self.unsettled = 0
        self.stream_position = 0
        self.prefetch = 0
        if self.queue.is_stream:
            try:
                self.stream_position = self.queue.stream_start(_offset_spec(m.source))
                filters = parse_filter_set(getattr(m.source, "filter", None))
            except ChannelError as exc:
                raise LinkError(m.handle, "amqp:invalid-field", exc.reply_text) from None
            except FilterError as exc:
                raise LinkError(m.handle, "amqp:invalid-field", str(exc)) from None
            if m.source is not None and m.source.filter:  # echo "the filter actually in place"
                m.source.filter = filters.in_place or None
            if filters.filtering:
                self.accepts = FilterGate(self, filters).accepts
        self.queue.add_consumer(self)

    def attached(self) -> None:
        m = self.attach
        self.session.send(Attach(name=m.name, handle=m.handle, role=False,
                                 snd_settle_mode=1 if self.no_ack else 0, rcv_settle_mode=0, source=m.source,
                                 target=m.target, initial_delivery_count=0,
                                 offered_capabilities=FILTER_CAPABILITIES if self.queue.is_stream else None))

    # --- credit ----------------------------------------------------------------------------
    def flow_fields(self, f: Flow) -> None:
        f.handle, f.delivery_count, f.link_credit = self.handle, self.delivery_count, self.credit
        f.available = 0
        f.drain = self.drain

    def flow(self, m: Flow) -> None:
        if m.link_credit is not None:
            count = m.delivery_count if m.delivery_count is not None else self.delivery_count
            self.credit = max(0, (count + m.link_credit - self.delivery_count) % UINT)
        self.drain = bool(m.drain)
        self.filter_paused = False
        self.dispatch()
        if self.drain and self.credit and not self._drains_at_leader():
            self._drained()
        elif m.echo:
            self.session.send_flow(self)

    def _drained(self) -> None:
        """A drain with nothing more to send now: use the credit up, and say so."""
        if self.drain and self.credit and self.session.links.get(self.handle) is self:
            self.delivery_count = (self.delivery_count + self.credit) % UINT
            self.credit = 0
            self.session.send_flow(self)

    def _drains_at_leader(self) -> bool:
        """A queue led by another broker: the drain ends once the leader has answered a fetch
        (gateway.cluster.amqp_consume), whose records arrive after this flow was handled."""
        return self.queue.remote and self.queue.drain(self, self._drained)

    def fetch_budget(self) -> int:
        """How many messages a queue led by another broker may hand this link now: its credit."""
        return self.credit

    def dispatch(self) -> None:
        if not self.queue.deleted:
            self.queue.dispatch()

    def has_credit(self) -> bool:
        session = self.session
        return (self.credit > 0 and session.remote_incoming_window > 0 and not session.closing
                and not session.connection.write_blocked and not self.filter_paused)

    # --- delivering ----------------------------------------------------------------------------
    def deliver(self, queue, offset: int, record, redelivered: bool) -> None:
        data = stream_from_record(record)
        if queue.is_stream:  # as RabbitMQ 4: a stream delivery says where it is in the stream
            data = _annotated(data, "x-stream-offset", Typed(0x81, offset))
        elif queue.counts_deliveries:
            count = queue.delivery_counts.get(offset, 0)
            if count:
                data = _with_delivery_count(data, count)
        session = self.session
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) % UINT
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) % UINT
        if not self.no_ack:
            session.unsettled[delivery_id] = (self, queue, offset)
            self.unsettled += 1
        session.send_delivery(self.handle, delivery_id, self.no_ack, data)

    def cancelled_by_server(self, queue) -> None:
        """The queue was deleted: detach the link, as RabbitMQ 4 does (amqp:resource-deleted)."""
        session = self.session
        if session.links.get(self.handle) is self and not session.closing:
            session.links.pop(self.handle, None)
            self._forget_unsettled()
            session.send_detach_error(self.handle, "amqp:resource-deleted",
                                      f"queue '{queue.name}' in vhost '{session.vhost.name}' was deleted")

    def _forget_unsettled(self) -> None:
        unsettled = self.session.unsettled
        for delivery_id in [d for d, entry in unsettled.items() if entry[0] is self]:
            del unsettled[delivery_id]
        self.unsettled = 0

    def release(self) -> None:
        """Detached (or the session ended): unsettled deliveries go back to the queue."""
        self.queue.remove_consumer(self)
        self._forget_unsettled()
        if not self.queue.deleted:
            self.queue.release(self)
            self.queue.dispatch()


def _offset_spec(source):
    """The ``rabbitmq:stream-offset-spec`` source filter as :meth:`Queue.stream_start` takes it."""
    filters = getattr(source, "filter", None)
    if not isinstance(filters, dict):
        return None
    for value in filters.values():
        if type(value) is Described and value.descriptor == "rabbitmq:stream-offset-spec":
            spec = value.value
            if type(spec) is Typed and spec.code == 0x83:  # a timestamp (milliseconds)
                return datetime.datetime.fromtimestamp(spec.value / 1000, datetime.timezone.utc)
            spec = plain(spec)
            return str(spec) if isinstance(spec, str) else spec
    return None


def _annotated(data: bytes, name: str, value) -> bytes:
    """The message with one more message annotation (the bare message's bytes are kept)."""
    try:
        msg = decode_message(data)
    except AMQP10Error:
        return data
    annotations = dict(msg.message_annotations or {})
    annotations[Symbol(name)] = value
    bare = data[_bare_start(data):]
    head = Message(header=msg.header, delivery_annotations=msg.delivery_annotations,
                   message_annotations=annotations)
    return encode_message(head) + bare


def _bare_start(data: bytes) -> int:
    """Where the bare message (properties on) starts: after header and annotations sections."""
    p = 0
    while p < len(data) and data[p:p + 2] == b"\x00\x53" and data[p + 2] in (0x70, 0x71, 0x72):
        p = value_end(data, p)
    return p


def _with_delivery_count(data: bytes, count: int) -> bytes:
    """The message with its header's delivery-count (and first-acquirer false) set."""
    try:
        msg = decode_message(data)
    except AMQP10Error:
        return data
    header = list(msg.header or [])
    header += [None] * (5 - len(header))
    header[3], header[4] = False, Typed(0x70, count)
    msg.header = header
    return encode_message(msg)
