"""Delayed messages: RabbitMQ's delayed-message exchange (type ``x-delayed-message``).

An exchange of that type routes like its ``x-delayed-type`` (direct, fanout, topic, headers),
but a message published with an ``x-delay`` header of N > 0 milliseconds is held first and
routed N ms after its publish time. Held messages are records of the exchange's delay log, a
one-partition topic (the queue-topic name of ``amq.delayed.<exchange>``, a name no client may
declare): in the AMQP form of :mod:`routing.mapping`, so the due time is the record's
timestamp (publish time) plus its ``x-delay``; the publisher's confirm follows the append
and its fsync, as for a queue. Nothing polls: a heap of (due, offset) says when the next
release is, and the AMQP service sets one reactor timer for it
(:meth:`gateway.amqp.service.AmqpService.schedule_delayed`).

A due message is released (its offset remembered as released) once every queue it was routed
to has stored it; a copy refused on the way (in a cluster, a target queue's leader could not
be reached) is routed again a second later. Released offsets are remembered as a floor plus
the released ones above it, saved with the queues' ack floors; after a restart the log from the floor on is read back into the heap and
whatever came due while the broker was down is routed at once. A crash between a release and
the next checkpoint can release a message twice (at least once, never lost). Equal due times
release in publish order; precision is the reactor's timer (milliseconds), a release may come
late by the time one reactor turn takes.
"""
from __future__ import annotations

import heapq

from core.log import PartitionLog
from routing.message_fields import headers_table
from routing.queue import QueueStats
from routing.reader import LogReader
from wire.records import Record

DELAYED_TYPE = "x-delayed-message"
RETRY_MS = 1000  # a released message whose copy was refused (a target's leader unreachable) goes again


def delay_of(headers: dict | None) -> int:
    """The ``x-delay`` of a publish in ms; absent, not a number or <= 0: no delay (routed at once)."""
    if not headers:
        return 0
    value = headers.get("x-delay")
    if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


class DelayLog:
    """The held messages of one delayed-message exchange; an append target of the router."""

    consumers = ()  # the router's commit loop asks every append target for its consumers
    dedup = None
    remote = False  # always appended here (the router forwards only a RemoteQueue's messages)

    def __init__(self, vhost: str, exchange: str, topic: str, plog: PartitionLog, *, floor: int = 0,
                 released: list[int] | None = None):
        self.vhost = vhost
        self.name = exchange
        self.topic = topic
        self.plog = plog
        self.deleted = False
        self.reader = LogReader(plog)
        self.stats = QueueStats()
        self.floor = max(min(floor, plog.next_offset), plog.log_start_offset)  # every offset below is released
        self.released: set[int] = {o for o in (released or ()) if o >= self.floor}
        self._due: list[tuple[int, int]] = []  # (due ms, offset), the held messages
        self._pending: list[int] = []  # due times of staged messages, in staging order, until appended
        self._end = self.floor  # every offset below is in the heap or released
        self._routing: dict[int, object] = {}  # offset -> copy on its way to the target queues
        self._load()

    def __repr__(self) -> str:
        return f"<DelayLog {self.name!r} vhost={self.vhost!r} topic={self.topic!r} held={len(self._due)}>"

    def _load(self) -> None:
        self._read_to(self.plog.next_offset)
        heapq.heapify(self._due)
        self._advance_floor()

    def _read_to(self, end: int) -> None:
        """Hold what the log has from ``_end`` to ``end`` that this router did not append: the
        log's tail at start-up, or (cluster mode 'spread') what other brokers forwarded here."""
        for offset in range(self._end, end):
            if offset in self.released:
                continue
            record = self.reader.get(offset)
            if record is not None:
                heapq.heappush(self._due, (due_time(record), offset))
            else:
                self.released.add(offset)  # a transaction marker or a gap: nothing to release
        self._end = max(self._end, end)

    @property
    def held(self) -> int:
        return len(self._due) + len(self._pending)

    def next_due(self) -> int | None:
        if self._end < self.plog.next_offset:
            self._read_to(self.plog.next_offset)
        return self._due[0][0] if self._due else None

    # --- the append-target interface of the router's commit ---------------------------
    def expect(self, due_ms: int) -> None:
        """A message was staged for this log with this due time (called in staging order)."""
        self._pending.append(due_ms)

    def appended(self, first_offset: int, sizes: list[int]) -> None:
        self._read_to(first_offset)
        dues, self._pending = self._pending[:len(sizes)], self._pending[len(sizes):]
        for i, due in enumerate(dues):
            heapq.heappush(self._due, (due, first_offset + i))
        self._end = max(self._end, first_offset + len(sizes))

    def append_failed(self, count: int) -> None:
        del self._pending[:count]

    def appended_limits(self) -> None:
        pass

    # --- releasing ------------------------------------------------------------------
    def take_due(self, now_ms: int) -> list[tuple[int, Record]]:
        """The held messages due by ``now_ms`` that are durable (below the high watermark), in due
        order, as (offset, record). Each stays held until :meth:`routing` says where it went and
        :meth:`settle` sees it stored there."""
        if self._end < self.plog.next_offset:
            self._read_to(self.plog.next_offset)
        out = []
        durable_end = self.plog.high_watermark
        while self._due and self._due[0][0] <= now_ms and self._due[0][1] < durable_end:
            _, offset = heapq.heappop(self._due)
            record = self.reader.get(offset)
            if record is None:
                self.released.add(offset)  # gone from the log: nothing left to route
            else:
                out.append((offset, record))
        self._advance_floor()
        return out

    def routing(self, offset: int, copy) -> None:
        """A taken message was routed: ``copy`` (a routing.dead_letter.DeadLetterCopy, None when no
        queue is bound) says when every target queue has it."""
        if copy is None:
            self.released.add(offset)  # unroutable: dropped, as RabbitMQ's plugin drops it
            self._advance_floor()
        else:
            self._routing[offset] = copy

    def settle(self, now_ms: int) -> None:
        """Released: what every target queue has stored (in-sync replicas, or the leader's answer
        for a queue led by another broker). A copy a target refused or could not be sent to (its
        leader unreachable) is held again and routed once more a moment later: a due message is
        routed at least once, never lost on the way."""
        for offset, copy in list(self._routing.items()):
            if copy.rejected:
                del self._routing[offset]
                heapq.heappush(self._due, (now_ms + RETRY_MS, offset))
            elif copy.stored():
                del self._routing[offset]
                self.released.add(offset)
        self._advance_floor()

    def _advance_floor(self) -> None:
        while self.floor in self.released:
            self.released.discard(self.floor)
            self.floor += 1

    def state(self) -> dict:
        return {"floor": self.floor, "released": sorted(self.released)}


class RemoteDelayLog:
    """Cluster mode 'spread': the log of a delayed-message exchange led by another broker. What a
    publisher here holds is forwarded to the leader as the router forwards a RemoteQueue's
    messages; the leader keeps the heap and releases each message once it is due."""

    consumers = ()
    dedup = None
    remote = True
    held = 0  # the leader applies --delayed-messages-max to what it holds
    partition = 0

    def __init__(self, vhost: str, exchange: str, topic: str, leader: int = -1):
        self.vhost, self.name, self.topic, self.leader = vhost, exchange, topic, leader
        self.deleted = False
        self.stats = QueueStats()

    def __repr__(self) -> str:
        return f"<RemoteDelayLog {self.name!r} vhost={self.vhost!r} leader={self.leader}>"

    def expect(self, due_ms: int) -> None:
        pass

    def next_due(self) -> None:
        return None

    def take_due(self, now_ms: int) -> list[tuple[int, Record]]:
        return []

    def settle(self, now_ms: int) -> None:
        pass


def due_time(record: Record) -> int:
    return record.timestamp + delay_of(headers_table(record))
