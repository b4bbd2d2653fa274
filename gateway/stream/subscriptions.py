"""Stream-protocol subscriptions: a consumer of a stream queue that reads whole chunks.

A chunk is one of our record batches (what one publish turn appended to the stream), cut to the
records at or after the subscription's position; a batch whose offsets have gaps (compaction,
transaction markers) goes out as one chunk per run of consecutive offsets. Credit counts chunks,
as in RabbitMQ. Only records below the high watermark (durable, and on every in-sync replica)
are delivered.

Filtering (RabbitMQ 3.13's stream filtering): a subscription with ``filter.N`` properties gets
only the chunks holding at least one record whose ``x-stream-filter-value`` is among the values
(``match-unfiltered: true`` also matches records without one); as with RabbitMQ's Bloom filters
the client still filters the messages of a chunk it gets.

Single active consumer: subscriptions with ``single-active-consumer: true`` and the same
``name`` on one stream form a group of which one is active; a super stream's partition goes to
consumer ``partition index mod group size`` (RabbitMQ's rule) so the partitions spread over the
group. The active one is told with ConsumerUpdate and answers with where to start.
"""
from __future__ import annotations

import logging

from gateway.logs import fields
from routing import stream_message
from routing.queue import Queue
from routing.streams import FILTER_HEADER
from wire import stream_codec as sc
from wire.records import decode_batch, iter_batches

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20  # read from the log this much at a time
MAX_CHUNK_RECORDS = 4096
CHUNK_OVERHEAD = 8 + 1 + 8 + sc.CHUNK_HEADER.size  # frame head, subscription id, committed id, chunk header


class Subscription:
    priority = 0
    no_ack = True

    def __init__(self, connection, subscription_id: int, queue: Queue, position: int, credit: int,
                 properties: dict[str, str]):
        self.connection = connection
        self.owner = connection
        self.id = subscription_id
        self.tag = f"stream-{subscription_id}"
        self.queue = queue
        self.position = position
        self.credit = credit
        self.properties = properties
        self.filters = {v.encode() for k, v in properties.items() if k.startswith("filter.")}
        self.match_unfiltered = properties.get("match-unfiltered", "false").lower() == "true"
        self.sac_name = properties.get("name") if properties.get("single-active-consumer", "").lower() == "true" \
            else None
        self.super_stream = properties.get("super-stream")
        self.active = True
        self.awaiting_update: int | None = None  # correlation id of a ConsumerUpdate not yet answered
        self.sac_member: int | None = None  # its id in the cluster's single-active-consumer groups (sac.py)
        self.delivered_chunks = 0
        self.skipped = 0  # messages too large for the client's frame-max (warned about once)

    def has_credit(self) -> bool:
        return self.active and self.credit > 0 and self.awaiting_update is None

    def deliver(self, queue, offset, record, redelivered) -> None:  # the chunk path (pull) is used instead
        raise NotImplementedError

    def pull(self, queue: Queue) -> int:
        """Send chunks while credit lasts; returns how many messages went out."""
        if not self.has_credit() or queue.deleted or not self.connection.writable():
            return 0
        plog = queue.plog
        end = plog.high_watermark
        sent = 0
        while self.credit > 0 and self.position < end:
            if self.position < plog.log_start_offset:
                self.position = plog.log_start_offset
            data = plog.read(self.position, READ_BYTES, max_offset=end).records
            if not data:
                break
            moved = False
            for pos, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta
                if last < self.position:
                    continue
                moved = True
                if header.is_control:
                    self.position = last + 1
                    continue
                records = [r for r in decode_batch(data, pos, verify_crc=False).records if r.offset >= self.position]
                self.position = last + 1
                if records and self._matches(records):
                    sent += self._send(records)
                    if self.credit <= 0:
                        break
            if not moved:
                break
        return sent

    def _matches(self, records) -> bool:
        if not self.filters:
            return True
        for record in records:
            value = next((h.value for h in record.headers if h.key == FILTER_HEADER), None)
            if value is None:
                if self.match_unfiltered:
                    return True
            elif value in self.filters:
                return True
        return False

    def _send(self, records) -> int:
        """One batch out as chunks of consecutive offsets that fit the client's frame-max; one credit."""
        limit = self.connection.frame_max - CHUNK_OVERHEAD
        first, messages, size = records[0].offset, [], 0
        for record in records:
            message = stream_message.stream_from_record(record)
            if messages and (record.offset != first + len(messages) or size + len(message) + 4 > limit
                             or len(messages) >= MAX_CHUNK_RECORDS):
                self._chunk(first, record.timestamp, messages)
                first, messages, size = record.offset, [], 0
            if len(message) + 4 > limit:  # cannot go in any frame the client accepts: skipped, and said so
                if not self.skipped:  # once per subscription: a tiny frame-max must not flood the log
                    log.warning("stream message too large for the client's frame-max; skipped (and any more "
                                "for this subscription)", extra=fields(
                                    stream=self.queue.name, offset=record.offset, size=len(message),
                                    frame_max=self.connection.frame_max))
                self.skipped += 1
                first = record.offset + 1
                continue
            messages.append(message)
            size += len(message) + 4
        if messages:
            self._chunk(first, records[-1].timestamp, messages)
        self.credit -= 1
        self.delivered_chunks += 1
        return len(records)

    def _chunk(self, first: int, timestamp: int, messages: list[bytes]) -> None:
        committed = self.queue.plog.high_watermark - 1 if self.connection.deliver_version >= 2 else None
        self.connection.write(sc.encode_deliver(self.id, first, timestamp, messages, committed))

    def cancelled_by_server(self, queue: Queue) -> None:
        """The stream queue was deleted (through AMQP, Kafka or the management API)."""
        self.connection.service.stream_deleted(queue.vhost, queue.name)


def start_offset(queue: Queue, spec: tuple[int, int | None]) -> int:
    """Where a subscription (or an activated single active consumer) starts."""
    kind, value = spec
    plog = queue.plog
    if kind == sc.OFFSET_FIRST:
        return plog.log_start_offset
    if kind == sc.OFFSET_LAST:  # the last chunk: our chunks are batches, so the last batch's first offset
        return _last_batch_start(queue)
    if kind == sc.OFFSET_OFFSET:
        return min(max(value or 0, plog.log_start_offset), plog.high_watermark)
    if kind == sc.OFFSET_TIMESTAMP:
        found = plog.offset_for_timestamp(value or 0)
        return plog.high_watermark if found is None else found[0]
    return plog.high_watermark  # next


def _last_batch_start(queue: Queue) -> int:
    plog = queue.plog
    end = plog.high_watermark
    if end <= plog.log_start_offset:
        return end
    data = plog.read(max(end - 1, plog.log_start_offset), READ_BYTES, max_offset=end).records
    for _, header in iter_batches(data):
        if header.base_offset + header.last_offset_delta >= end - 1:
            return max(header.base_offset, plog.log_start_offset)
    return end - 1


def elected(size: int, partition: int) -> int:
    """Which of a group of ``size`` consumers (in the order they came) is active: the first, or for
    partition ``partition`` of a super stream (-1: a plain stream) ``partition mod size``, which
    spreads a super stream's partitions over the group, as RabbitMQ does."""
    return partition % size if partition >= 0 else 0


class ActiveConsumers:
    """Single-active-consumer groups of the whole broker: (vhost, stream, name) -> subscriptions."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str, str], list[Subscription]] = {}

    def join(self, vhost: str, stream: str, sub: Subscription) -> None:
        key = (vhost, stream, sub.sac_name or "")
        group = self.groups.setdefault(key, [])
        group.append(sub)
        sub.active = False
        self._elect(key)

    def leave(self, vhost: str, stream: str, sub: Subscription) -> None:
        key = (vhost, stream, sub.sac_name or "")
        group = self.groups.get(key)
        if group is None or sub not in group:
            return
        group.remove(sub)
        if not group:
            del self.groups[key]
            return
        self._elect(key)

    def _elect(self, key) -> None:
        group = self.groups[key]
        chosen = group[elected(len(group), group[0].queue.partition if group[0].super_stream else -1)]
        for sub in group:
            if sub is not chosen and sub.active:
                sub.active = False
                sub.connection.consumer_update(sub, False)
        if not chosen.active:
            chosen.active = True
            log.info("stream single active consumer", extra=fields(stream=key[1], name=key[2],
                                                                   subscription=chosen.id))
            chosen.connection.consumer_update(chosen, True)
