"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.errors import OffsetOutOfRangeError
from gateway.kafka.apis.registry import handles
from gateway.kafka.apis.fetch import READ_COMMITTED
from wire.kafka import respond

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
# v8 (KIP-405) and v9 (KIP-1005) name offsets of tiered storage, which this broker has none of:
# its whole log is local, so the earliest local offset is the log start and nothing is tiered
# (Kafka answers offset -1, epoch -1 then). v10 (KIP-1075) only adds a timeout for reading
# remote storage, which never applies here.
EARLIEST_LOCAL, LATEST_TIERED = -4, -5


def _list_one(plog, timestamp: int, latest: int) -> tuple[int, int]:
    """(timestamp, offset) for one ListOffsets query; ``latest`` is the HW, or the LSO for read_committed."""
    if timestamp == LATEST:
        return -1, latest
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1
    found = plog.max_timestamp_offset() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return ts, offset


@handles(2)
def list_offsets(ctx, conn, h, req):
    isolation = getattr(req, "isolation_level", 0)
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            plog, epoch, error = ctx.leader_log(t.name, p.partition_index, getattr(p, "current_leader_epoch", -1))
            if error:
                parts.append({"partition_index": p.partition_index, "error_code": error,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            latest = (ctx.last_stable_offset(t.name, p.partition_index, plog) if isolation == READ_COMMITTED
                      else plog.high_watermark)
            ts, offset = _list_one(plog, p.timestamp, latest)
            parts.append({"partition_index": p.partition_index, "error_code": ErrorCode.none, "timestamp": ts,
                          "offset": offset, "leader_epoch": epoch if offset >= 0 else -1})
        topics.append({"name": t.name, "partitions": parts})
    return respond(h, {"throttle_time": 0, "topics": topics})


@handles(23)
def offset_for_leader_epoch(ctx, conn, h, req):
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            plog, _epoch, error = ctx.leader_log(t.topic, p.partition, p.current_leader_epoch)
            if error:
                parts.append({"error_code": error, "partition": p.partition, "leader_epoch": -1, "end_offset": -1})
                continue
            # the largest epoch <= the one asked for, and where the next one began (or the log end)
            epoch, end = plog.epochs.end_offset_for(p.leader_epoch, plog.next_offset)
            if epoch < 0 and not plog.epochs.entries:  # a log written before epochs were kept: all in epoch 0
                epoch, end = (0, plog.next_offset) if p.leader_epoch >= 0 else (-1, -1)
            parts.append({"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": epoch,
                          "end_offset": end})
        topics.append({"topic": t.topic, "partitions": parts})
    return respond(h, {"throttle_time": 0, "topics": topics})


@handles(21)
def delete_records(ctx, conn, h, req):
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            plog, _epoch, error = ctx.leader_log(t.name, p.partition_index)
            low = -1
            if not error:
                try:
                    low = plog.delete_records(p.offset)
                except OffsetOutOfRangeError:
                    error, low = ErrorCode.offset_out_of_range, plog.log_start_offset
            parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": error})
        topics.append({"name": t.name, "partitions": parts})
    return respond(h, {"throttle_time": 0, "topics": topics})
