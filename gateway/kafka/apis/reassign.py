"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455).

In cluster mode a reassignment is written to ZooKeeper (``/admin/reassign_partitions``) and
the controller carries it out while clients keep going: the target replicas are added, the
new ones catch up and join the ISR, leadership moves into the target set if it must, and the
replicas not in the target are dropped (they delete their copy). A request with no replicas
cancels: the partition goes back to the replicas it had when the reassignment began.
A single node can only "move" a partition onto itself.

v1 (KIP-860) lets the request forbid a change of replication factor: a target with another
number of replicas than the partition has then fails with INVALID_REPLICATION_FACTOR, as in Kafka.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.cluster.view import Reassignment
from gateway.kafka.apis.registry import handles
from wire.kafka import respond


def _check(ctx, topic: str, index: int, replicas) -> tuple[ErrorCode, str | None]:
    meta = ctx.logs.store.get_topic(topic)
    if meta is None or index >= meta.partitions:
        return ErrorCode.unknown_topic_or_partition, f"{topic}-{index} does not exist"
    if replicas is None:
        return ErrorCode.none, None
    if not replicas or len(set(replicas)) != len(replicas):
        return ErrorCode.invalid_replica_assignment, "the replica list is empty or names a broker twice"
    if ctx.cluster is not None and not ctx.cluster.view.replicas(topic, index):
        # a topic just created: its partition state has not reached this broker's view yet
        return ErrorCode.unknown_topic_or_partition, f"{topic}-{index} is not yet known to this broker: try again"
    live = set(ctx.cluster.view.brokers) if ctx.cluster is not None else {ctx.node_id}
    missing = sorted(set(replicas) - live)
    if missing:
        return ErrorCode.invalid_replica_assignment, f"brokers {missing} are not live"
    return ErrorCode.none, None


@handles(45)
def alter_partition_reassignments(ctx, conn, h, req):
    responses, wanted = [], []
    view = ctx.cluster.view if ctx.cluster is not None else None
    allow_rf_change = getattr(req, "allow_replication_factor_change", True)
    for t in req.topics:
        parts = []
        for p in t.partitions:
            replicas = list(p.replicas) if p.replicas is not None else None
            error, message = _check(ctx, t.name, p.partition_index, replicas)
            if not error and replicas is not None and not allow_rf_change:
                pending = view.reassignments.get((t.name, p.partition_index)) if view is not None else None
                # during a reassignment Kafka compares with where it is heading (its target)
                now = (pending.target if pending else view.replicas(t.name, p.partition_index)) if view \
                    else (ctx.node_id,)
                if len(now) != len(replicas):
                    error = ErrorCode.invalid_replication_factor
                    message = f"The replication factor is changed from {len(now)} to {len(replicas)}"
            if not error and view is not None:
                pending = view.reassignments.get((t.name, p.partition_index))
                if replicas is None:
                    if pending is None:
                        error, message = ErrorCode.no_reassignment_in_progress, "nothing to cancel"
                    else:
                        wanted.append(Reassignment(t.name, p.partition_index, pending.original, pending.original))
                else:
                    original = pending.original if pending else view.replicas(t.name, p.partition_index)
                    wanted.append(Reassignment(t.name, p.partition_index, tuple(replicas), original))
            elif not error and replicas is not None and replicas != [ctx.node_id]:
                error, message = ErrorCode.invalid_replica_assignment, "a single node holds every partition itself"
            elif not error and replicas is None:
                error, message = ErrorCode.no_reassignment_in_progress, "nothing to cancel"
            parts.append({"partition_index": p.partition_index, "error_code": error, "error_message": message})
        responses.append({"name": t.name, "partitions": parts})
    if wanted:
        ctx.cluster.agent.request_reassignment(wanted)
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "responses": responses})


@handles(46)
def list_partition_reassignments(ctx, conn, h, req):
    pending = ctx.cluster.view.reassignments if ctx.cluster is not None else {}
    asked = None if req.topics is None else {(t.name, i) for t in req.topics for i in t.partition_indexes}
    topics: dict[str, list[dict]] = {}
    for (name, index), r in sorted(pending.items()):
        if asked is not None and (name, index) not in asked:
            continue
        current = ctx.cluster.view.replicas(name, index)
        topics.setdefault(name, []).append({
            "partition_index": index, "replicas": list(current),
            "adding_replicas": [b for b in r.target if b not in r.original],
            "removing_replicas": [b for b in r.original if b not in r.target]})
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
