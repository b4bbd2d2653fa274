"""DescribeLogDirs and AlterReplicaLogDirs: this broker has one log directory, its data dir.

DescribeLogDirs tells the truth about it: its absolute path, each partition this broker holds
with the bytes of its segments, offset lag ``max(HW - LEO, 0)`` (Kafka's measure for a current
log: 0 on a leader) and no future logs, and the volume's total and usable bytes (v4). With one
directory there is nowhere to move a replica to: AlterReplicaLogDirs to the data dir itself is a
success with nothing to do, another path is LOG_DIR_NOT_FOUND, a topic this broker holds no
partition of is UNKNOWN_TOPIC_OR_PARTITION and a partition of a held topic it does not hold is
REPLICA_NOT_AVAILABLE (Kafka's answers, checked against Apache Kafka 4.4).
"""
from __future__ import annotations

import os
import shutil

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from wire.kafka import respond


def _log_dir(ctx) -> str:
    return os.path.realpath(ctx.logs.data_dir)


def _partition(index: int, plog) -> dict:
    return {"partition_index": index, "partition_size": plog.size_bytes,
            "offset_lag": max(plog.high_watermark - plog.next_offset, 0), "is_future_key": False}


@handles(35)
def describe_log_dirs(ctx, conn, h, req):
    held = ctx.logs.logs
    if req.topics is None:
        wanted = sorted(held)
    else:  # partitions this broker does not hold are left out, as Kafka leaves them out
        wanted = [(t.topic, p) for t in req.topics for p in t.partitions if (t.topic, p) in held]
    topics: dict[str, list[dict]] = {}
    for name, index in wanted:
        topics.setdefault(name, []).append(_partition(index, held[(name, index)]))
    path = _log_dir(ctx)
    try:
        usage = shutil.disk_usage(path)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    result = {"error_code": ErrorCode.none, "log_dir": path, "total_bytes": total, "usable_bytes": usable,
              "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]})


@handles(34)
def alter_replica_log_dirs(ctx, conn, h, req):
    here = _log_dir(ctx)
    held = {name for name, _ in ctx.logs.logs}
    results: dict[str, list[dict]] = {}
    for d in req.dirs:
        same = os.path.isabs(d.path) and os.path.realpath(d.path) == here
        for t in d.topics:
            for p in t.partitions:
                if not same:
                    error = ErrorCode.log_dir_not_found
                elif t.name not in held:
                    error = ErrorCode.unknown_topic_or_partition
                elif (t.name, p) not in ctx.logs.logs:
                    error = ErrorCode.replica_not_available
                else:
                    error = ErrorCode.none  # already there
                results.setdefault(t.name, []).append({"partition_index": p, "error_code": error})
    return respond(h, {"throttle_time": 0, "results": [{"topic_name": n, "partitions": ps}
                                                        for n, ps in results.items()]})
