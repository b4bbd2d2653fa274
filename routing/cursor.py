"""A classic queue's consumption state over its log: what is delivered, acked, to redeliver.

An AMQP queue is a one-partition topic (see DESIGN.md); consuming from it destroys nothing
in the log. What a queue "contains" is the part of the log its consumers have not settled:

* ``ack_floor``: every offset below it is settled (acked, rejected or purged). This one
  number is what gets persisted, as the queue's committed offset.
* ``settled_above``: offsets at or above the floor settled out of order; the floor moves up
  over them as soon as the gap below closes.
* ``unacked``: offsets delivered and waiting for an ack (offset -> owner, e.g. a channel).
* ``returned``: offsets handed back (nack/reject with requeue, channel closed) to be
  delivered again, lowest first, before anything new, and flagged redelivered.
* ``next_offset``: the first offset never delivered.
* ``ahead``: offsets at or above ``next_offset`` that already have an owner (:meth:`hold`,
  e.g. a dead letter still pending when the broker restarted): never handed out as fresh.

After a restart only the floor is known, so everything at or above it is delivered again,
flagged redelivered up to the old ``next_offset`` bound when that is known: at least once.

Pure bookkeeping over offsets; reading the records is the caller's business.
"""
from __future__ import annotations

import heapq
from typing import Hashable, Iterable


class QueueCursor:
    def __init__(self, ack_floor: int = 0, end_offset: int = 0, *, redelivered_below: int | None = None):
        self.ack_floor = ack_floor
        self.next_offset = ack_floor
        self.end_offset = max(end_offset, ack_floor)  # the log end, as last told
        self.unacked: dict[int, Hashable] = {}
        self.settled_above: set[int] = set()
        self._returned: list[int] = []  # heap
        self._redelivered_below = ack_floor if redelivered_below is None else redelivered_below
        self._was_returned: set[int] = set()
        self.moves = 0  # counts every change that can change :meth:`peek`'s answer (Queue.expire_head)
        self.ahead: set[int] = set()

    # --- the log grows / shrinks ----------------------------------------------------
    def log_end(self, end_offset: int) -> None:
        end = max(end_offset, self.ack_floor)
        if end != self.end_offset:
            self.end_offset = end
            self.moves += 1

    def log_start(self, start_offset: int) -> None:
        """Retention or DeleteRecords removed offsets below ``start_offset``: they are settled."""
        if start_offset > self.ack_floor:
            self.settle(o for o in range(self.ack_floor, start_offset) if o not in self.unacked)

    # --- delivering -------------------------------------------------------------------
    @property
    def has_ready(self) -> bool:
        return bool(self._returned) or self.next_offset < self.end_offset

    def ready_count(self) -> int:
        """Messages waiting to be delivered (RabbitMQ's message_count)."""
        fresh = self.end_offset - self.next_offset - sum(1 for o in self.settled_above if o >= self.next_offset)
        return len(self._returned) + max(fresh - len(self.ahead), 0)

    def take(self, owner: Hashable) -> tuple[int, bool] | None:
        """The next offset to deliver and whether it is a redelivery; None when nothing is ready."""
        return self.take_returned(owner) or self.take_fresh(owner)

    def take_returned(self, owner: Hashable) -> tuple[int, bool] | None:
        """The lowest returned offset (always a redelivery), or None."""
        while self._returned:
            offset = heapq.heappop(self._returned)
            self.moves += 1
            if offset in self.unacked or offset < self.ack_floor or offset in self.settled_above:
                continue
            self.unacked[offset] = owner
            return offset, True
        return None

    def take_fresh(self, owner: Hashable) -> tuple[int, bool] | None:
        """The next offset never delivered in this run, or None."""
        while self.next_offset < self.end_offset:
            offset = self.next_offset
            self.next_offset += 1
            self.moves += 1
            if offset in self.settled_above:
                continue
            if self.ahead and offset in self.ahead:
                self.ahead.discard(offset)
                continue
            self.unacked[offset] = owner
            return offset, offset < self._redelivered_below
        return None

    def hold(self, offset: int, owner: Hashable) -> None:
        """Give an unsettled offset to ``owner`` whether or not it was delivered: it is neither
        ready nor settled until ``owner`` settles it (see routing.dead_letter)."""
        if offset < self.ack_floor or offset in self.settled_above:
            return
        self.moves += 1
        self.unacked[offset] = owner
        if offset >= self.next_offset:
            self.ahead.add(offset)

    def peek(self) -> int | None:
        """The offset :meth:`take` would hand out next, without taking it."""
        returned = self._returned
        while returned:
            offset = returned[0]
            if offset in self.unacked or offset < self.ack_floor or offset in self.settled_above:
                heapq.heappop(returned)
                continue
            return offset
        offset = self.next_offset
        while offset < self.end_offset:
            if offset not in self.settled_above and offset not in self.ahead:
                return offset
            offset += 1
        return None

    def skip(self, offset: int) -> None:
        """Settle a message that was taken but will never be delivered (expired, dropped)."""
        self.unacked.pop(offset, None)
        self.settle((offset,))

    # --- settling -------------------------------------------------------------------
    def ack(self, offsets: Iterable[int]) -> list[int]:
        """Settle delivered offsets; returns those that were in fact unacked."""
        done = [o for o in dict.fromkeys(offsets) if o in self.unacked]
        for offset in done:
            del self.unacked[offset]
        self.settle(done)
        return done

    def requeue(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            if self.unacked.pop(offset, None) is not None:
                heapq.heappush(self._returned, offset)
                self.moves += 1

    def release_owner(self, owner: Hashable) -> list[int]:
        """Return every delivery of ``owner`` (a closed channel) to the queue; returns them sorted."""
        mine = self.owned_by(owner)
        self.requeue(mine)
        return mine

    def owned_by(self, owner: Hashable) -> list[int]:
        """The offsets delivered to ``owner`` and not yet settled, sorted."""
        return sorted(o for o, who in self.unacked.items() if who == owner)

    def settle(self, offsets: Iterable[int]) -> None:
        self.moves += 1
        ahead = self.ahead
        for offset in offsets:
            if offset >= self.ack_floor:
                self.settled_above.add(offset)
                if ahead:
                    ahead.discard(offset)
        while self.ack_floor in self.settled_above:
            self.settled_above.discard(self.ack_floor)
            self.ack_floor += 1
        if self.next_offset < self.ack_floor:
            self.next_offset = self.ack_floor

    def purge(self) -> int:
        """Settle everything ready (not what is delivered and unacked); returns how many."""
        count = self.ready_count()
        pending = [o for o in range(self.next_offset, self.end_offset)
                   if o not in self.settled_above and o not in self.ahead]
        pending += [o for o in self._returned if o not in self.unacked]
        self._returned.clear()
        self.ahead.clear()  # still held by their owners, but no longer above next_offset
        self.moves += 1
        self.next_offset = self.end_offset
        self.settle(pending)
        return count

    def owner_of(self, offset: int) -> Hashable | None:
        return self.unacked.get(offset)
