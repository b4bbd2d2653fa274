"""A queue: a one-partition topic of the log, a cursor over it, and the consumers it feeds.

Nothing is copied into memory: a message "in" the queue is an offset of its log at or above the
cursor's ack floor that is not settled yet (see :mod:`routing.cursor`). Publishing appends to the
log (the vhost does that, batched); delivering reads the record back through a
:class:`~routing.reader.LogReader`. Records are delivered as soon as they are appended, before
their fsync, as RabbitMQ delivers persistent messages; publisher confirms wait for the fsync.

A consumer is anything with the small interface of :class:`Consumer` (the gateway's AMQP
consumer); the queue picks among them by priority, then round robin, and only hands a message to
one that has credit (prefetch). Dead-lettering goes through the ``dead_letter`` callback the
vhost installs, so this module never routes; with at-least-once dead-lettering the queue holds
the message until the router reports it stored (:mod:`routing.dead_letter`). Priority queues
(classic with ``x-max-priority``, and every quorum queue) order ready messages through
:mod:`routing.priorities`.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Hashable, Protocol

from core.log import PartitionLog
from routing import dead_letter, delayed_retry, message_fields
from routing.cursor import QueueCursor
from routing.delayed_retry import DelayedRetries
from routing.dedup import Deduplicator
from routing.errors import PRECONDITION_FAILED, ChannelError
from routing.priorities import QUORUM_DEFAULT, PriorityStage, quorum_level
from routing.queue_arguments import QueueArguments, parse_interval
from routing.queue_head import QueueHead
from routing.reader import LogReader
from wire.records import Record


class Consumer(Protocol):
    tag: str
    priority: int
    no_ack: bool
    owner: Hashable  # the channel: unacked deliveries belong to it

    def has_credit(self) -> bool: ...

    def deliver(self, queue: "Queue", offset: int, record: Record, redelivered: bool) -> None: ...


DEFAULT_DELIVERY_LIMIT = 20  # RabbitMQ 4's default for quorum queues (x-delivery-limit / policy delivery-limit)


class QueueStats:
    """Running totals of one queue, read by the management API and /metrics."""

    __slots__ = ("published", "published_bytes", "delivered", "acked")

    def __init__(self) -> None:
        self.published = self.published_bytes = self.delivered = self.acked = 0

    def as_json(self) -> dict:
        return {"publish": self.published, "publish_bytes": self.published_bytes,
                "deliver_get": self.delivered, "ack": self.acked}


def position_key(topic: str, partition: int) -> str:
    """The key of a queue's saved position (ack floor...): its topic, with the partition of a
    super stream's partition stream (those share one topic)."""
    return topic if partition == 0 else f"{topic}#{partition}"


class Queue(QueueHead):
    partition = 0  # the partition of ``topic`` that holds it: 0 but for a super stream's partition streams
    remote = False  # routing.remote_queue.RemoteQueue: led by another broker, no cursor here
    # its consumers are served from a log on this broker, so the group commits' scan
    # (Router.log_moved) looks at it; a RemoteQueue's only when it reads a replica here
    reads_here = True
    def __init__(self, vhost: str, name: str, topic: str, plog: PartitionLog | None, *, durable: bool,
                 exclusive_owner, auto_delete: bool, arguments: dict[str, Any], ack_floor: int = 0,
                 delivered_bound: int | None = None, clock: Callable[[], float] = time.time,
                 delivery_counts: dict[int, int] | None = None, dead_lettering: dict[int, str] | None = None,
                 prioritised: bool = False):
        """``plog`` may come later through :meth:`attach` (the arguments are validated first).
        ``dead_lettering`` and ``prioritised``: saved state of a quorum queue (see routing.broker.checkpoint)."""
        self.vhost = vhost
        self.name = name
        self.topic = topic
        self.durable = durable
        self.exclusive_owner = exclusive_owner  # the connection that owns an exclusive queue, or None
        self.auto_delete = auto_delete
        self.arguments = dict(arguments)
        self.declared_args = QueueArguments(self.arguments, name, vhost)
        self.args = self.declared_args  # with its policies applied (apply_policy)
        self.dedup = Deduplicator.from_arguments(self.arguments, f"queue '{name}' in vhost '{vhost}'")
        self.clock = clock
        self._ack_floor = ack_floor
        self._delivered_bound = delivered_bound  # known after a clean stop: nothing at or above was delivered
        self.consumers: list[Consumer] = []  # by priority, highest first
        self.consuming: set | None = None  # the vhost's set of queues with consumers (Router.log_moved)
        self._order: list[Consumer] = []  # by registration
        self._turn = 0
        self.last_used = clock()
        self.deleted = False
        self.dead_letter: Callable[..., None] | None = None  # (queue, record, reason, held offset or None)
        self.on_empty_auto_delete: Callable[[Queue], None] | None = None
        self.stage = self._priority_stage(prioritised)
        self._seen_end = 0  # records below were looked at for a high priority (see sync_end)
        self.held = dead_letter.HeldDeadLetters(dead_lettering)  # at-least-once dead letters not yet stored
        self._sizes: dict[int, int] = {}  # body sizes of ready messages, for x-max-length-bytes
        # (head offset, its expiry in ms or None) as expire_head last read it: the tick (4 a second)
        # need not read and decode the same head of every queue again until it is due
        self._head_deadline: tuple[int, int | None] | None = None
        # (cursor moves, log start, log end or None) when the tick last found a head that never
        # expires (None: the log end does not matter, a longer log has the same head) or no head:
        # until one of them changes the tick has nothing to look at (10,000 queues)
        self._head_settled: tuple[int, int, int | None] | None = None
        self.stats = QueueStats()
        # quorum queues: offset -> times returned (reject/nack with requeue, channel closed), the
        # x-delivery-count of its next delivery; saved with the ack floor (routing.broker.checkpoint)
        self.delivery_counts: dict[int, int] = dict(delivery_counts or {})
        self.policy_delivery_limit: Callable[[], int | None] = lambda: None  # the vhost's delivery-limit policy
        self.policy_dead_letter_strategy: Callable[[], str | None] = lambda: None  # its dead-letter-strategy policy
        self.policy_value: Callable[..., Any] = lambda key, kind=int: None  # (key, type) -> the vhost's policy value
        self.retries = DelayedRetries()  # quorum queues: returned messages waiting (routing.delayed_retry)

        if plog is not None:
            self.attach(plog)

    def attach(self, plog: PartitionLog) -> None:
        start = self.args.stream_initial_offset
        if start and self.is_stream and plog.next_offset == 0 and plog.size_bytes == 0:
            plog.restart_at(start)  # a new stream: its first message gets this offset (RabbitMQ 4.4)
        self.plog = plog
        # A floor above the log end means the log lost an unsynced tail in a crash after the floor
        # was saved: the lost offsets will be reused, so the floor must come back down to the end.
        floor = min(max(self._ack_floor, plog.log_start_offset), plog.next_offset)
        # After a crash every message at or above the floor may have been delivered before; after a
        # clean stop, only those below the saved delivered bound were.
        bound = plog.next_offset if self._delivered_bound is None else min(self._delivered_bound, plog.next_offset)
        self.cursor = QueueCursor(floor, plog.next_offset, redelivered_below=bound)
        self.reader = LogReader(plog)
        self.held.restore(self.cursor)

    def _priority_stage(self, prioritised: bool) -> PriorityStage | None:
        """Classic queues order by priority with x-max-priority; quorum queues always (RabbitMQ 4.3:
        32 levels), once a message arrives whose level is not the default one."""
        top = self.args.max_priority
        if top is not None:
            return PriorityStage(lambda r: 0 if r is None else min(message_fields.priority(r) or 0, top),
                                 returns_first=False)
        if self.args.queue_type == "quorum":
            return PriorityStage(lambda r: QUORUM_DEFAULT if r is None else quorum_level(message_fields.priority(r)),
                                 returns_first=True, active=prioritised)
        return None

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} vhost={self.vhost!r} topic={self.topic!r}>"

    # --- counts ------------------------------------------------------------------------
    def sync_end(self) -> None:
        self.cursor.log_start(self.plog.log_start_offset)
        end = self.plog.next_offset
        if self.stage is not None and not self.stage.active and end > self._seen_end:
            self._look_for_priorities(end)
        self.cursor.log_end(end)

    def _look_for_priorities(self, end: int) -> None:
        """A quorum queue's records that came by Kafka Produce (a publish forwarded by another
        broker of a spread cluster, a Kafka producer): the first one off the default level turns
        the priority lanes on, as :meth:`appended` does for what is published here."""
        start, self._seen_end = max(self._seen_end, self.cursor.end_offset, self.plog.log_start_offset), end
        for offset in range(start, end):
            record = self.reader.get(offset)
            if record is not None and quorum_level(message_fields.priority(record)) != QUORUM_DEFAULT:
                self.stage.active = True
                return

    def message_count(self) -> int:
        """Ready messages (not the ones delivered and unacked), as RabbitMQ counts them."""
        self.sync_end()
        if self.is_stream:
            return self.plog.next_offset - self.plog.log_start_offset
        if self.stage is not None:
            return self.stage.ready_count(self.cursor, self.reader)
        return self.cursor.ready_count()

    def unacked_count(self) -> int:
        """Delivered and not settled (the cursor also owns staged and held offsets)."""
        staged = self.stage.staged_count() if self.stage is not None else 0
        return max(len(self.cursor.unacked) - staged - len(self.held) - len(self.retries), 0)

    def consumer_count(self) -> int:  # another broker's consumers (links served here) are its to count
        return sum(1 for c in self.consumers if not getattr(c, "remote_link", False))

    # --- publishing (called by the vhost before the append) ----------------------------
    def admits(self, body_size: int, pending: int = 0) -> bool:
        """False when a reject-publish overflow policy refuses one more message.

        ``pending``: messages already staged for this queue's next append."""
        if self.args.overflow == "drop-head":
            return True
        count = self.message_count() + pending + len(self.held)  # held dead letters count, as in RabbitMQ
        if self.args.max_length is not None and count >= self.args.max_length:
            return False
        if self.args.max_length_bytes is not None and sum(self._sizes.values()) + body_size > self.args.max_length_bytes:
            return False
        return True

    def appended(self, first_offset: int, sizes: list[int], sources=()) -> None:
        if self.args.max_length_bytes is not None:
            for i, size in enumerate(sizes):
                self._sizes[first_offset + i] = size
        stage = self.stage
        self._seen_end = max(self._seen_end, first_offset + len(sizes))  # looked at here, not in sync_end
        if stage is not None and not stage.active and any(quorum_level(message_fields.priority(s)) != QUORUM_DEFAULT
                                                                for s in sources):
            stage.active = True  # the first message off the default level: from now on the lanes order deliveries

    # --- consumers ---------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self._order.append(consumer)
        self.consumers.append(consumer)
        self.consumers.sort(key=lambda c: -c.priority)
        self.last_used = self.clock()
        if self.consuming is not None and self.reads_here:
            self.consuming.add(self)

    def remove_consumer(self, consumer: Consumer, auto_delete: bool = True) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self._order.remove(consumer)
        self.last_used = self.clock()
        if not self.consumers and self.consuming is not None:
            self.consuming.discard(self)
        if auto_delete and self.auto_delete and not self.consumers and self.on_empty_auto_delete is not None:
            self.on_empty_auto_delete(self)  # RabbitMQ: auto-delete once the last consumer is gone

    def cancel_consumers(self) -> None:
        """The queue is gone: every consumer is dropped and told (basic.cancel, a stream's
        metadata update)."""
        for consumer in list(self.consumers):
            if consumer not in self.consumers:
                continue  # an earlier one's cancellation took it along (a stream connection drops them all)
            self.consumers.remove(consumer)
            cancelled = getattr(consumer, "cancelled_by_server", None)
            if cancelled is not None:
                cancelled(self)

    def _pick(self) -> Consumer | None:
        consumers = self.consumers
        if not consumers:
            return None
        if self.args.single_active_consumer:
            active = self._order[0]
            return active if active.has_credit() else None
        top = consumers[0].priority
        n = len(consumers)
        for i in range(n):
            consumer = consumers[(self._turn + i) % n]
            if consumer.priority == top and consumer.has_credit():
                self._turn = (self._turn + i + 1) % n
                return consumer
        for consumer in consumers:  # lower-priority consumers get what the top ones cannot take
            if consumer.priority < top and consumer.has_credit():
                return consumer
        return None

    # --- delivering --------------------------------------------------------------------
    def may_deliver(self) -> bool:
        """False only when :meth:`dispatch` would certainly find nothing new to deliver."""
        return (self.is_stream or self.plog.next_offset != self.cursor.end_offset
                or self.plog.log_start_offset > self.cursor.ack_floor or self.cursor.has_ready
                or (self.stage is not None and bool(self.stage.lanes)))

    def dispatch(self) -> int:
        """Hand ready messages to consumers with credit; returns how many were delivered."""
        if self.deleted:
            return 0
        if self.is_stream:
            return self._dispatch_stream()
        self.sync_end()
        self._enforce_limits()
        delivered = 0
        while self.consumers and (self.cursor.has_ready or (self.stage is not None and self.stage.lanes)):
            consumer = self._pick()
            if consumer is None:
                break
            taken = self._take(consumer.owner)
            if taken is None:
                break
            offset, redelivered, record = taken
            if consumer.no_ack:
                self.cursor.ack((offset,))
            consumer.deliver(self, offset, record, redelivered)
            delivered += 1
        self.stats.delivered += delivered
        return delivered

    # --- streams: every consumer reads the log from its own position; nothing is removed ------
    @property
    def is_stream(self) -> bool:
        return self.args.queue_type == "stream"

    def stream_start(self, spec) -> int:
        """The first offset for a stream consumer's ``x-stream-offset`` (default ``next``)."""
        plog = self.plog
        if spec is None or spec == "next":
            return plog.next_offset
        if spec == "first":
            return plog.log_start_offset
        if spec == "last":  # the last chunk: we have no chunks, so the last message
            return max(plog.next_offset - 1, plog.log_start_offset)
        if isinstance(spec, bool):
            raise ChannelError(PRECONDITION_FAILED, f"invalid x-stream-offset {spec!r}")
        if isinstance(spec, int):
            return min(max(spec, plog.log_start_offset), plog.next_offset)
        if hasattr(spec, "timestamp"):  # a datetime (AMQP timestamp field)
            return self._offset_at(int(spec.timestamp() * 1000))
        if isinstance(spec, (str, bytes)):  # an interval back from now: "30m", "1h", "7D"
            ms = parse_interval(spec.decode() if isinstance(spec, bytes) else spec)
            if ms is not None:
                return self._offset_at(int(self.clock() * 1000) - ms)
        raise ChannelError(PRECONDITION_FAILED, f"invalid x-stream-offset {spec!r}: use first, last, next, an "
                                                f"offset or a timestamp")

    def _offset_at(self, timestamp_ms: int) -> int:
        found = self.plog.offset_for_timestamp(timestamp_ms)
        return self.plog.next_offset if found is None else found[0]

    def _dispatch_stream(self) -> int:
        end = self.plog.next_offset
        delivered = 0
        for consumer in list(self.consumers):
            pull = getattr(consumer, "pull", None)
            if pull is not None:  # a stream-protocol subscription reads whole chunks itself
                delivered += pull(self)
                continue
            position = consumer.stream_position
            accepts = getattr(consumer, "accepts", None)  # an AMQP 1.0 receiver's filters
            while position < end and consumer.has_credit():
                if position < self.plog.log_start_offset:
                    position = self.plog.log_start_offset
                    continue
                record = self.reader.get(position)
                if record is not None and (accepts is None or accepts(record)):
                    consumer.deliver(self, position, record, False)
                    delivered += 1
                position += 1
            consumer.stream_position = position
        self.stats.delivered += delivered
        return delivered

    def get(self, owner: Hashable, no_ack: bool) -> tuple[int, bool, Record] | None:
        """basic.get: one message or None."""
        self.sync_end()
        self._enforce_limits()
        taken = self._take(owner)
        if taken is not None:
            self.stats.delivered += 1
            if no_ack:
                self.cursor.ack((taken[0],))
        self.last_used = self.clock()
        return taken

    def _take(self, owner: Hashable) -> tuple[int, bool, Record] | None:
        """The next live message, skipping (and dead-lettering) expired ones."""
        while True:
            if self.stage is not None:
                taken = self.stage.take(self.cursor, self.reader, owner)
            else:
                taken = self.cursor.take(owner)
            if taken is None:
                return None
            offset, redelivered = taken
            record = self.reader.get(offset)
            if record is None:  # a transaction marker or a compacted-away offset
                self.cursor.skip(offset)
                continue
            self._sizes.pop(offset, None)
            if self._expired(record):
                self._discard(offset, record, "expired")
                continue
            return offset, redelivered, record

    # --- settling ----------------------------------------------------------------------
    def ack(self, offsets) -> None:
        if not self.is_stream:  # a stream keeps its messages: an ack only gives credit back
            done = self.cursor.ack(offsets)
            self.stats.acked += len(done)
            if self.delivery_counts:
                for offset in done:
                    self.delivery_counts.pop(offset, None)

    def reject(self, offsets, requeue: bool, failed: bool = False) -> None:
        """Settle delivered offsets without acking them: back to the queue (``requeue``), else
        discarded or dead-lettered. ``failed``: basic.reject rather than basic.nack, which a
        quorum queue's delayed retry tells apart."""
        if self.is_stream:
            return
        offsets = list(offsets)
        if requeue:
            self._return(offsets, failed)
            return
        for offset in offsets:
            if self.cursor.owner_of(offset) is None:
                continue
            self._discard(offset, self.reader.get(offset), "rejected")

    def requeue_uncounted(self, offsets) -> None:
        """Delivered messages come back without counting a delivery (AMQP 1.0 ``released``)."""
        if not self.is_stream:
            self.cursor.requeue([o for o in offsets if self.cursor.owner_of(o) is not None])

    def release(self, owner: Hashable) -> list[int]:
        """A channel closed: its unacked deliveries go back to the queue, in offset order."""
        if self.is_stream:
            return []
        mine = self.cursor.owned_by(owner)
        self._return(mine)
        return mine

    def apply_policy(self, policy: dict | None, operator: dict | None) -> None:
        """The queue's policy and operator policy (definitions, or None) changed: its effective
        arguments follow; a lower length limit drops or dead-letters at the next publish."""
        self.args = self.declared_args.merged(policy, operator)

    @property
    def counts_deliveries(self) -> bool:
        return self.args.queue_type == "quorum"

    def delivery_limit(self) -> int | None:
        """The argument, else the vhost's ``delivery-limit`` policy, else RabbitMQ 4's default; None: no limit."""
        limit = self.args.delivery_limit
        if limit is None:
            limit = self.policy_delivery_limit()
        if limit is None:
            limit = DEFAULT_DELIVERY_LIMIT
        return None if limit < 0 else limit

    def _return(self, offsets: list[int], failed: bool = False) -> None:
        """Delivered messages come back to the queue. A quorum queue counts each return and
        dead-letters (reason ``delivery_limit``) a message returned more than its limit allows,
        as RabbitMQ does with poison messages; with delayed retry on, a return may wait first."""
        if not self.counts_deliveries:
            self.cursor.requeue(offsets)
            return
        limit, back = self.delivery_limit(), []
        for offset in offsets:
            if self.cursor.owner_of(offset) is None:
                continue
            count = self.delivery_counts.get(offset, 0) + 1
            if limit is not None and count > limit:
                self._discard(offset, self.reader.get(offset), "delivery_limit")
            else:
                self.delivery_counts[offset] = count
                back.append(offset)
        config = delayed_retry.resolve(self.arguments, self.policy_value)
        if config is not None:
            back = self._delay_returns(config, back, failed)
        self.cursor.requeue(back)

    def _delay_returns(self, config, offsets: list[int], failed: bool) -> list[int]:
        """Hold the returns delayed retry says wait; the rest, to requeue now."""
        now_ms, now = int(self.clock() * 1000), []
        for offset in offsets:
            self.retries.returned(offset, failed)
            wait = self.retries.delay(config, offset, failed)
            if wait is None:
                now.append(offset)
            else:
                self.retries.hold(self.cursor, offset, now_ms + wait)
        return now

    def release_due_retries(self) -> None:
        """The tick: waiting returns that came due are ready again (first of all)."""
        if self.retries.release_due(self.cursor, self.clock() * 1000):
            self.dispatch()

    def delivery_counts_json(self) -> dict[str, int]:
        """The counts still of use (messages not yet settled), for the checkpoint."""
        floor = self.cursor.ack_floor
        for offset in [o for o in self.delivery_counts if o < floor]:
            del self.delivery_counts[offset]
        self.retries.forget_settled(floor)
        return {str(o): n for o, n in sorted(self.delivery_counts.items())}

    def purge(self) -> int:
        self.sync_end()
        count = self.message_count()
        if self.stage is not None:
            self.stage.purge(self.cursor)
        self.cursor.purge()  # not the returns waiting for their retry: they are not ready yet
        self._sizes.clear()
        return count

    @property
    def ack_floor(self) -> int:
        return self.cursor.ack_floor

    @property
    def delivered_bound(self) -> int:
        """Offsets at or above this were never handed to a consumer."""
        return self.cursor.next_offset

