"""The group coordinator's admin requests: ListGroups, DescribeGroups, DeleteGroups, over every
group type (classic, KIP-848 consumer, KIP-932 share, KIP-1071 streams).

:class:`GroupAdmin` is mixed into ``GroupCoordinator`` (core.groups.coordinator), whose state it
reads: the classic group table ``_groups``, ``consumer``, ``share``, ``streams``, ``offsets``,
``share_deleted`` and ``_ensure_loaded``.
Thread-safety: none; the owner's thread (the reactor) only.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from core.errors import LogError
from core.groups.group import Group, GroupState
from core.groups.results import GroupDescription, GroupListing, MemberDescription

log = logging.getLogger(__name__)

EMPTY, STABLE, DEAD = GroupState.EMPTY, GroupState.STABLE, GroupState.DEAD


class GroupAdmin:
    def list_groups(self, states: list[str] | None = None) -> list[GroupListing]:
        self._ensure_loaded()
        wanted = {s.lower() for s in states} if states else None
        return [GroupListing(g.group_id, g.protocol_type or "", g.state.value)
                for g in self._groups.values()
                if not g.is_(DEAD) and (wanted is None or g.state.value.lower() in wanted)] + [
            GroupListing(g.group_id, "consumer", g.state, "consumer") for g in self.consumer.groups.values()
            if wanted is None or g.state.lower() in wanted] + [
            GroupListing(g.group_id, "share", g.state, "share") for g in self.share.groups.values()
            if wanted is None or g.state.lower() in wanted] + [
            GroupListing(g.group_id, "streams", g.state, "streams") for g in self.streams.groups.values()
            if wanted is None or g.state.lower() in wanted]

    def group_type(self, group_id: str) -> str | None:
        if group_id in self.share.groups:
            return "share"
        if group_id in self.streams.groups:
            return "streams"
        return "consumer" if group_id in self.consumer.groups else "classic" if group_id in self._groups else None

    def describe_group(self, group_id: str) -> GroupDescription:
        self._ensure_loaded()
        if group_id in self.consumer.groups:
            return self.consumer.describe_classic(group_id)
        if group_id in self.share.groups:
            return self.share.describe_classic(group_id)
        if group_id in self.streams.groups:  # as Kafka: not described through this API, as if Dead
            return GroupDescription(ErrorCode.none, DEAD.value, "", "", [], group_id)
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(ErrorCode.none, DEAD.value, "", "", [], group_id)
        if group.is_(STABLE):
            members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                         m.metadata(group.protocol_name), m.assignment)
                       for m in group.members.values()]
            protocol = group.protocol_name or ""
        else:
            members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                       for m in group.members.values()]
            protocol = ""
        return GroupDescription(ErrorCode.none, group.state.value, group.protocol_type or "", protocol,
                                members, group_id)

    def delete_groups(self, group_ids) -> dict[str, ErrorCode]:
        self._ensure_loaded()
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            share_error = self.share.delete(group_id)
            if share_error is not None:
                results[group_id] = share_error
                if share_error == ErrorCode.none:
                    self.share_deleted(group_id)
                continue
            consumer_error = self.consumer.delete(group_id)  # an empty consumer group: its offsets go below
            if consumer_error is None:
                consumer_error = self.streams.delete(group_id)  # so does an empty streams group
            if consumer_error == ErrorCode.none and group_id not in self._groups:
                self._groups[group_id] = Group(group_id)
            group = self._groups.get(group_id)
            if consumer_error == ErrorCode.non_empty_group:
                results[group_id] = consumer_error
            elif group is None or group.is_(DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_(EMPTY):
                results[group_id] = ErrorCode.non_empty_group
            else:
                try:
                    self.offsets.delete_group(group_id)
                except (LogError, OSError):
                    log.exception("could not write the tombstones of group %s", group_id)
                    results[group_id] = ErrorCode.coordinator_not_available
                    continue
                group.state = DEAD
                del self._groups[group_id]
                results[group_id] = ErrorCode.none
        return results
