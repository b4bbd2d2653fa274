"""The share-group offset admin APIs (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

A share partition's "offset" is its start offset (SPSO): every record below it is settled.
Described, it is the one Kafka's share coordinator would hold: each state write carries the start
offset as it stood before that write moved it, so it trails by one write (-1, lag -1, before the
first); the lag is the log's end minus that start minus the records settled above it, which is
the records not settled yet. For a share group named like an AMQP queue the start offset is the
queue's ack floor, which only consuming (or purging the queue) moves: altering or deleting it is
refused with INVALID_REQUEST naming the queue. Alter and delete need a group without members
(NON_EMPTY_GROUP), as in Kafka.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode
from twisted.internet import defer

from core.offsets import OFFSETS_TOPIC, share_state_key
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
        # one broker: as Kafka's share coordinator holds them (see above). Cluster mode: the
        # coordinator (here) keeps the start offsets its partitions' leaders wrote; those are what
        # a new leader starts from, so they win over a live share partition's ack floor here
        single = ctx.cluster is None
        known = {(t, i): start for t, i, start in shares.describe(g.group_id, as_written=single)}
        if ctx.cluster is not None:
            known.update({tp: om.offset for tp, om in ctx.groups.offsets.fetch(share_state_key(g.group_id)).items()})
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
    if ctx.cluster is None:
        return respond(h, {"throttle_time": 0, "groups": out})
    return _once_replicated(ctx, h, out)


def _once_replicated(ctx, h, out: list[dict]) -> bytes | defer.Deferred:
    """Cluster mode: answer once the start offsets read above are on every in-sync replica of the
    share groups' ``__consumer_offsets`` partitions, so what is reported outlives the coordinator
    (as Kafka's share coordinator reports only persisted state); those groups get
    REQUEST_TIMED_OUT if they are not (a group already refused keeps its own error)."""
    waiting = [g for g in out if g["error_code"] == ErrorCode.none]
    if not waiting:
        return respond(h, {"throttle_time": 0, "groups": out})
    marks = []
    for group in {g["group_id"] for g in waiting}:
        plog = ctx.partition(OFFSETS_TOPIC, ctx.groups.offsets.partition_for(share_state_key(group)))
        if plog is not None:
            marks.append((plog, plog.next_offset))

    def replicated() -> bool:
        return all(plog.high_watermark >= end for plog, end in marks)

    def settled(in_time: bool) -> bytes:
        if not replicated():
            for g in waiting:
                g.update(topics=[], error_code=ErrorCode.request_timed_out,
                         error_message="the share group's start offsets are not yet on its in-sync replicas")
        return respond(h, {"throttle_time": 0, "groups": out})

    ctx.request_flush()
    return ctx.waiters.wait(replicated, 30.0).addCallback(settled)


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
