"""Kafka's classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and offsets
(the offset requests in ``core.groups.offset_commits``, offset retention in ``core.groups.retention``).

How a rebalance runs, as in Kafka's GroupCoordinator:

1. A join moves the group to PreparingRebalance. Each member's JoinGroup is parked (its
   ``respond`` callback kept) until the phase ends: when every known member has rejoined, or
   when the group's rebalance timeout (the largest of its members') expires, after which the
   members that did not rejoin are removed. A group that was Empty instead waits
   ``initial_rebalance_delay_ms``, extended by that much again while new members keep arriving
   in generation 0, never beyond the rebalance timeout, so a fleet starting together lands in
   one generation (Kafka's InitialDelayedJoin; with a delay of 0, at once, as any join phase).
2. The generation goes up by one, a protocol is voted, and all parked joins are answered at
   once; the leader's answer carries every member's metadata. The group is CompletingRebalance.
3. The leader's SyncGroup carries the assignments; it answers every parked SyncGroup and the
   group is Stable. Members that do not sync within the rebalance timeout are removed.
4. Heartbeats keep members alive; during PreparingRebalance they answer REBALANCE_IN_PROGRESS,
   which is how members learn to rejoin. A member silent for its session timeout, or leaving,
   is removed and the others rebalance.

Static members (``group_instance_id``) keep their place across restarts: a rejoin with a new
member id replaces the old id (which is fenced: FENCED_INSTANCE_ID), and in a Stable group
whose selected protocol stays the same it just gets the current generation back, with no
rebalance (the leader gets ``skip_assignment``, KIP-814).

Outcomes are ErrorCode values, never exceptions. Callbacks run after the coordinator's state is
settled (queued and flushed at the end of each call), so a callback may call back in.
Nothing here is persisted but offsets: after a restart groups come back Empty, with offsets.

Thread-safety: none; the owner's thread (the reactor) only. ``tick()`` drives every timer.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Callable

from kio.schema.errors import ErrorCode

from core.groups.consumer_state import keep as keep_consumer_group
from core.groups.consumer_group import ConsumerGroups
from core.groups.group_admin import GroupAdmin
from core.groups.partition_load import PartitionLoading
from core.groups.streams_group import StreamsGroups
from core.groups.streams_state import keep as keep_streams_group
from core.groups.migration import Migration
from core.groups.share_group import ShareGroups
from core.groups.group import Group, GroupState, Member
from core.groups.offset_commits import OffsetCommits
from core.groups.results import JoinResult, SyncResult
from core.groups.retention import DEFAULT_CHECK_INTERVAL_MS, DEFAULT_RETENTION_MS, OffsetRetention
from core.log_manager import LogManager
from core.offsets import OffsetStore, is_share_state

log = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE, GroupState.DEAD,
)

JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


class GroupCoordinator(OffsetCommits, GroupAdmin, PartitionLoading):
    def __init__(self, logs: LogManager, clock: Callable[[], float] = time.time, *,
                 initial_rebalance_delay_ms: int = 3000, min_session_timeout_ms: int = 6000,
                 max_session_timeout_ms: int = 1_800_000, offsets_partitions: int = 1,
                 consumer_session_timeout_ms: int = 45_000, consumer_heartbeat_interval_ms: int = 5_000,
                 streams_session_timeout_ms: int = 45_000, streams_heartbeat_interval_ms: int = 5_000,
                 streams_num_standby_replicas: int = 0,
                 offsets_retention_ms: int = DEFAULT_RETENTION_MS,
                 offsets_retention_check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS):
        self.logs = logs
        self.clock = clock
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.offsets = OffsetStore(logs, clock, partitions=offsets_partitions)
        self._groups: dict[str, Group] = {}
        self._loaded = False
        self._outbox: list[tuple[Callable, object]] = []
        self._flushing = False
        self.consumer = ConsumerGroups(  # KIP-848 groups; a group id is classic or consumer, not both
            lambda: {n: t.partitions for n, t in logs.store.topics().items()}, self._groups, clock,
            session_timeout_ms=consumer_session_timeout_ms, heartbeat_interval_ms=consumer_heartbeat_interval_ms)
        self.share = ShareGroups(  # KIP-932 share groups: their ids are taken, too
            lambda: {n: t.partitions for n, t in logs.store.topics().items()},
            lambda g: "consumer" if g in self.consumer.groups else "streams" if g in self.streams.groups
            else "classic" if g in self._groups else None, clock)
        self.streams = StreamsGroups(  # KIP-1071 streams groups (Kafka Streams, group.protocol=streams)
            lambda: {n: t.partitions for n, t in logs.store.topics().items()}, self._groups, clock,
            session_timeout_ms=streams_session_timeout_ms, heartbeat_interval_ms=streams_heartbeat_interval_ms,
            num_standby=streams_num_standby_replicas)
        self.streams.taken = lambda g: ("consumer" if g in self.consumer.groups else
                                        "share" if g in self.share.groups else None)
        self.streams.create_topic = lambda name, partitions, rf, configs: logs.create_topic(
            name, partitions, configs, replication_factor=rf)
        self.streams.on_changed = self._streams_group_changed
        self.streams.leads = lambda g: self.retention.leads(self.offsets.partition_for(g))
        self.consumer.is_share_group = lambda g: g in self.share.groups or g in self.streams.groups
        # a topic deleted and recreated under its name has a new id: both group types reassign it
        self.consumer.topic_ids = self.share.topic_ids = lambda: {n: t.topic_id for n, t in logs.store.topics().items()}
        self.consumer.migration = self.migration = Migration(self.consumer, self._groups, clock, self._prepare_rebalance)
        self.share_deleted: Callable[[str], None] = lambda group_id: None  # its share partitions go too
        self.consumer.on_changed = self._consumer_group_changed
        # offsets of share groups are start offsets; a streams group's are kept while the group is
        self.retention = OffsetRetention(self.offsets, self._groups, self.consumer,
                                         lambda g: (g in self.share.groups or is_share_state(g)
                                                    or g in self.streams.groups),
                                         clock, retention_ms=offsets_retention_ms,
                                         check_interval_ms=offsets_retention_check_interval_ms)

    # --- life cycle -------------------------------------------------------------------
    def _consumer_group_changed(self, group_id: str) -> None:
        """Keep a KIP-848 group's newest state in __consumer_offsets (only where it is coordinated)."""
        if self.retention.leads(self.offsets.partition_for(group_id)):
            keep_consumer_group(self.consumer.groups.get(group_id), group_id, self.offsets)

    def _streams_group_changed(self, group_id: str) -> None:
        if self.retention.leads(self.offsets.partition_for(group_id)):
            keep_streams_group(self.streams.groups.get(group_id), group_id, self.offsets)

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    def group_partition(self, group_id: str) -> int:
        self._ensure_loaded()
        return self.offsets.partition_for(group_id)

    # --- callbacks --------------------------------------------------------------------
    def _send(self, callback: Callable | None, result) -> None:
        if callback is not None:
            self._outbox.append((callback, result))

    def _flush(self) -> None:
        if self._flushing:
            return  # a callback called back in: the outer loop delivers what this call queued
        self._flushing = True
        try:
            while self._outbox:
                callback, result = self._outbox.pop(0)
                try:
                    callback(result)
                except Exception:  # one broken connection must not stall the group
                    log.exception("group coordinator callback failed")
        finally:
            self._flushing = False

    def _answer_join(self, member: Member, result: JoinResult) -> None:
        callback, member.join_callback = member.join_callback, None
        self._send(callback, result)

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        callback, member.sync_callback = member.sync_callback, None
        self._send(callback, result)

    # --- JoinGroup --------------------------------------------------------------------
    def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
             protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
             rebalance_timeout_ms: int, require_known_member_id: bool, respond: JoinCallback) -> None:
        self._ensure_loaded()
        try:
            self._join(group_id, member_id or "", group_instance_id, client_id, client_host, protocol_type,
                       list(protocols), session_timeout_ms, rebalance_timeout_ms, require_known_member_id, respond)
        finally:
            self._flush()

    def _join(self, group_id, member_id, instance_id, client_id, client_host, protocol_type, protocols,
              session_ms, rebalance_ms, require_known, respond) -> None:
        if not group_id:
            return self._send(respond, JoinResult.failed(ErrorCode.invalid_group_id, member_id))
        if not self.min_session_timeout_ms <= session_ms <= self.max_session_timeout_ms:
            return self._send(respond, JoinResult.failed(ErrorCode.invalid_session_timeout, member_id))
        hosted = self.consumer.groups.get(group_id)
        if hosted is not None and hosted.members:  # a classic member of a consumer group (KIP-848 migration)
            return self._send(respond, self.migration.join(hosted, member_id, instance_id, client_id, client_host,
                                                           protocol_type, protocols, session_ms, rebalance_ms,
                                                           require_known))
        if (group_id in self.share.groups or group_id in self.streams.groups
                or not self.consumer.take_over_for_classic(group_id)):
            return self._send(respond, JoinResult.failed(ErrorCode.inconsistent_group_protocol, member_id))
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return self._send(respond, JoinResult.failed(ErrorCode.unknown_member_id, member_id))
            group = self._groups[group_id] = Group(group_id)
        if group.is_(DEAD):
            return self._send(respond, JoinResult.failed(ErrorCode.coordinator_not_available, member_id))
        known = member_id if member_id in group.members else None
        if not group.supports(protocol_type, protocols, known):
            return self._send(respond, JoinResult.failed(ErrorCode.inconsistent_group_protocol, member_id))
        now = self.clock()
        new_member = Member(member_id, instance_id, client_id, client_host, protocol_type, protocols,
                            session_ms, rebalance_ms, now)
        if not member_id:
            self._join_new_member(group, new_member, require_known, respond)
        elif member_id in group.pending_members:
            new_member.join_callback = respond
            self._add_member_and_rebalance(group, new_member)
        else:
            self._join_current_member(group, new_member, respond)
        self._maybe_complete_join(group)

    def _join_new_member(self, group: Group, member: Member, require_known: bool, respond: JoinCallback) -> None:
        instance_id = member.group_instance_id
        member.member_id = f"{instance_id if instance_id is not None else member.client_id}-{uuid.uuid4()}"
        member.join_callback = respond
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return self._update_static_member_and_rebalance(group, old_id, member)
            return self._add_member_and_rebalance(group, member)
        if require_known:
            # JoinGroup v4+: hand out the id and make the client come back with it (KIP-394).
            member.join_callback = None
            group.pending_members[member.member_id] = self.clock() + member.session_timeout_ms / 1000
            return self._send(respond, JoinResult.failed(ErrorCode.member_id_required, member.member_id))
        self._add_member_and_rebalance(group, member)

    def _join_current_member(self, group: Group, joining: Member, respond: JoinCallback) -> None:
        error = self._validate_member(group, joining.member_id, joining.group_instance_id, None)
        if error is not None:
            return self._send(respond, JoinResult.failed(error, joining.member_id))
        if group.is_(EMPTY):
            return self._send(respond, JoinResult.failed(ErrorCode.unknown_member_id, joining.member_id))
        member = group.members[joining.member_id]
        member.last_heartbeat = self.clock()
        if group.is_(PREPARING):
            return self._update_member_and_rebalance(group, member, joining, respond)
        if group.is_(COMPLETING):
            if member.matches(joining.protocols):
                # The join answer was probably lost: answer it again, the same way.
                return self._send(respond, self._join_result(group, member, group.leader_id == member.member_id))
            return self._update_member_and_rebalance(group, member, joining, respond)
        # Stable: the leader's join forces a rebalance (it may have seen topic changes);
        # a follower with unchanged metadata just gets the current generation back.
        if group.leader_id == member.member_id or not member.matches(joining.protocols):
            return self._update_member_and_rebalance(group, member, joining, respond)
        self._send(respond, self._join_result(group, member, False))

    def _update_member(self, member: Member, joining: Member, respond: JoinCallback) -> None:
        if member.join_callback is not None:  # a duplicate join: the older request is answered now
            self._answer_join(member, JoinResult.failed(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = joining.protocols
        member.protocol_type = joining.protocol_type
        member.session_timeout_ms = joining.session_timeout_ms
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.join_callback = respond

    def _update_member_and_rebalance(self, group: Group, member: Member, joining: Member, respond) -> None:
        self._update_member(member, joining, respond)
        self._maybe_prepare_rebalance(group)

    def _add_member_and_rebalance(self, group: Group, member: Member) -> None:
        group.add(member)
        if group.is_(PREPARING) and group.generation_id == 0:
            group.new_member_added = True
        self._maybe_prepare_rebalance(group)

    def _update_static_member_and_rebalance(self, group: Group, old_id: str, joining: Member) -> None:
        instance_id = joining.group_instance_id
        new_id = joining.member_id
        old = group.members[old_id]
        # The old id is fenced: whatever it still waits for is answered with FENCED_INSTANCE_ID.
        self._answer_join(old, JoinResult.failed(ErrorCode.fenced_instance_id, old_id))
        self._answer_sync(old, SyncResult.failed(ErrorCode.fenced_instance_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.last_heartbeat = self.clock()
        self._update_member(member, joining, joining.join_callback)
        if group.is_(STABLE):
            if group.select_protocol() == group.protocol_name:
                # Same protocol: no rebalance, the member gets the current generation back.
                is_leader = group.leader_id == new_id
                self._answer_join(member, self._join_result(group, member, is_leader, skip_assignment=is_leader))
                return
            self._maybe_prepare_rebalance(group)
        elif group.is_(COMPLETING):
            self._maybe_prepare_rebalance(group)
        # PreparingRebalance: the member waits for the rebalance to finish like everyone else.

    def _join_result(self, group: Group, member: Member, with_members: bool, *, skip_assignment: bool = False) -> JoinResult:
        members = []
        if with_members:
            members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                       for m in group.members.values()]
        return JoinResult(ErrorCode.none, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member.member_id, members, skip_assignment)

    # --- rebalance phases ---------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.is_(STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_(COMPLETING):
            # Members waiting for the assignment must rejoin instead.
            for member in group.members.values():
                member.assignment = b""
                self._answer_sync(member, SyncResult.failed(ErrorCode.rebalance_in_progress))
        group.pending_sync.clear()
        group.sync_deadline = None
        now = self.clock()
        timeout_ms = group.rebalance_timeout_ms()
        if group.is_(EMPTY) and self.initial_rebalance_delay_ms > 0:  # 0: ends once everyone has joined
            delay_ms = self.initial_rebalance_delay_ms
            group.initial_delay = True
            group.initial_remaining_ms = max(timeout_ms - delay_ms, 0)
            group.new_member_added = False
            group.join_deadline = now + delay_ms / 1000
        else:
            group.initial_delay = False
            group.join_deadline = now + timeout_ms / 1000
        group.state = PREPARING
        log.debug("group %s is rebalancing (generation %d)", group.group_id, group.generation_id)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.is_(PREPARING) and not group.initial_delay and group.all_members_joined():
            self._complete_join(group)

    def _join_deadline_passed(self, group: Group, now: float) -> None:
        if group.initial_delay and group.new_member_added and group.initial_remaining_ms > 0:
            delay_ms = min(self.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - self.initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            group.join_deadline = now + delay_ms / 1000
            return
        group.initial_delay = False
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        now = self.clock()
        for member in list(group.members.values()):
            if member.join_callback is None and member.group_instance_id is None:
                log.info("group %s: member %s did not rejoin in time and is removed", group.group_id, member.member_id)
                self._answer_sync(member, SyncResult.failed(ErrorCode.unknown_member_id))
                group.remove(member.member_id)
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined: wait another rebalance timeout for them.
            group.join_deadline = now + group.rebalance_timeout_ms() / 1000
            return
        group.init_next_generation()
        if group.is_(EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            return
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms() / 1000
        for member in group.members.values():
            if member.join_callback is not None:
                member.last_heartbeat = now
                self._answer_join(member, self._join_result(group, member, member.member_id == group.leader_id))
        log.info("group %s: generation %d with %d member(s), protocol %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)

    # --- SyncGroup --------------------------------------------------------------------
    def sync(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             respond: SyncCallback) -> None:
        self._ensure_loaded()
        try:
            self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                       assignments, respond)
        finally:
            self._flush()

    def _sync(self, group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
              assignments, respond) -> None:
        if not group_id:
            return self._send(respond, SyncResult.failed(ErrorCode.invalid_group_id))
        if group_id in self.consumer.groups:
            return self._send(respond, self.migration.sync(self.consumer.groups[group_id], generation_id, member_id,
                                                           instance_id, protocol_type, protocol_name))
        group = self._groups.get(group_id)
        if group is None:
            return self._send(respond, SyncResult.failed(ErrorCode.unknown_member_id))
        if group.is_(DEAD):
            return self._send(respond, SyncResult.failed(ErrorCode.coordinator_not_available))
        error = self._validate_member(group, member_id, instance_id, generation_id)
        if error is None and ((protocol_type is not None and protocol_type != group.protocol_type)
                              or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error is None and group.is_(EMPTY):
            error = ErrorCode.unknown_member_id
        if error is None and group.is_(PREPARING):
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            return self._send(respond, SyncResult.failed(error))
        member = group.members[member_id]
        member.last_heartbeat = self.clock()
        group.pending_sync.discard(member_id)
        if group.is_(STABLE):
            self._send(respond, SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
        else:  # CompletingRebalance
            if member.sync_callback is not None:
                self._answer_sync(member, SyncResult.failed(ErrorCode.rebalance_in_progress))
            member.sync_callback = respond
            if member_id == group.leader_id:
                self._set_and_propagate_assignment(group, assignments)
        if not group.pending_sync:
            group.sync_deadline = None

    def _set_and_propagate_assignment(self, group: Group, assignments: dict[str, bytes]) -> None:
        now = self.clock()
        for member in group.members.values():
            member.assignment = bytes(assignments.get(member.member_id, b""))
        group.state = STABLE
        for member in group.members.values():
            if member.sync_callback is not None:
                member.last_heartbeat = now
                self._answer_sync(member, SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                                                     member.assignment))
        log.info("group %s is stable at generation %d", group.group_id, group.generation_id)

    # --- Heartbeat / LeaveGroup ---------------------------------------------------------
    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        self._ensure_loaded()
        if not group_id:
            return ErrorCode.invalid_group_id
        if group_id in self.consumer.groups:
            return self.migration.heartbeat(self.consumer.groups[group_id], generation_id, member_id,
                                            group_instance_id)
        group = self._groups.get(group_id)
        if group is None or group.is_(EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_member(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return error
        group.members[member_id].last_heartbeat = self.clock()
        if group.is_(PREPARING):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str | None, str | None]]
              ) -> tuple[ErrorCode, list[tuple[str | None, str | None, ErrorCode]]]:
        self._ensure_loaded()
        try:
            return self._leave(group_id, members)
        finally:
            self._flush()

    def _leave(self, group_id, members):
        if not group_id:
            return ErrorCode.invalid_group_id, []
        if group_id in self.consumer.groups:
            return self.migration.leave(self.consumer.groups[group_id], members)
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [(m, i, ErrorCode.unknown_member_id) for m, i in members]
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available, []
        results = []
        for member_id, instance_id in members:
            if not member_id:
                current = group.static_member_id(instance_id)
                if current is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                member_id_to_remove = current
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                self._maybe_complete_join(group)
                results.append((member_id, instance_id, ErrorCode.none))
                continue
            else:
                error = self._validate_member(group, member_id, instance_id, None)
                if error is not None:
                    results.append((member_id, instance_id, error))
                    continue
                member_id_to_remove = member_id
            log.info("group %s: member %s leaves", group.group_id, member_id_to_remove)
            self._remove_member_and_update(group, group.members[member_id_to_remove])
            results.append((member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    def _validate_member(self, group: Group, member_id: str, instance_id: str | None,
                         generation_id: int | None) -> ErrorCode | None:
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id is not None and generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    def _remove_member_and_update(self, group: Group, member: Member) -> None:
        self._answer_join(member, JoinResult.failed(ErrorCode.unknown_member_id, member.member_id))
        self._answer_sync(member, SyncResult.failed(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        if group.is_(STABLE, COMPLETING):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    # --- timers -----------------------------------------------------------------------
    def watching(self) -> bool:
        """Whether a group has members or deadlines that :meth:`tick` must watch closely (the
        broker ticks slowly while none has: only offset retention is left, on its own interval)."""
        for group in self._groups.values():
            if group.members or group.pending_members or group.join_deadline is not None \
                    or group.sync_deadline is not None:
                return True
        return any(g.members for kind in (self.consumer, self.streams, self.share) for g in kind.groups.values())

    def tick(self) -> None:
        """Expire sessions, pending member ids and late syncs; end join phases whose time is up;
        expire committed offsets when the retention check is due."""
        self._ensure_loaded()
        try:
            now = self.clock()
            for group in list(self._groups.values()):
                self._tick_group(group, now)
            self.consumer.tick()
            self.streams.tick()
            self.share.tick()
            self.retention.tick(now)
        finally:
            self._flush()

    def _tick_group(self, group: Group, now: float) -> None:
        for member_id, expires in list(group.pending_members.items()):
            if now >= expires:
                del group.pending_members[member_id]
                self._maybe_complete_join(group)
        for member in list(group.members.values()):
            if member.member_id in group.members and member.session_expired(now):
                log.info("group %s: member %s's session timed out", group.group_id, member.member_id)
                self._remove_member_and_update(group, member)
        if group.is_(PREPARING) and group.join_deadline is not None and now >= group.join_deadline:
            self._join_deadline_passed(group, now)
        if (group.is_(COMPLETING, STABLE) and group.sync_deadline is not None and now >= group.sync_deadline):
            late = [group.members[m] for m in group.pending_sync if m in group.members]
            group.sync_deadline = None
            group.pending_sync.clear()
            if late:
                for member in late:
                    log.info("group %s: member %s did not sync in time and is removed", group.group_id, member.member_id)
                    self._answer_join(member, JoinResult.failed(ErrorCode.unknown_member_id, member.member_id))
                    group.remove(member.member_id)
                self._prepare_rebalance(group)
                self._maybe_complete_join(group)
