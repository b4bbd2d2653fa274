"""The share-group offset admin APIs (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

A share partition's "offset" is its start offset (SPSO): every record below it is settled. For a
share group named like an AMQP queue that is the queue's ack floor, which only consuming (or
purging the queue) moves: altering or deleting it is refused with INVALID_REQUEST naming the
queue. Alter and delete need a group without members (NON_EMPTY_GROUP), as in Kafka.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.offsets import share_state_key
from gateway.kafka.apis.registry import handles
from gateway.kafka.apis.share_groups import share_partitions
from wire.kafka import respond


def _group_error(ctx, group: str) -> tuple[ErrorCode, str | None]:
    kind = ctx.groups.group_type(group)
    if kind not in (None, "share"):
        return ErrorCode.group_id_not_found, f"Group {group} is not a share group."
    share = ctx.groups.share.groups.get(group)
    if share is not None and share.members:
        return ErrorCode.non_empty_group, f"Share group {group} has members; stop them first."
    return ErrorCode.none, None


def _refused(h, error: ErrorCode, message: str | None) -> bytes:
    """Alter/DeleteShareGroupOffsets answered for the whole group (not a share group, not empty)."""
    return respond(h, {"throttle_time": 0, "error_code": error, "error_message": message, "responses": []})


@handles(90)
def describe_share_group_offsets(ctx, conn, h, req):
    shares = share_partitions(ctx)
    out = []
    for g in req.groups:
        kind = ctx.groups.group_type(g.group_id)
        if kind not in (None, "share"):
            out.append({"group_id": g.group_id, "topics": [], "error_code": ErrorCode.group_id_not_found,
                        "error_message": f"Group {g.group_id} is not a share group."})
            continue
        # cluster mode: the coordinator (here) keeps the start offsets its partitions' leaders wrote
        stored = ctx.groups.offsets.fetch(share_state_key(g.group_id)) if ctx.cluster is not None else {}
        known = {tp: om.offset for tp, om in stored.items()}
        known.update({(t, i): start for t, i, start in shares.describe(g.group_id)})
        wanted = sorted(known) if g.topics is None else [(t.topic_name, i) for t in g.topics for i in t.partitions]
        topics: dict[str, list[dict]] = {}
        for name, index in wanted:
            start = known.get((name, index), -1)
            plog = ctx.partition(name, index)
            lag = -1
            if plog is not None and start >= 0:
                sp = shares.partitions.get((g.group_id, name, index))
                lag = (sp.queue.message_count() + sp.queue.unacked_count() if sp is not None
                       else max(plog.high_watermark - start, 0))
            error = ErrorCode.none if plog is not None else ErrorCode.unknown_topic_or_partition
            topics.setdefault(name, []).append({"partition_index": index, "start_offset": start, "leader_epoch": 0,
                                                "lag": lag, "error_code": error, "error_message": None})
        out.append({"group_id": g.group_id, "error_code": ErrorCode.none, "error_message": None,
                    "topics": [{"topic_name": n, "topic_id": ctx.topic_id(n), "partitions": ps}
                               for n, ps in topics.items()]})
    return respond(h, {"throttle_time": 0, "groups": out})


@handles(91)
def alter_share_group_offsets(ctx, conn, h, req):
    error, message = _group_error(ctx, req.group_id)
    if error:
        return _refused(h, error, message)
    shares = share_partitions(ctx)
    responses = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition_index": p.partition_index, "error_code": ErrorCode.none, "error_message": None}
            plog = ctx.partition(t.topic_name, p.partition_index)
            if plog is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    shares.set_start(req.group_id, t.topic_name, p.partition_index, plog, p.start_offset)
                except ValueError as exc:
                    entry.update(error_code=ErrorCode.invalid_request, error_message=str(exc))
            parts.append(entry)
        responses.append({"topic_name": t.topic_name, "topic_id": ctx.topic_id(t.topic_name), "partitions": parts})
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "responses": responses})


@handles(92)
def delete_share_group_offsets(ctx, conn, h, req):
    error, message = _group_error(ctx, req.group_id)
    if error:
        return _refused(h, error, message)
    shares = share_partitions(ctx)
    responses = []
    for t in req.topics:
        entry = {"topic_name": t.topic_name, "topic_id": ctx.topic_id(t.topic_name), "error_code": ErrorCode.none,
                 "error_message": None}
        topic = ctx.logs.store.get_topic(t.topic_name)
        queue = None if topic is None else next(
            (q for i in range(topic.partitions) if (q := shares.shared_queue(req.group_id, t.topic_name, i))), None)
        if topic is None:
            entry["error_code"] = ErrorCode.unknown_topic_or_partition
        elif queue is not None:
            entry.update(error_code=ErrorCode.invalid_request,
                         error_message=f"share group {req.group_id} reads AMQP queue {queue.name!r}: its position "
                                       f"is the queue's")
        else:
            shares.reset_topic(req.group_id, t.topic_name)
        responses.append(entry)
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "responses": responses})
