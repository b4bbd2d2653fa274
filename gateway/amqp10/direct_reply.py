"""Direct Reply-To over AMQP 1.0, as RabbitMQ 4.2 serves it (routing.direct_reply holds the
registry, the names and the routing shared with the 0-9-1 door and the other brokers).

The requester attaches a receiver whose source is dynamic, carries the capability
``rabbitmq:volatile-queue``, expires with the link and is not durable, and asks for settled
deliveries: :class:`ReplyLink`. The attach answer's source address is
``/queues/amq.rabbitmq.reply-to.<suffix>``, the ``reply-to`` its requests carry. Nothing is
stored for it: a reply goes straight to the link, pre-settled, and is dropped when the link
has no credit, the session's window is shut, or the link has gone.

A responder sends the reply to that address: through the anonymous terminus (``to``) or a sender
attached to it (:func:`check_target` refuses that attach once the requester has gone, as
RabbitMQ does, when the requester is on this broker), or, over 0-9-1, to the default exchange
with the name as routing key (routing.stream_message turns ``/queues/<name>`` into ``<name>``
on the way to 0-9-1 and back). :func:`send_reply` settles the responder's unsettled reply
accepted at once, whether or not the requester is still there; an address that is no reply
name of this cluster is released, as a message to a missing queue.
"""
from __future__ import annotations

from gateway.amqp import permissions
from gateway.amqp10.errors import LinkError, condition_of
from routing.direct_reply import node_of, route_reply
from routing.errors import AmqpError
from routing.stream_message import amqp10_from_amqp091
from wire.amqp10 import Array
from wire.amqp10_frames import Attach, Released, Source

VOLATILE_QUEUE = "rabbitmq:volatile-queue"
LINK_DETACH = "link-detach"
UINT = 1 << 32


def is_reply_source(m: Attach) -> bool:
    """Whether a receiver's attach asks for a dynamic source (only Direct Reply-To's is served)."""
    return bool(m.role and m.source is not None and m.source.dynamic)


class ReplyLink:
    """The requester's receiver: a Direct Reply-To consumer for as long as the link is attached."""

    unsettled = 0  # (its deliveries are settled: for the HTTP API's link views)
    queue = None  # a consumer of no queue (the HTTP API lists queue consumers)

    def __init__(self, session, m: Attach):
        source = m.source
        if not (VOLATILE_QUEUE in (source.capabilities or ()) and source.durable in (None, 0)
                and source.expiry_policy == LINK_DETACH and source.timeout in (None, 0) and m.snd_settle_mode == 1):
            # RabbitMQ's terms: only the volatile queue, and only on these terms (replies are
            # sent settled and kept nowhere)
            raise LinkError(m.handle, "amqp:not-implemented",
                            f"dynamic source not supported: {source!r} with snd-settle-mode {m.snd_settle_mode}")
        self.session = session
        self.attach = m
        self.handle = m.handle
        self.name = session.router.direct_replies.register(self.reply_arrived)
        self.credit = 0
        self.delivery_count = 0
        self.drain = False
        self.dropped = 0  # replies that found no credit or no window

    @property
    def address(self) -> str:
        return "/queues/" + self.name

    def attached(self) -> None:
        m = self.attach
        source = Source(address=self.address, durable=m.source.durable, expiry_policy=LINK_DETACH, timeout=0,
                        dynamic=True, distribution_mode="move", capabilities=[VOLATILE_QUEUE])
        self.session.send(Attach(name=m.name, handle=m.handle, role=False, snd_settle_mode=1, rcv_settle_mode=0,
                                 source=source, target=m.target, initial_delivery_count=0))

    # --- credit: nothing waits, so a drain uses the credit up at once -----------------------
    def flow_fields(self, f) -> None:
        f.handle, f.delivery_count, f.link_credit = self.handle, self.delivery_count, self.credit
        f.available = 0
        f.drain = self.drain

    def flow(self, m) -> None:
        if m.link_credit is not None:
            count = m.delivery_count if m.delivery_count is not None else self.delivery_count
            self.credit = max(0, (count + m.link_credit - self.delivery_count) % UINT)
        self.drain = bool(m.drain)
        if self.drain and self.credit:
            self.delivery_count = (self.delivery_count + self.credit) % UINT
            self.credit = 0
            self.session.send_flow(self)
        elif m.echo:
            self.session.send_flow(self)

    def dispatch(self) -> None:
        pass

    # --- replies ---------------------------------------------------------------------------
    def reply_arrived(self, exchange: str, routing_key: str, properties_raw: bytes, body: bytes) -> None:
        """A reply (in its 0-9-1 form): sent settled now, or dropped (RabbitMQ's caveats: no
        credit, a shut session window, a connection that cannot keep up)."""
        session = self.session
        connection = session.connection
        if (self.credit <= 0 or session.remote_incoming_window <= 0 or session.closing
                or connection.write_blocked or session.links.get(self.handle) is not self):
            self.dropped += 1
            return
        data = amqp10_from_amqp091(exchange, routing_key, properties_raw, body)
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) % UINT
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) % UINT
        session.send_delivery(self.handle, delivery_id, True, data)

    def release(self) -> None:
        """Detached, or the session or connection ended: later replies to the name are dropped."""
        self.session.router.direct_replies.unregister(self.name)


def check_target(link, name: str) -> None:
    """A sender attaching to ``/queues/<reply name>``: refused (amqp:not-found) once the requester
    has gone from this broker, as RabbitMQ refuses it, or if the name is no requester's of this
    cluster; a requester on another broker is not asked (the attach cannot wait for it): replies
    to it are dropped there if it has gone."""
    session = link.session
    replies = session.router.direct_replies
    try:
        permissions.check(session, "exchange", "", "write")
    except AmqpError as exc:
        raise LinkError(link.handle, condition_of(exc), exc.reply_text) from None
    node = node_of(name)
    if node is None or (node == replies.node_id and not replies.alive(name)) \
            or (node != replies.node_id and session.router.reply_elsewhere is None):
        raise LinkError(link.handle, "amqp:not-found", f"no queue '{name}' in vhost '{session.vhost.name}'")


def requester_status(session, name: str):
    """The management node's ``GET /queues/<reply name>``, a responder's "is the requester still
    there?": (200, what RabbitMQ 4.2 says of its volatile queue) while it is, (404, why) once it
    has gone; the Deferred of that when the requester is on another broker."""
    router = session.router
    replies = router.direct_replies
    vhost = session.vhost.name

    def answer(alive: bool):
        if not alive:
            return 404, f"no queue '{name}' in vhost '{vhost}'"
        return 200, {"name": name, "vhost": vhost, "durable": False, "auto_delete": True, "exclusive": False,
                     "type": "rabbit_volatile_queue", "arguments": {}, "leader": "gateway",
                     "replicas": Array(0xa1, ["gateway"]), "message_count": 0, "consumer_count": 1}

    node = node_of(name)
    if node == replies.node_id:
        return answer(replies.alive(name))
    if node is None or router.reply_elsewhere is None:
        return answer(False)
    d = router.reply_elsewhere(node, vhost, name, None, b"")
    return d.addCallbacks(answer, lambda _failure: answer(False))


def send_reply(link, delivery_id: int, settled: bool, name: str, props: bytes, body: bytes) -> None:
    """A message a responder sent to ``/queues/<reply name>``: to its requester (here or on the
    broker holding it), never stored. Accepted at once, as RabbitMQ settles a reply it may then
    drop; released if ``name`` is no requester's name of this cluster."""
    session = link.session
    d = route_reply(session.router, session.vhost.name, name, props, body)
    if d is None:
        link._outcome(delivery_id, settled, None, Released())
        return
    session.connection.has_published = True
    if d is not True:
        d.addErrback(lambda _failure: None)  # the other broker is out of reach: the reply is lost
    link._outcome(delivery_id, settled, None, None)
