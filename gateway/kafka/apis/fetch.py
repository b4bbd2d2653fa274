"""Fetch: whole stored batches from each partition, long-polled up to max_wait.

Limits follow KIP-74: ``max_bytes`` for the response and ``partition_max_bytes`` per
partition, except that the first batch of the first partition with data is returned whole
even when it is larger, so a consumer can always make progress. Readers see data below
the high watermark only; read_committed readers below the last stable offset (the start of
the oldest open transaction), and they get the aborted transactions overlapping what is
returned, so the client can drop those producers' batches up to each abort marker.

A fetch with ``replica_id`` set comes from a follower (cluster mode): it reads up to the log
end, its fetch offset tells the leader how far that replica has come (the high watermark and
the ISR follow from it), and it waits for new appends rather than for the high watermark. The
AMQP model's topic is the exception: a follower's fetch of it is answered as soon as the high
watermark passes the one that follower was last told, since a replica applies definitions only
below it. A follower applies what an answer brings before it fetches again, so its next fetch
says it has applied everything below the high watermark it was told: a write to that topic is
answered once every in-sync replica has applied it (gateway.cluster.state_followers), and a
queue declared on one broker is known on the others when its declare-ok comes.

Fetch v13+ names topics by id (KIP-516): an id no topic has gets UNKNOWN_TOPIC_ID. v15 moved the
replica id into ``replica_state``; v16/v17 only add tagged fields this broker leaves empty.
Byte-rate quotas (gateway.kafka.quotas): an over-quota consumer gets an empty answer carrying
``throttle_time_ms``, held back that long, as Kafka does.

Zero copy: on a plaintext connection (``conn.zero_copy``) the records are not read here; the
answer is a wire.kafka.ResponseParts whose ranges the connection sends from the segment files
with ``os.sendfile``, as Kafka's FileRecords.writeTo does. TLS connections get bytes.
"""
from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from core.errors import OffsetOutOfRangeError
from gateway.kafka import quotas
from gateway.kafka.apis.registry import handles
from routing.state import STATE_TOPIC
from wire.kafka import respond, respond_parts

READ_COMMITTED = 1
_PEEK = struct.Struct(">qi11xi")  # baseOffset, batchLength, lastOffsetDelta (at byte 23)


def _replica_of(req) -> int:
    state = getattr(req, "replica_state", None)  # v15+ (KIP-903)
    return state.replica_id if state is not None else getattr(req, "replica_id", -1)


def _followers(ctx, replica: int):
    """The book of the AMQP model topic's followers (gateway.cluster.state_followers) for a
    follower's fetch in a cluster; None for a consumer's (or any fetch on a lone broker)."""
    return ctx.cluster.state_followers if replica >= 0 and ctx.cluster is not None else None


def _topic_names(ctx, req) -> list[tuple[str | None, object]]:
    """(name, request topic) per topic; v13+ asks by id, and an unknown id has no name."""
    return [(t.topic if hasattr(t, "topic") else ctx.topic_name(t.topic_id), t) for t in req.topics]


def _collect(ctx, req, topics, isolation: int, budget: int, zero_copy: bool = False) -> tuple[list[dict], int]:
    """The partitions' answers and their record bytes in all; ``zero_copy``: records are left as
    core.segment.FileRange (sent from the file by the connection, see wire.kafka.respond_parts)."""
    total = 0
    responses = []
    replica = _replica_of(req)
    followers = _followers(ctx, replica)
    for name, t in topics:
        parts = []
        for p in t.partitions:
            if name is None:
                plog, error = None, ErrorCode.unknown_topic_id
            else:
                plog, _epoch, error = ctx.leader_log(name, p.partition, getattr(p, "current_leader_epoch", -1))
            entry = {"partition_index": p.partition, "error_code": error, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                     "aborted_transactions": [] if isolation == READ_COMMITTED else None, "records": b""}
            if not error:
                lso = ctx.last_stable_offset(name, p.partition, plog)
                upper = plog.next_offset if replica >= 0 else lso if isolation == READ_COMMITTED else None
                try:
                    limit = min(p.partition_max_bytes, budget - total)
                    data = plog.read(p.fetch_offset, limit, max_offset=upper, min_one=total == 0,
                                     zero_copy=zero_copy).records if limit > 0 or total == 0 else b""
                    entry["records"] = data
                    total += len(data)
                    if isolation == READ_COMMITTED and data:
                        entry["aborted_transactions"] = _aborted(ctx, name, p.partition, plog, p.fetch_offset, data)
                except OffsetOutOfRangeError:
                    entry["error_code"] = ErrorCode.offset_out_of_range
                entry["high_watermark"] = plog.high_watermark
                if followers is not None and name == STATE_TOPIC:
                    followers.told(replica, p.partition, plog.high_watermark)
                entry["last_stable_offset"] = lso
                entry["log_start_offset"] = plog.log_start_offset
            parts.append(entry)
        responses.append({"topic": name, "topic_id": getattr(t, "topic_id", None), "partitions": parts})
    return responses, total


def _aborted(ctx, topic: str, index: int, plog, fetch_offset: int, data: bytes) -> list[dict]:
    aborted = ctx.producers.partition(topic, index, plog).aborted
    if not aborted.entries:
        return []
    entries = aborted.overlapping(fetch_offset, _end_offset(data if isinstance(data, bytes) else data.read()))
    return [{"producer_id": e.producer_id, "first_offset": e.first_offset} for e in entries]


def _end_offset(data: bytes) -> int:
    """One past the last offset of stored batches, walking their length fields only."""
    position, end = 0, 0
    while position + _PEEK.size <= len(data):
        base, length, delta = _PEEK.unpack_from(data, position)
        end = base + delta + 1
        position += 12 + length
    return end


def _count_out(ctx, responses: list[dict]) -> None:
    for t in responses:
        for p in t["partitions"]:
            if p["records"]:
                ctx.count_out(t["topic"], len(p["records"]))


def _has_new_data(ctx, req, topics, isolation: int) -> bool:
    replica = _replica_of(req)
    followers = _followers(ctx, replica)
    for name, t in topics:
        for p in t.partitions:
            if name is None:
                return True
            plog, _epoch, error = ctx.leader_log(name, p.partition)
            if error or p.fetch_offset < plog.log_start_offset:
                return True
            if followers is not None and name == STATE_TOPIC and followers.untold(replica, p.partition,
                                                                                   plog.high_watermark):
                return True  # what that replica may apply moved
            visible = (plog.next_offset if replica >= 0 else
                       ctx.last_stable_offset(name, p.partition, plog) if isolation == READ_COMMITTED
                       else plog.high_watermark)
            if visible > p.fetch_offset:
                return True
    return False


def _note_applied(ctx, req, topics) -> None:
    """A follower's fetch of the AMQP model's topic: it has applied what it was told before."""
    replica = _replica_of(req)
    followers = _followers(ctx, replica)
    if followers is None:
        return
    moved = False
    for name, t in topics:
        if name == STATE_TOPIC:
            for p in t.partitions:
                moved = followers.fetched(replica, p.partition) or moved
    if moved:
        ctx.waiters.notify()  # a write to it may wait for this (produce, AmqpSpread.committed)


def _state_hw_untold(ctx, req, topics) -> bool:
    """A follower's fetch of the AMQP model's topic whose high watermark it has not been told."""
    replica = _replica_of(req)
    followers = _followers(ctx, replica)
    for name, t in topics:
        if followers is not None and name == STATE_TOPIC:
            for p in t.partitions:
                plog, _epoch, error = ctx.leader_log(name, p.partition)
                if not error and followers.untold(replica, p.partition, plog.high_watermark):
                    return True
    return False


def _record_replica_progress(ctx, req, topics) -> None:
    replica = _replica_of(req)
    if replica < 0 or ctx.cluster is None:
        return
    for name, t in topics:
        for p in t.partitions:
            if name is not None:
                ctx.cluster.replica_fetched(name, p.partition, replica, p.fetch_offset)


@handles(1)
def fetch(ctx, conn, h, req):
    isolation = getattr(req, "isolation_level", 0)
    topics = _topic_names(ctx, req)
    _record_replica_progress(ctx, req, topics)
    consumer = _replica_of(req) < 0
    if not consumer:
        _note_applied(ctx, req, topics)
    budget = getattr(req, "max_bytes", 0x7FFFFFFF)
    if consumer:  # Kafka caps a consumer's answer at what its byte-rate quota allows in a window span
        budget = min(budget, quotas.fetch_max_bytes(ctx, conn, h))

    def answer(responses, total: int):
        throttle = quotas.fetch_throttle_ms(ctx, conn, h, total) if consumer else 0
        if throttle:  # over the byte rate: nothing this time (Kafka's getThrottledResponse)
            for t in responses:
                for p in t["partitions"]:
                    p["records"] = b""
        _count_out(ctx, responses)
        data = (respond_parts if zero_copy else respond)(
            h, {"throttle_time": throttle, "error_code": ErrorCode.none, "session_id": 0, "responses": responses})
        return quotas.hold(ctx, data, throttle)

    # Records go out from the segment files (os.sendfile) on plaintext connections; the ranges
    # are sent or read before control returns to the reactor (core.segment.FileRange).
    zero_copy = getattr(conn, "zero_copy", False)
    untold = not consumer and _state_hw_untold(ctx, req, topics)  # (before _collect notes what it tells)
    responses, total = _collect(ctx, req, topics, isolation, budget, zero_copy)
    wait = req.max_wait.total_seconds()
    errors = any(p["error_code"] for t in responses for p in t["partitions"])
    if total >= max(req.min_bytes, 1) or wait <= 0 or errors or not req.topics or untold:
        return answer(responses, total)
    return ctx.waiters.wait(lambda: _has_new_data(ctx, req, topics, isolation), wait).addCallback(
        lambda _: answer(*_collect(ctx, req, topics, isolation, budget, zero_copy)))
