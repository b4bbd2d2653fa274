"""Message priorities: the ready messages of a priority queue, sorted into lanes by priority.

One structure serves both kinds of priority queue RabbitMQ has; both serve the highest
non-empty lane first (strict priority), and within a lane the log's order:

* a classic queue declared with ``x-max-priority`` N has lanes 0..N (a message's priority,
  capped at N; none counts as 0);
* a quorum queue (RabbitMQ 4.3's ``rabbit_fifo_pq``) has 32 lanes without any argument: a
  message's priority clamped to 0..31, none counting as 4. Returned messages go first, before
  any lane (rabbit_fifo's returns queue), in the order they came back.

Entries are ``(offset, redelivered)`` pairs; each lane is a heap, so a returned message goes
back to its place in its lane by offset. Which offsets are staged here, and who owns them, is
the queue's business (:mod:`routing.queue`); this module only orders them.
"""
from __future__ import annotations

import heapq

from routing.errors import unsupported_argument

QUORUM_DEFAULT = 4  # RabbitMQ 4.3 quorum queues: the lane of a message without a priority
QUORUM_TOP = 31  # and the highest lane (32 levels: rabbit_fifo_pq's bitmap of buckets)


def quorum_level(priority: int | None) -> int:
    return QUORUM_DEFAULT if priority is None else max(0, min(priority, QUORUM_TOP))


def check_max_priority(args: dict, queue_type: str, queue: str, vhost: str) -> None:
    """A quorum queue takes no ``x-max-priority``: its levels need no argument, and RabbitMQ
    refuses the argument for that queue type."""
    if queue_type == "quorum" and "x-max-priority" in args:
        raise unsupported_argument("x-max-priority", queue, vhost, queue_type)


class PriorityLanes:
    def __init__(self) -> None:
        self._lanes: dict[int, list[tuple[int, bool]]] = {}  # level -> heap, only non-empty lanes
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def push(self, level: int, offset: int, redelivered: bool) -> None:
        lane = self._lanes.get(level)
        if lane is None:
            lane = self._lanes[level] = []
        heapq.heappush(lane, (offset, redelivered))
        self._count += 1

    def pop(self) -> tuple[int, bool] | None:
        """The next message to deliver, or None when every lane is empty."""
        if not self._count:
            return None
        return self._pop_from(max(self._lanes))

    def pop_lowest(self) -> tuple[int, bool] | None:
        """The oldest message of the lowest lane: what a classic priority queue drops at max-length."""
        if not self._count:
            return None
        return self._pop_from(min(self._lanes))

    def _pop_from(self, level: int) -> tuple[int, bool]:
        lane = self._lanes[level]
        entry = heapq.heappop(lane)
        if not lane:
            del self._lanes[level]
        self._count -= 1
        return entry

    def offsets(self) -> list[int]:
        return [offset for lane in self._lanes.values() for offset, _ in lane]

    def clear(self) -> None:
        self._lanes.clear()
        self._count = 0


class _Staged:
    """Cursor owner of offsets taken into the lanes but not delivered yet."""

    def __repr__(self) -> str:
        return "<staged>"


STAGED = _Staged()


class PriorityStage:
    """A priority queue's ready messages moved out of its cursor (owned by :data:`STAGED`) into
    lanes, since their order is no longer the log's.

    ``level_of`` maps a record (None for a gap in the log) to its lane. A quorum queue's stage has
    ``returns_first``: like RabbitMQ, it leaves returned messages in the cursor, which hands them
    out before anything in the lanes (rabbit_fifo's returns queue), and it moves messages into
    lanes only once it has seen a message whose lane is not the default one (``active``): until
    then the log's order is the priority order, and staging would only cost a read of every
    ready record.
    """

    def __init__(self, level_of, *, returns_first: bool, active: bool = True):
        self.level_of = level_of
        self.lanes = PriorityLanes()
        self.returns_first = returns_first
        self.active = active

    def fill(self, cursor, reader) -> None:
        """Move every ready offset the lanes should order into them."""
        take = cursor.take_fresh if self.returns_first else cursor.take
        while True:
            taken = take(STAGED)
            if taken is None:
                return
            offset, redelivered = taken
            self.lanes.push(self.level_of(reader.get(offset)), offset, redelivered)

    def take(self, cursor, reader, owner) -> tuple[int, bool] | None:
        """The next offset to deliver to ``owner`` (now its owner in the cursor), or None."""
        if self.returns_first:
            taken = cursor.take_returned(owner)
            if taken is not None:
                return taken
            if not self.active:
                return cursor.take_fresh(owner)
        self.fill(cursor, reader)
        return self._claim(cursor, owner, self.lanes.pop)

    def drop_head(self, cursor, reader) -> int | None:
        """The offset a drop-head overflow discards (now owned by STAGED), or None: a classic
        priority queue drops the oldest of its lowest priority; a quorum queue its next delivery."""
        if self.returns_first:
            return (self.take(cursor, reader, STAGED) or (None,))[0]
        self.fill(cursor, reader)
        return (self._claim(cursor, STAGED, self.lanes.pop_lowest) or (None,))[0]

    @staticmethod
    def _claim(cursor, owner, pop) -> tuple[int, bool] | None:
        while True:
            entry = pop()
            if entry is None:
                return None
            if cursor.owner_of(entry[0]) is STAGED:  # not settled meanwhile (purge, expiry)
                cursor.unacked[entry[0]] = owner
                return entry

    def ready_count(self, cursor, reader) -> int:
        if self.active:
            self.fill(cursor, reader)
        return len(self.lanes) + cursor.ready_count()

    def staged_count(self) -> int:
        return len(self.lanes) if self.active else 0

    def purge(self, cursor) -> None:
        """Settle what the lanes hold (the caller purges the cursor)."""
        for offset in self.lanes.offsets():
            if cursor.owner_of(offset) is STAGED:
                cursor.skip(offset)
        self.lanes.clear()
