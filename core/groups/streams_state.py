"""Streams groups kept in ``__consumer_offsets``, as KIP-848 groups are (core.groups.consumer_state).

One compact JSON snapshot per group under core.offsets' group-state key: the topology, the
epochs, members with their processes, endpoints and current tasks, and the target assignment;
``"type": "streams"`` tells it from a consumer group's snapshot in the same table. A new one is
appended when anything but heartbeat times changed, a tombstone when the group goes, so a
coordinator that moves or restarts goes on with the members' ids, epochs and tasks. The
configured topology (which topics exist, which internal topics are missing) is not kept: it is
recomputed from the topics at the next heartbeat.
"""
from __future__ import annotations

import json
import logging

from core.errors import LogError
from core.groups.streams_group import MemberState, StreamsGroup, StreamsMember
from core.groups.streams_topology import Topology

log = logging.getLogger(__name__)


def _tasks(tasks) -> dict[str, list[int]]:
    return {s: sorted(ps) for s, ps in sorted(tasks.items())}


def _sets(tasks: dict) -> dict[str, set[int]]:
    return {s: set(ps) for s, ps in tasks.items()}


def is_streams_state(text: str | None) -> bool:
    """Whether a stored group state is a streams group's (not a consumer group's)."""
    if not text:
        return False
    try:
        return json.loads(text).get("type") == "streams"
    except (ValueError, AttributeError):
        return False


def snapshot(group: StreamsGroup) -> str:
    members = {}
    for m in group.members.values():
        members[m.member_id] = {
            "process": m.process_id, "instance": m.instance_id, "rack": m.rack_id, "client": m.client_id,
            "host": m.client_host, "endpoint": list(m.endpoint) if m.endpoint else None, "tags": m.client_tags,
            "topology_epoch": m.topology_epoch, "epoch": m.member_epoch, "previous": m.previous_member_epoch,
            "state": m.state.value, "rebalance_ms": m.rebalance_timeout_ms, "active": _tasks(m.active),
            "standby": _tasks(m.standby), "revoking": _tasks(m.revoking)}
    return json.dumps({"type": "streams", "epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                       "topology": group.topology.to_json() if group.topology else None,
                       "partitions": group.partitions, "static": group.static_members, "shutdown": group.shutdown,
                       "members": members,
                       "target": {mid: [_tasks(a), _tasks(s)] for mid, (a, s) in group.target.items()}},
                      separators=(",", ":"), sort_keys=True)


def restore(group_id: str, text: str, now: float) -> StreamsGroup:
    """The group a snapshot describes; every member's session and revocation time start at ``now``."""
    doc = json.loads(text)
    group = StreamsGroup(group_id, group_epoch=doc["epoch"], assignment_epoch=doc["assignment_epoch"],
                         topology=Topology.from_json(doc["topology"]) if doc["topology"] else None,
                         partitions=dict(doc["partitions"]), static_members=dict(doc["static"]),
                         shutdown=doc["shutdown"],
                         target={mid: (_sets(a), _sets(s)) for mid, (a, s) in doc["target"].items()})
    for member_id, m in doc["members"].items():
        member = StreamsMember(member_id, process_id=m["process"], instance_id=m["instance"], rack_id=m["rack"],
                               client_id=m["client"], client_host=m["host"],
                               endpoint=tuple(m["endpoint"]) if m["endpoint"] else None, client_tags=dict(m["tags"]),
                               topology_epoch=m["topology_epoch"], member_epoch=m["epoch"],
                               previous_member_epoch=m["previous"], state=MemberState(m["state"]),
                               rebalance_timeout_ms=m["rebalance_ms"], active=_sets(m["active"]),
                               standby=_sets(m["standby"]), revoking=_sets(m["revoking"]), last_heartbeat=now)
        if member.revoking:
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
        group.members[member_id] = member
    return group


def keep(group: StreamsGroup | None, group_id: str, offsets) -> None:
    """Append the group's snapshot to ``offsets`` (core.offsets.OffsetStore) if it changed; a
    tombstone if the group is gone (and was kept as a streams group)."""
    state = None if group is None else snapshot(group)
    stored = offsets.group_states.get(group_id)
    if state is None and not is_streams_state(stored):
        return  # never a streams group here: a consumer group's state is not ours to delete
    if stored == state:
        return
    try:
        offsets.write_group_state(group_id, state)
    except LogError as exc:
        log.warning("state of streams group %s not written: %s", group_id, exc)


def restore_groups(groups: dict, classic: dict, offsets, partition: int | None, now: float) -> None:
    """Rebuild the streams groups of an offsets partition (every partition: None) from the
    snapshots ``offsets`` replayed."""
    for group_id in [g for g in groups if partition is None or offsets.partition_for(g) == partition]:
        del groups[group_id]
    for group_id, state in offsets.group_states.items():
        if partition is not None and offsets.partition_for(group_id) != partition:
            continue
        if not is_streams_state(state):
            continue
        live = classic.get(group_id)
        if live is not None and live.members:
            continue
        try:
            groups[group_id] = restore(group_id, state, now)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("streams group %s not restored: its stored state is unreadable (%s)", group_id, exc)
            continue
        classic.pop(group_id, None)
