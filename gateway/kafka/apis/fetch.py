"""Fetch: whole stored batches from each partition, long-polled up to max_wait.

Limits follow KIP-74: ``max_bytes`` for the response and ``partition_max_bytes`` per
partition, except that the first batch of the first partition with data is returned whole
even when it is larger, so a consumer can always make progress. Readers see data below
the high watermark only; with no transactions yet the last stable offset equals it.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.errors import OffsetOutOfRangeError
from gateway.kafka.apis import handles
from wire.kafka import respond

READ_COMMITTED = 1


def _collect(ctx, req, isolation: int) -> tuple[list[dict], int]:
    budget = getattr(req, "max_bytes", 0x7FFFFFFF)
    total = 0
    responses = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            plog = ctx.partition(t.topic, p.partition)
            entry = {"partition_index": p.partition, "error_code": ErrorCode.none, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                     "aborted_transactions": [] if isolation == READ_COMMITTED else None, "records": b""}
            if plog is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    limit = min(p.partition_max_bytes, budget - total)
                    data = plog.read(p.fetch_offset, limit, min_one=total == 0).records if limit > 0 or total == 0 \
                        else b""
                    entry["records"] = data
                    total += len(data)
                except OffsetOutOfRangeError:
                    entry["error_code"] = ErrorCode.offset_out_of_range
                entry["high_watermark"] = entry["last_stable_offset"] = plog.high_watermark
                entry["log_start_offset"] = plog.log_start_offset
            parts.append(entry)
        responses.append({"topic": t.topic, "partitions": parts})
    return responses, total


def _has_new_data(ctx, req) -> bool:
    for t in req.topics:
        for p in t.partitions:
            plog = ctx.partition(t.topic, p.partition)
            if plog is None or plog.high_watermark > p.fetch_offset or p.fetch_offset < plog.log_start_offset:
                return True
    return False


@handles(1)
def fetch(ctx, conn, h, req):
    isolation = getattr(req, "isolation_level", 0)

    def answer(_=None) -> bytes:
        responses, _total = _collect(ctx, req, isolation)
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses})

    responses, total = _collect(ctx, req, isolation)
    wait = req.max_wait.total_seconds()
    errors = any(p["error_code"] for t in responses for p in t["partitions"])
    if total >= max(req.min_bytes, 1) or wait <= 0 or errors or not req.topics:
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses})
    return ctx.waiters.wait(lambda: _has_new_data(ctx, req), wait).addCallback(answer)
