"""What KIP-848 consumer groups and KIP-1071 streams groups share: member epochs.

Both protocols (core.groups.consumer_group, core.groups.streams_group) fence a member by its
epoch, let a member leave with -1 or step out for now with -2 (a static member that comes back
under a new member id), and check offset commits and fetches against the member epoch. Their
assignments differ (partitions or tasks), so only the rules live here; each keeps its own
state machine.
"""
from __future__ import annotations

from typing import Mapping

from kio.schema.errors import ErrorCode

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2

Sets = dict[str, set[int]]  # topic (or subtopology) -> partitions


class Fail(Exception):
    """A heartbeat refused: the error code and Kafka's message for it."""

    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error, self.message = error, message


def flat(sets: Mapping[str, set[int]] | None) -> set[tuple[str, int]]:
    return {(k, p) for k, ps in (sets or {}).items() for p in ps}


def nest(pairs: set[tuple[str, int]]) -> Sets:
    out: Sets = {}
    for k, p in pairs:
        out.setdefault(k, set()).add(p)
    return out


def copy_sets(sets: Mapping[str, set[int]]) -> Sets:
    return {k: set(ps) for k, ps in sets.items() if ps}


def check_epoch(kind: str, member, epoch: int, owned: Mapping[str, set[int]] | None,
                given: Mapping[str, set[int]]) -> None:
    """A heartbeat's member epoch against the one the coordinator knows. The answer that moved
    the epoch may have been lost: the previous epoch is accepted while what the member owns is
    part of what it was given."""
    if epoch > member.member_epoch:
        raise Fail(ErrorCode.fenced_member_epoch, f"The {kind} group member has a greater member epoch ({epoch}) "
                                                  f"than the one known by the group coordinator ({member.member_epoch}).")
    if epoch < member.member_epoch and (epoch != member.previous_member_epoch or owned is None
                                        or not flat(owned) <= flat(given)):
        raise Fail(ErrorCode.fenced_member_epoch, f"The {kind} group member has a smaller member epoch ({epoch}) "
                                                  f"than the one known by the group coordinator ({member.member_epoch}).")


def leaving(group, member_id: str, epoch: int, instance_id: str | None, now: float):
    """The member a leave heartbeat (epoch -1 or -2) names; with -2 it stays, marked as gone for
    now (it keeps its place for its instance id until its session times out). Returns it and
    whether it must be removed."""
    member = group.members.get(member_id)
    if member is None:
        raise Fail(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
    if epoch != STATIC_LEAVE_EPOCH:
        return member, True
    if member.instance_id != instance_id:
        raise Fail(ErrorCode.fenced_instance_id, f"Member {member_id} is not instance {instance_id}.")
    if member.member_epoch != STATIC_LEAVE_EPOCH:
        member.previous_member_epoch = member.member_epoch
    member.member_epoch = STATIC_LEAVE_EPOCH
    member.last_heartbeat = now
    return member, False


def forget(group, member) -> None:
    """Drop a member from its group's tables (members, target assignment, static ids)."""
    group.members.pop(member.member_id, None)
    group.target.pop(member.member_id, None)
    if member.instance_id and group.static_members.get(member.instance_id) == member.member_id:
        del group.static_members[member.instance_id]


def delete_empty(table: dict, group_id: str) -> ErrorCode | None:
    """DeleteGroups in a table of KIP-848, streams or share groups: NON_EMPTY_GROUP while the group
    has members, NONE once removed; None when the table has no such group."""
    group = table.get(group_id)
    if group is None:
        return None
    if group.members:
        return ErrorCode.non_empty_group
    del table[group_id]
    return ErrorCode.none


class EpochGroups:
    """The offset rules of groups whose members carry epochs (Kafka's validateOffsetCommit and
    validateOffsetFetch); ``groups`` maps group ids to groups with ``members``."""

    groups: dict
    on_changed = staticmethod(lambda group_id: None)

    def commit_error(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None:
        """None: the commit may go ahead (a member at its epoch, or anyone while the group is empty:
        an admin or a consumer outside group management)."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return None
        return self._member_error(group, member_id, member_epoch)

    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Epoch -1 is the admin client, which may always fetch."""
        group = self.groups.get(group_id)
        if group is None or member_epoch == -1:
            return None
        return self._member_error(group, member_id or "", member_epoch)

    @staticmethod
    def _member_error(group, member_id: str, member_epoch: int) -> ErrorCode | None:
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def delete(self, group_id: str) -> ErrorCode | None:
        error = delete_empty(self.groups, group_id)
        self.on_changed(group_id)
        return error
