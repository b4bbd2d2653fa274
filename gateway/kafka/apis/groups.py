"""Consumer groups: coordinator lookup, the join/sync/heartbeat/leave protocol, offsets.

The coordinator itself lives in core.groups; this module only maps requests onto it and
its results back onto responses. Join and sync answer later (when the rebalance
completes), so they return Deferreds fired by the coordinator's callbacks.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from twisted.internet import defer

from gateway.cluster import coordination
from gateway.kafka.apis.registry import handles
from gateway.kafka.operations import authorized_operations
from gateway.kafka.apis.metadata import UNKNOWN_OPERATIONS
from gateway.logs import fields
from wire.kafka import respond

log = logging.getLogger(__name__)

GROUP_KEY, TRANSACTION_KEY = 0, 1


def _coordinator(ctx, key: str, key_type: int) -> dict:
    host, port = ctx.advertised()
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return {"key": key, "error_code": ErrorCode.invalid_request,
                "error_message": f"unknown coordinator key type {key_type}", "node_id": -1, "host": "", "port": -1}
    if ctx.cluster is not None:
        node = coordination.coordinator(ctx, key, key_type)
        info = ctx.cluster.view.brokers.get(node) if node is not None else None
        if info is None:
            return {"key": key, "error_code": ErrorCode.coordinator_not_available,
                    "error_message": "the coordinator's partition has no leader yet", "node_id": -1, "host": "",
                    "port": -1}
        return {"key": key, "error_code": ErrorCode.none, "error_message": None, "node_id": node,
                "host": info.host, "port": info.port}
    return {"key": key, "error_code": ErrorCode.none, "error_message": None, "node_id": ctx.node_id,
            "host": host, "port": port}


@handles(10)
def find_coordinator(ctx, conn, h, req):
    key_type = getattr(req, "key_type", GROUP_KEY)
    if h.api_version >= 4:
        return respond(h, {"throttle_time": 0, "coordinators": [_coordinator(ctx, k, key_type)
                                                                for k in req.coordinator_keys]})
    return respond(h, {"throttle_time": 0, **_coordinator(ctx, req.key, key_type)})


@handles(11)
def join_group(ctx, conn, h, req):
    d = defer.Deferred()
    if getattr(req, "reason", None):  # v8+ (KIP-800): why the client (re)joins, for the operator
        log.info("JoinGroup", extra=fields(group=req.group_id, member=req.member_id, reason=req.reason))
    session_ms = int(req.session_timeout.total_seconds() * 1000)
    rebalance = getattr(req, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None and h.api_version >= 1 else session_ms

    def done(result) -> None:
        members = [{"member_id": m, "group_instance_id": gi, "metadata": md} for m, gi, md in result.members]
        leader = result.leader
        if result.skip_assignment and h.api_version < 9:
            # A static leader rejoining a stable group keeps the current assignment. Versions
            # without skip_assignment learn that by being told they are a follower.
            leader, members = "", []
        d.callback(respond(h, {"throttle_time": 0, "error_code": result.error, "generation_id": result.generation_id,
                               "protocol_type": result.protocol_type, "protocol_name": result.protocol_name or "",
                               "leader": leader, "skip_assignment": result.skip_assignment,
                               "member_id": result.member_id, "members": members}))

    ctx.groups.join(req.group_id, req.member_id, getattr(req, "group_instance_id", None), h.client_id or "",
                    conn.peer_host, req.protocol_type, [(p.name, bytes(p.metadata)) for p in req.protocols],
                    session_ms, rebalance_ms, h.api_version >= 4, done)
    return d


@handles(14)
def sync_group(ctx, conn, h, req):
    d = defer.Deferred()

    def done(result) -> None:
        d.callback(respond(h, {"throttle_time": 0, "error_code": result.error, "protocol_type": result.protocol_type,
                               "protocol_name": result.protocol_name, "assignment": result.assignment}))

    ctx.groups.sync(req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None),
                    getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
                    {a.member_id: bytes(a.assignment) for a in req.assignments}, done)
    return d


@handles(12)
def heartbeat(ctx, conn, h, req):
    error = ctx.groups.heartbeat(req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None))
    return respond(h, {"throttle_time": 0, "error_code": error})


@handles(13)
def leave_group(ctx, conn, h, req):
    if h.api_version < 3:
        members = [(req.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
        for m in req.members:
            if getattr(m, "reason", None):  # v5+ (KIP-800)
                log.info("LeaveGroup", extra=fields(group=req.group_id, member=m.member_id, reason=m.reason))
    error, results = ctx.groups.leave(req.group_id, members)
    if h.api_version < 3 and error == ErrorCode.none and results:
        error = results[0][2]
    return respond(h, {"throttle_time": 0, "error_code": error, "members": [
        {"member_id": m or "", "group_instance_id": gi, "error_code": e} for m, gi, e in results]})


@handles(16)
def list_groups(ctx, conn, h, req):
    states = list(getattr(req, "states_filter", ()) or ()) or None
    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
               "group_type": g.group_type} for g in ctx.groups.list_groups(states)
              if not types or g.group_type in types]
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups})


def _v6_not_found(ctx, group_id: str, state: str) -> str | None:
    """DescribeGroups v6 (KIP-1043) answers GROUP_ID_NOT_FOUND, with Kafka's reason, where older
    versions describe a Dead group: for a group that does not exist, and for a group of another
    type (consumer, share or streams), which Kafka 4.1 does not describe through this API at v6."""
    kind = ctx.groups.group_type(group_id)
    if kind in ("consumer", "share", "streams"):
        return f"Group {group_id} is not a classic group."
    if state == "Dead":
        return f"Group {group_id} not found."
    return None


@handles(15)
def describe_groups(ctx, conn, h, req):
    out = []
    for group_id in req.groups:
        g = ctx.groups.describe_group(group_id)
        members = [{"member_id": m, "group_instance_id": gi, "client_id": cid, "client_host": host,
                    "member_metadata": md, "member_assignment": asg} for m, gi, cid, host, md, asg in g.members]
        missing = _v6_not_found(ctx, group_id, g.state) if h.api_version >= 6 and g.error == ErrorCode.none else None
        if missing is not None:
            out.append({"error_code": ErrorCode.group_id_not_found, "error_message": missing, "group_id": group_id,
                        "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                        "authorized_operations": UNKNOWN_OPERATIONS})
            continue
        out.append({"error_code": g.error, "error_message": None, "group_id": group_id, "group_state": g.state,
                    "protocol_type": g.protocol_type or "", "protocol_data": g.protocol or "", "members": members,
                    "authorized_operations": authorized_operations(conn, "group", group_id)
                    if getattr(req, "include_authorized_operations", False) else UNKNOWN_OPERATIONS})
    return respond(h, {"throttle_time": 0, "groups": out})


@handles(42)
def delete_groups(ctx, conn, h, req):
    results = ctx.groups.delete_groups(list(req.groups_names))
    return respond(h, {"throttle_time": 0, "results": [{"group_id": g, "error_code": e} for g, e in results.items()]})


@handles(8)
def offset_commit(ctx, conn, h, req):
    offsets = {}
    for t in req.topics:
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = (p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                    p.committed_metadata)
    info = ctx.groups.commit_offsets(req.group_id, getattr(req, "generation_id_or_member_epoch", -1), req.member_id,
                                     getattr(req, "group_instance_id", None), offsets)

    def answer(failure: ErrorCode | None = None) -> bytes:
        topics = {}
        for t in req.topics:
            topics[t.name] = [{"partition_index": p.partition_index,
                               "error_code": failure or info.errors[(t.name, p.partition_index)]}
                              for p in t.partitions]
        return respond(h, {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})

    if info.durable_at is None:
        return answer()
    topic, partition, last = info.durable_at
    plog = ctx.partition(topic, partition)
    epoch = ctx.cluster.leader_epoch(topic, partition) if ctx.cluster is not None else -1

    def deposed() -> bool:  # cluster mode: leadership of the offsets partition moved, the write may be lost
        return ctx.cluster is not None and ctx.cluster.leader_epoch(topic, partition) != epoch

    def settled(in_time: bool) -> bytes:
        if deposed():
            return answer(ErrorCode.not_coordinator)
        return answer(None if plog.high_watermark > last else ErrorCode.request_timed_out)

    ctx.request_flush()
    return ctx.waiters.wait(lambda: deposed() or plog.high_watermark > last, 30.0).addCallback(settled)


def _fetched(ctx, group_id: str, topics, require_stable: bool = False) -> list[dict]:
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    committed = ctx.groups.fetch_offsets(group_id, wanted)
    # KIP-447: a read_committed consumer must not start from offsets an open transaction may still replace.
    unstable = require_stable and ctx.groups.offsets.has_pending(group_id, wanted)
    keys = wanted if wanted is not None else sorted(committed)
    by_topic: dict[str, list] = {}
    for topic, partition in keys:
        offset, epoch, metadata = committed.get((topic, partition), (-1, -1, ""))
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": epoch, "metadata": metadata,
                                               "error_code": ErrorCode.unstable_offset_commit if unstable
                                               else ErrorCode.none})
    return [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


def _fetched_group(ctx, g, require_stable: bool) -> dict:
    # v9: a KIP-848 (or KIP-1071 streams) member fetches with its member id and epoch, checked as Kafka does
    member, epoch = getattr(g, "member_id", None), getattr(g, "member_epoch", -1)
    error = (ctx.groups.streams.fetch_error(g.group_id, member, epoch) if g.group_id in ctx.groups.streams.groups
             else ctx.groups.consumer.fetch_error(g.group_id, member, epoch))
    if error:
        return {"group_id": g.group_id, "topics": [], "error_code": error}
    return {"group_id": g.group_id, "topics": _fetched(ctx, g.group_id, g.topics, require_stable),
            "error_code": ErrorCode.none}


@handles(9)
def offset_fetch(ctx, conn, h, req):
    if h.api_version >= 8:
        groups = [_fetched_group(ctx, g, req.require_stable) for g in req.groups]
        return respond(h, {"throttle_time": 0, "groups": groups})
    topics = req.topics if h.api_version >= 2 else (req.topics or ())
    stable = getattr(req, "require_stable", False)
    return respond(h, {"throttle_time": 0, "topics": _fetched(ctx, req.group_id, topics, stable),
                       "error_code": ErrorCode.none})


@handles(47)
def offset_delete(ctx, conn, h, req):
    known, unknown = [], set()  # as Kafka, a partition that does not exist is refused before the group is asked
    for t in req.topics:
        meta = ctx.logs.store.get_topic(t.name)
        for p in t.partitions:
            exists = meta is not None and 0 <= p.partition_index < meta.partitions
            (known.append if exists else unknown.add)((t.name, p.partition_index))
    info = ctx.groups.delete_offsets(req.group_id, known)

    def answer(failure: ErrorCode | None = None) -> bytes:
        if info.error or failure:
            return respond(h, {"error_code": failure or info.error, "throttle_time": 0, "topics": []})
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": ErrorCode.unknown_topic_or_partition if (t.name, p.partition_index) in unknown
             else info.errors[(t.name, p.partition_index)]} for p in t.partitions]} for t in req.topics]
        return respond(h, {"error_code": ErrorCode.none, "throttle_time": 0, "topics": topics})

    if info.durable_at is None:
        return answer()
    topic, partition, last = info.durable_at
    plog = ctx.partition(topic, partition)
    ctx.request_flush()
    return ctx.waiters.wait(lambda: plog.high_watermark > last, 30.0).addCallback(
        lambda _: answer(None if plog.high_watermark > last else ErrorCode.request_timed_out))
