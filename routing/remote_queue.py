"""A queue defined here but led by another broker of the cluster.

Every broker knows every queue (routing.definitions_follower), but a queue's messages and its
delivery state (cursor, unacked messages, delivery counts) live on one broker: the leader of its
topic, as a RabbitMQ queue lives in one process on one node. Elsewhere the queue is a
:class:`RemoteQueue`: exchanges route to it and declarations find it like any queue, but it holds
no cursor; what is published to it is handed to ``forward`` (the gateway sends it to the leader,
batched per leader), and its figures are the leader's business.

A stream queue is read, not consumed: when this broker holds a replica of it (:meth:`read_replica`),
its consumers read that replica here, up to its high watermark, as RabbitMQ's stream members
serve their own consumers; nothing goes to the leader but the publishes.
"""
from __future__ import annotations

from routing.errors import NOT_IMPLEMENTED, ConnectionError
from routing.queue import Queue
from routing.reader import LogReader
from wire.amqp_link import ACK, REJECT, RELEASE, REQUEUE, REQUEUE_FAILED


class _Committed:
    """A replica as a stream consumer may read it: up to the high watermark, what every in-sync
    replica holds (a follower's log end may hold records the leader has not committed)."""

    def __init__(self, plog):
        self.replica = plog

    @property
    def next_offset(self) -> int:
        return self.replica.high_watermark

    def __getattr__(self, name):
        return getattr(self.replica, name)


class RemoteQueue(Queue):
    remote = True
    # set by the gateway: (queue, consumer) -> a link serving that consumer from the leader
    # (gateway.cluster.amqp_consume), with poke() (credit may have grown), acknowledge(offsets,
    # how: wire.amqp_link ACK ... REQUEUE_FAILED), drain(done) and close()
    link_factory = None
    # set by the gateway: figures(queue) and purge(queue), asked of the leader (and, for the
    # consumers, every broker), each a Deferred (gateway.cluster.amqp_queue_ops)
    ops = None

    def __init__(self, *args, leader: int = -1, **kwargs):
        super().__init__(*args, **kwargs)
        self.leader = leader  # the broker that leads the queue's topic (-1: none right now)
        self.links: dict = {}  # consumer -> its link to the leader
        self._by_offset: dict[int, object] = {}  # delivered and unsettled offset -> the link it came by
        self.getters: dict = {}  # channel -> the link its basic.get calls are served by
        self.replica = None  # a stream queue's replica on this broker, read by its consumers here

    def read_replica(self, plog) -> None:
        """Stream queues: serve consumers from this broker's replica ``plog`` (see the module doc)."""
        if self.is_stream and self.replica is None:
            self.replica = plog
            self.plog = _Committed(plog)
            self.reader = LogReader(self.plog)
            if self.consumers and self.consuming is not None:
                self.consuming.add(self)  # its consumers read here now (Queue.reads_here)

    @property
    def reads_here(self) -> bool:
        return self.replica is not None

    def stream_start(self, spec) -> int:
        if not self.reads_here:
            raise ConnectionError(NOT_IMPLEMENTED, f"stream queue '{self.name}' in vhost '{self.vhost}' has no "
                                                   f"replica on this broker: consume it on one that has")
        return super().stream_start(spec)

    # --- consumers: each is served by its own link to the leader (gateway.cluster.amqp_consume) ---
    def add_consumer(self, consumer) -> None:
        super().add_consumer(consumer)
        if self.link_factory is None or self.reads_here:
            return
        link = self.links[consumer] = self.link_factory(self, consumer)
        link.poke()

    def remove_consumer(self, consumer, auto_delete: bool = True) -> None:
        link = self.links.pop(consumer, None)
        if link is not None:
            self.forget_link(link)
            link.close()  # the leader takes back what it still held
        super().remove_consumer(consumer, auto_delete)

    def forget_link(self, link) -> None:
        """What ``link`` delivered and was not settled is no longer this broker's to settle."""
        for offset in [o for o, l in self._by_offset.items() if l is link]:
            del self._by_offset[offset]
            self.delivery_counts.pop(offset, None)

    def cancel_consumers(self) -> None:
        for link in self.links.values():
            link.close()  # the leader takes back what each held
        self.links.clear()
        super().cancel_consumers()

    def delivered(self, offset: int, count: int, link) -> None:
        """A link handed a message to its consumer (``count``: Kafka's delivery count, 1 the first)."""
        self._by_offset[offset] = link
        if count > 1:
            self.delivery_counts[offset] = count - 1  # RabbitMQ's x-delivery-count: times returned

    def ack(self, offsets) -> None:
        self._settle(offsets, ACK)

    def reject(self, offsets, requeue: bool, failed: bool = False) -> None:
        self._settle(offsets, (REQUEUE_FAILED if failed else REQUEUE) if requeue else REJECT)

    def requeue_uncounted(self, offsets) -> None:  # AMQP 1.0 ``released``
        self._settle(offsets, RELEASE)

    def _settle(self, offsets, kind: int) -> None:
        by_link: dict = {}
        by_offset, counts = self._by_offset, self.delivery_counts
        for offset in offsets:
            link = by_offset.pop(offset, None)
            if counts:  # (empty unless messages came back: most of the time)
                counts.pop(offset, None)
            if link is not None:
                by_link.setdefault(link, []).append(offset)
        for link, settled in by_link.items():
            link.acknowledge(settled, kind)

    def drain(self, consumer, done) -> bool:
        """An AMQP 1.0 receiver's drain: True if ``done()`` will be called once the leader has
        answered a fetch for it (its link asks without waiting); False if no link serves it."""
        link = self.links.get(consumer)
        if link is None:
            return False
        link.drain(done)
        return True

    def get_remote(self, owner, no_ack: bool, answer) -> None:
        """basic.get: ``answer`` gets (offset, redelivered, record) or None, once the leader said."""
        link = self.getters.get(owner)
        if link is None:
            link = self.getters[owner] = self.link_factory(self, Getter())
        link.consumer.waiting.append((no_ack, answer))
        link.poke()

    def release(self, owner) -> list[int]:
        """The owner's channel closed: its consumers were removed first (their links gave
        everything back); what it got with basic.get goes back too."""
        link = self.getters.pop(owner, None)
        if link is not None:
            self.forget_link(link)
            link.close()
        return []

    def dispatch(self) -> int:
        if self.reads_here:
            return super().dispatch()
        for link in list(self.links.values()):
            link.poke()
        return 0

    def __repr__(self) -> str:
        return f"<RemoteQueue {self.name!r} vhost={self.vhost!r} leader={self.leader}>"

    # No cursor here: counts, limits and deliveries are the leader's.
    def sync_end(self) -> None:
        pass

    def message_count(self) -> int:
        return 0

    def unacked_count(self) -> int:
        return 0

    def admits(self, body_size: int, pending: int = 0) -> bool:
        return True  # the leader applies max-length and x-overflow

    def appended_limits(self) -> None:
        pass

    def expire_head(self) -> int:
        return 0

    def may_deliver(self) -> bool:
        return self.reads_here

    def purge(self) -> int:
        return 0

    @property
    def ack_floor(self) -> int:
        return 0

    @property
    def delivered_bound(self) -> int:
        return 0


def remote_stub(queue: Queue, leader: int = -1) -> RemoteQueue:
    """The RemoteQueue standing for ``queue`` (just declared or restored, no log attached)."""
    stub = RemoteQueue(queue.vhost, queue.name, queue.topic, None, durable=queue.durable,
                       exclusive_owner=queue.exclusive_owner, auto_delete=queue.auto_delete,
                       arguments=queue.arguments, leader=leader)
    stub.partition = queue.partition
    return stub


class Getter:
    """basic.get on a queue led by another broker, for one channel: the consumer of a link to the
    leader that wants one message per get asked, answered with it or with nothing (get-empty)."""
    getter = True
    prefetch = 0
    unacked = 0

    def __init__(self):
        self.waiting: list[tuple[bool, object]] = []  # (no_ack, answer(taken or None))

    @property
    def no_ack(self) -> bool:
        return bool(self.waiting) and self.waiting[0][0]

    def has_credit(self) -> bool:
        return bool(self.waiting)

    def deliver(self, queue, offset: int, record, redelivered: bool) -> None:
        _, answer = self.waiting.pop(0)
        answer((offset, redelivered, record))

    def found_nothing(self) -> None:
        if self.waiting:
            _, answer = self.waiting.pop(0)
            answer(None)
