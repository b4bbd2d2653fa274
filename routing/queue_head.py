"""What leaves a queue at its head without a consumer: expired messages (per-message and queue
TTL) and messages over its length limits (``x-max-length``, ``x-max-length-bytes``, drop-head),
dead-lettered as the queue's arguments say. A part of :class:`routing.queue.Queue`, kept apart so
that the queue module stays about delivery and settling.
"""
from __future__ import annotations

from routing import dead_letter, message_fields
from routing.priorities import STAGED
from wire.records import Record


class QueueHead:
    """Mixed into routing.queue.Queue: reads its args, cursor, reader, plog, stage and clock."""

    def _deadline(self, record: Record) -> int | None:
        """When ``record`` expires (ms since the epoch: per-message or queue TTL), None if never."""
        ttl = message_fields.expiration(record)
        if self.args.message_ttl is not None:
            ttl = self.args.message_ttl if ttl is None else min(ttl, self.args.message_ttl)
        return None if ttl is None else record.timestamp + ttl

    def _expired(self, record: Record) -> bool:
        deadline = self._deadline(record)
        return deadline is not None and deadline <= self.clock() * 1000

    def _dead_letter(self, record: Record, reason: str) -> None:
        if self.dead_letter is not None and self.args.dead_letter_exchange is not None:
            self.dead_letter(self, record, reason)

    def _discard(self, offset: int, record: Record | None, reason: str) -> None:
        """``offset`` leaves the queue without an ack, dead-lettered if it can be. At-least-once:
        held (neither ready nor settled) until the router reports the copy stored."""
        self.delivery_counts.pop(offset, None)
        if record is not None and self.dead_letter is not None and \
                self.dead_letter_strategy() == dead_letter.AT_LEAST_ONCE:
            self.cursor.hold(offset, dead_letter.HELD)
            self.held.reasons[offset] = reason
            self.dead_letter(self, record, reason, offset)
            return
        self.cursor.skip(offset)
        if record is not None:
            self._dead_letter(record, reason)

    def dead_letter_strategy(self) -> str:
        return dead_letter.effective_strategy(self)

    def dead_lettered(self, offset: int) -> None:
        """A held dead letter is stored in its targets (or given up): the source settles it."""
        if self.held.reasons.pop(offset, None) is not None and self.cursor.owner_of(offset) is dead_letter.HELD:
            self.cursor.skip(offset)

    def expire_head(self) -> int:
        """Drop expired messages at the head of the queue (RabbitMQ expires from the head only)."""
        if self.deleted or self.is_stream:
            return 0
        cursor, plog = self.cursor, self.plog
        settled = self._head_settled
        if settled is not None and settled[0] == cursor.moves and settled[1] == plog.log_start_offset and (
                settled[2] is None or settled[2] == plog.next_offset):
            return 0
        self.sync_end()
        dropped = 0
        now_ms = self.clock() * 1000
        while True:
            offset = cursor.peek()
            if offset is None:
                break
            known = self._head_deadline
            if known is not None and known[0] == offset and (known[1] is None or known[1] > now_ms):
                break  # the head the last tick read, not due yet: no read and decode per queue per tick
            record = self.reader.get(offset)
            deadline = None if record is None else self._deadline(record)
            if record is not None and (deadline is None or deadline > now_ms):
                self._head_deadline = (offset, deadline)
                break
            cursor.take(STAGED)
            self._sizes.pop(offset, None)
            self._discard(offset, record, "expired")
            if record is not None:
                dropped += 1
        known = self._head_deadline
        if offset is None:
            self._head_settled = (cursor.moves, plog.log_start_offset, plog.next_offset)
        elif known is not None and known[0] == offset and known[1] is None:
            self._head_settled = (cursor.moves, plog.log_start_offset, None)
        else:
            self._head_settled = None
        return dropped

    def appended_limits(self) -> None:
        """After an append: apply x-max-length / x-max-length-bytes (drop-head) at once."""
        if self.is_stream:
            return  # a stream's size is bounded by its topic's retention, not by dropping heads
        if self.args.max_length is not None or self.args.max_length_bytes is not None:
            self.sync_end()
            self._enforce_limits()

    def _enforce_limits(self) -> None:
        """drop-head overflow: discard (dead-letter) the oldest ready messages over the limits."""
        a = self.args
        if a.overflow != "drop-head" or (a.max_length is None and a.max_length_bytes is None):
            return
        while True:
            count = self.message_count()
            over = a.max_length is not None and count > a.max_length
            over = over or (a.max_length_bytes is not None and count and sum(self._sizes.values()) > a.max_length_bytes)
            if not over:
                return
            taken = self._take_raw_head()
            if taken is None:
                return
            offset, record = taken
            self._sizes.pop(offset, None)
            self._discard(offset, record, "maxlen")

    def _take_raw_head(self) -> tuple[int, Record | None] | None:
        if self.stage is not None:
            offset = self.stage.drop_head(self.cursor, self.reader)
        else:
            taken = self.cursor.take(STAGED)
            offset = None if taken is None else taken[0]
        return None if offset is None else (offset, self.reader.get(offset))
