"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The state machine lives in core.groups.consumer_group; this module maps topic ids (the wire)
onto topic names (core) and back, and the results onto responses.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.groups.consumer_group import HeartbeatRequest
from gateway.kafka.apis.metadata import UNKNOWN_OPERATIONS
from gateway.kafka.apis.registry import handles
from gateway.kafka.operations import authorized_operations
from wire.kafka import respond


def _owned(ctx, topic_partitions) -> dict[str, set[int]] | None:
    if topic_partitions is None:
        return None
    owned: dict[str, set[int]] = {}
    for tp in topic_partitions:
        name = ctx.topic_name(tp.topic_id)
        if name is not None:  # a topic deleted meanwhile: nothing to own
            owned.setdefault(name, set()).update(int(p) for p in tp.partitions)
    return owned


def by_id(ctx, parts: dict[str, set[int]], with_names: bool = False) -> list[dict]:
    out = []
    for name in sorted(parts):
        entry = {"topic_id": ctx.topic_id(name), "partitions": sorted(parts[name])}
        if with_names:
            entry["topic_name"] = name
        out.append(entry)
    return out


@handles(68)
def consumer_group_heartbeat(ctx, conn, h, req):
    rebalance = req.rebalance_timeout
    hb = HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if rebalance is not None else -1,
        subscribed_topic_names=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None), server_assignor=req.server_assignor,
        owned=_owned(ctx, req.topic_partitions), client_id=h.client_id or "", client_host=conn.peer_host,
        api_version=h.api_version)
    return heartbeat_response(ctx, h, ctx.groups.consumer.heartbeat(hb))


def heartbeat_response(ctx, h, result) -> bytes:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat answer (the same fields in both)."""
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": by_id(ctx, result.assignment)}
    return respond(h, {"throttle_time": 0, "error_code": result.error, "error_message": result.message,
                       "member_id": result.member_id, "member_epoch": result.member_epoch,
                       "heartbeat_interval": result.heartbeat_interval_ms, "assignment": assignment})


@handles(69)
def consumer_group_describe(ctx, conn, h, req):
    out = []
    for group_id in req.group_ids:
        group = ctx.groups.consumer.groups.get(group_id)
        if group is None:
            classic = ctx.groups.group_type(group_id) in ("classic", "streams")
            out.append({"error_code": ErrorCode.group_id_not_found, "group_id": group_id, "group_state": "",
                        "error_message": f"Group {group_id} is not a consumer group." if classic
                        else f"Group {group_id} not found.", "group_epoch": -1, "assignment_epoch": -1,
                        "assignor_name": "", "members": [], "authorized_operations": UNKNOWN_OPERATIONS})
            continue
        members = [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": tuple(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": {"topic_partitions": by_id(ctx, m.assigned, True)},
                    "target_assignment": {"topic_partitions": by_id(ctx, group.target.get(m.member_id, {}), True)},
                    "member_type": 1 if m.classic is None else 0} for m in group.members.values()]
        out.append({"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                    "group_state": group.state, "group_epoch": group.group_epoch,
                    "assignment_epoch": group.assignment_epoch, "assignor_name": group.assignor, "members": members,
                    "authorized_operations": authorized_operations(conn, "group", group_id)
                    if req.include_authorized_operations else UNKNOWN_OPERATIONS})
    return respond(h, {"throttle_time": 0, "groups": out})
