"""KIP-1071 streams groups: StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89).

The state machine lives in core.groups.streams_group; this module turns the wire's topology
(copartition groups as indexes into the subtopology's topic lists) and task lists into core's
plain values and the results back into responses.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.groups.streams_group import StreamsHeartbeat
from core.groups.streams_topology import Subtopology, TopicInfo, Topology
from gateway.kafka.apis.metadata import UNKNOWN_OPERATIONS
from gateway.kafka.apis.registry import handles
from gateway.kafka.operations import authorized_operations
from wire.kafka import respond

# what Kafka answers for these group settings it has and this broker does not use
ACCEPTABLE_RECOVERY_LAG = 10_000  # no warm-up tasks are made here
TASK_OFFSET_INTERVAL_MS = 60_000


def _info(t) -> TopicInfo:
    return TopicInfo(t.name, int(t.partitions), int(t.replication_factor), {kv.key: kv.value for kv in t.topic_configs})


def _subtopology(s) -> Subtopology:
    sources, regexes = list(s.source_topics), list(s.source_topic_regex)
    repartition = [_info(t) for t in s.repartition_source_topics]
    groups = []
    for g in s.copartition_groups:
        names = [sources[i] for i in g.source_topics if 0 <= i < len(sources)]
        names += [repartition[i].name for i in g.repartition_source_topics if 0 <= i < len(repartition)]
        groups.append(names)  # regex members of a copartition group are left to the client's checks
    return Subtopology(s.subtopology_id, sources, regexes, list(s.repartition_sink_topics), repartition,
                       [_info(t) for t in s.state_changelog_topics], groups)


def _tasks(task_ids) -> dict[str, set[int]] | None:
    if task_ids is None:
        return None
    out: dict[str, set[int]] = {}
    for t in task_ids:
        out.setdefault(t.subtopology_id, set()).update(int(p) for p in t.partitions)
    return out


def _task_ids(tasks) -> list[dict]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items()) if ps]


@handles(88)
def streams_group_heartbeat(ctx, conn, h, req):
    rebalance = req.rebalance_timeout
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else -1
    topology = None
    if req.topology is not None:
        topology = Topology(int(req.topology.epoch), [_subtopology(s) for s in req.topology.subtopologies])
    endpoint = (req.user_endpoint.host, int(req.user_endpoint.port)) if req.user_endpoint is not None else None
    hb = StreamsHeartbeat(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=rebalance_ms,
        topology=topology, active=_tasks(req.active_tasks), standby=_tasks(req.standby_tasks),
        warmup=_tasks(req.warmup_tasks), process_id=req.process_id, endpoint=endpoint,
        client_tags=None if req.client_tags is None else {kv.key: kv.value for kv in req.client_tags},
        shutdown_application=req.shutdown_application, endpoint_epoch=req.endpoint_information_epoch,
        client_id=h.client_id or "", client_host=conn.peer_host)
    r = ctx.groups.streams.heartbeat(hb)
    group = ctx.groups.streams.groups.get(req.group_id)
    endpoints = None
    if r.endpoints is not None and group is not None:
        endpoints = [{"user_endpoint": {"host": host, "port": port}, "active_partitions": _partitions(group, active),
                      "standby_partitions": _partitions(group, standby)}
                     for (host, port), active, standby in r.endpoints]
    sent = r.active is not None
    return respond(h, {
        "throttle_time": 0, "error_code": r.error, "error_message": r.message, "member_id": r.member_id,
        "member_epoch": r.member_epoch, "heartbeat_interval": r.heartbeat_interval_ms,
        "acceptable_recovery_lag": ACCEPTABLE_RECOVERY_LAG, "task_offset_interval": TASK_OFFSET_INTERVAL_MS,
        "status": None if r.error else [{"status_code": c, "status_detail": d} for c, d in r.status or ()],
        "active_tasks": _task_ids(r.active) if sent else None,
        "standby_tasks": _task_ids(r.standby) if sent else None, "warmup_tasks": [] if sent else None,
        "endpoint_information_epoch": r.endpoint_epoch, "partitions_by_user_endpoint": endpoints})


def _partitions(group, tasks) -> list[dict]:
    """The source (and repartition source) topic partitions of ``tasks``, for interactive queries."""
    sources = group.configured.sources if group.configured is not None else {}
    by_topic: dict[str, set[int]] = {}
    for sub, parts in tasks.items():
        for topic in sources.get(sub, ()):
            by_topic.setdefault(topic, set()).update(parts)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]


def _topic_info(t: TopicInfo, partitions: int) -> dict:
    return {"name": t.name, "partitions": partitions, "replication_factor": t.replication_factor,
            "topic_configs": [{"key": k, "value": v} for k, v in sorted(t.configs.items())]}


def _described_topology(group) -> dict | None:
    if group.topology is None:
        return None
    configured = group.configured
    subtopologies = None
    if configured is not None and configured.ready:
        counts = group.partitions
        subtopologies = [{"subtopology_id": s.subtopology_id,
                          "source_topics": [t for t in configured.sources.get(s.subtopology_id, ())
                                            if t not in {r.name for r in s.repartition_sources}],
                          "repartition_sink_topics": list(s.repartition_sinks),
                          "state_changelog_topics": [_topic_info(c, 0) for c in s.changelogs],
                          "repartition_source_topics": [_topic_info(r, counts.get(r.name, r.partitions))
                                                        for r in s.repartition_sources]}
                         for s in group.topology.subtopologies]
    return {"epoch": group.topology.epoch, "subtopologies": subtopologies}


def _assignment(active, standby) -> dict:
    return {"active_tasks": _task_ids(active), "standby_tasks": _task_ids(standby), "warmup_tasks": []}


@handles(89)
def streams_group_describe(ctx, conn, h, req):
    out = []
    for group_id in req.group_ids:
        group = ctx.groups.streams.groups.get(group_id)
        if group is None:
            other = ctx.groups.group_type(group_id) is not None
            out.append({"error_code": ErrorCode.group_id_not_found, "group_id": group_id, "group_state": "",
                        "error_message": f"Group {group_id} is not a streams group." if other
                        else f"Group {group_id} not found.", "group_epoch": -1, "assignment_epoch": -1,
                        "topology": None, "members": [], "authorized_operations": UNKNOWN_OPERATIONS})
            continue
        members = []
        for m in group.members.values():
            active, standby = group.target.get(m.member_id, ({}, {}))
            members.append({
                "member_id": m.member_id, "member_epoch": m.member_epoch, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
                "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                "user_endpoint": {"host": m.endpoint[0], "port": m.endpoint[1]} if m.endpoint else None,
                "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags.items())],
                "task_offsets": [], "task_end_offsets": [], "assignment": _assignment(m.active, m.standby),
                "target_assignment": _assignment(active, standby), "is_classic": False})
        out.append({"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                    "group_state": group.state, "group_epoch": group.group_epoch,
                    "assignment_epoch": group.assignment_epoch, "topology": _described_topology(group),
                    "members": members,
                    "authorized_operations": authorized_operations(conn, "group", group_id)
                    if req.include_authorized_operations else UNKNOWN_OPERATIONS})
    return respond(h, {"throttle_time": 0, "groups": out})
