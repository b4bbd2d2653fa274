"""KIP-848 groups kept in ``__consumer_offsets``, so a coordinator move or restart keeps them.

Kafka's coordinator writes a consumer group's metadata, members, target assignment and each
member's current assignment as records of the group's ``__consumer_offsets`` partition and
rebuilds the group from them when it loads the partition: members go on heartbeating with their
member ids and epochs, and nobody rejoins from scratch. Here one record per group holds the same
state (a compact JSON snapshot under core.offsets' group-state key, outside the key versions
Kafka's record types use); a new one is appended when anything but heartbeat times changed, a tombstone
when the group goes. Replay keeps the newest per group (core.offsets.OffsetStore.group_states).

A restored member's session starts afresh when the group is loaded. Classic members hosted by a
consumer group (core.groups.migration) are not kept: such a group is not written, and after a
move its classic members join again as they would with a classic group.
"""
from __future__ import annotations

import json
import logging

from core.errors import LogError
from core.groups.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from core.groups.streams_state import is_streams_state

log = logging.getLogger(__name__)


def _parts(parts) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in sorted(parts.items())}


def _sets(parts: dict) -> dict[str, set[int]]:
    return {t: set(ps) for t, ps in parts.items()}


def snapshot(group: ConsumerGroup) -> str | None:
    """The group's state as JSON; None when it cannot be kept (it hosts classic members)."""
    if any(m.classic is not None for m in group.members.values()):
        return None
    members = {}
    for m in group.members.values():
        members[m.member_id] = {
            "instance": m.instance_id, "rack": m.rack_id, "client": m.client_id, "host": m.client_host,
            "epoch": m.member_epoch, "previous": m.previous_member_epoch, "state": m.state.value,
            "topics": m.subscribed_topic_names, "regex": m.subscribed_topic_regex, "assignor": m.server_assignor,
            "rebalance_ms": m.rebalance_timeout_ms, "assigned": _parts(m.assigned),
            "revoking": _parts(m.pending_revocation)}
    return json.dumps({"epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                       "assignor": group.assignor, "topics": group.topics, "topic_ids": group.topic_ids,
                       "static": group.static_members, "members": members,
                       "target": {mid: _parts(parts) for mid, parts in group.target.items()}},
                      separators=(",", ":"), sort_keys=True)


def restore(group_id: str, text: str, now: float) -> ConsumerGroup:
    """The group a snapshot describes; every member's session and revocation time start at ``now``."""
    doc = json.loads(text)
    group = ConsumerGroup(group_id, group_epoch=doc["epoch"], assignment_epoch=doc["assignment_epoch"],
                          static_members=dict(doc["static"]), topics=dict(doc["topics"]),
                          topic_ids=dict(doc["topic_ids"]), assignor=doc["assignor"],
                          target={mid: _sets(parts) for mid, parts in doc["target"].items()})
    for member_id, m in doc["members"].items():
        member = ConsumerMember(member_id, instance_id=m["instance"], rack_id=m["rack"], client_id=m["client"],
                                client_host=m["host"], member_epoch=m["epoch"], previous_member_epoch=m["previous"],
                                state=MemberState(m["state"]), subscribed_topic_names=list(m["topics"]),
                                subscribed_topic_regex=m["regex"], server_assignor=m["assignor"],
                                rebalance_timeout_ms=m["rebalance_ms"], assigned=_sets(m["assigned"]),
                                pending_revocation=_sets(m["revoking"]), last_heartbeat=now)
        if member.pending_revocation:
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
        group.members[member_id] = member
    return group


def keep(group: ConsumerGroup | None, group_id: str, offsets) -> None:
    """Append the group's snapshot to ``offsets`` (core.offsets.OffsetStore) if it changed; a
    tombstone if the group is gone."""
    state = None if group is None else snapshot(group)
    if group is not None and state is None:
        return  # it hosts classic members: not kept
    if group is None and is_streams_state(offsets.group_states.get(group_id)):
        return  # a streams group's state (core.groups.streams_state) is not ours to delete
    if offsets.group_states.get(group_id) == state:
        return
    try:
        offsets.write_group_state(group_id, state)
    except LogError as exc:
        log.warning("state of consumer group %s not written: %s", group_id, exc)


def restore_groups(groups: dict, classic: dict, offsets, partition: int | None, now: float) -> None:
    """Rebuild the KIP-848 groups of an offsets partition (every partition: None) from the
    snapshots ``offsets`` replayed; ``classic`` is the classic coordinator's group table."""
    for group_id in [g for g in groups if partition is None or offsets.partition_for(g) == partition]:
        del groups[group_id]  # what this broker held from an earlier term: the log is newer
    restored = 0
    for group_id, state in offsets.group_states.items():
        if partition is not None and offsets.partition_for(group_id) != partition:
            continue
        if is_streams_state(state):
            continue  # core.groups.streams_state restores those
        live = classic.get(group_id)
        if live is not None and live.members:
            continue  # a live classic group has the id now
        try:
            groups[group_id] = restore(group_id, state, now)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("consumer group %s not restored: its stored state is unreadable (%s)", group_id, exc)
            continue
        classic.pop(group_id, None)  # not the empty classic group its committed offsets made
        restored += 1
    if restored:
        log.info("restored %d consumer group(s) with their members", restored)
