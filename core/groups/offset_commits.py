"""The group coordinator's offset requests: OffsetCommit, OffsetFetch, OffsetDelete, and the
member check of TxnOffsetCommit.

Who may commit follows Kafka's rules: a member of the group's current generation (not while it
is CompletingRebalance), a KIP-848 member at its member epoch, or anyone with a generation
below zero while nobody manages the group (a client using the broker as an offset store,
``assign()`` + commit). The offsets themselves are kept by :class:`core.offsets.OffsetStore`.

:class:`OffsetCommits` is mixed into ``GroupCoordinator`` (core.groups.coordinator), whose state
it reads: ``logs``, ``offsets``, ``consumer`` (the KIP-848 groups), ``streams`` (KIP-1071), ``clock``, the classic group
table ``_groups``, and its ``_ensure_loaded`` and ``_validate_member``.
Thread-safety: none; the owner's thread (the reactor) only.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from core.errors import LogError, RecordTooLargeError
from core.groups.group import Group, GroupState
from core.groups.results import CommitInfo, OffsetDeleteInfo
from core.groups.subscriptions import offset_delete_errors
from core.offsets import MAX_METADATA_BYTES, OffsetAndMetadata, is_share_state

log = logging.getLogger(__name__)

EMPTY, COMPLETING, DEAD = GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.DEAD


class OffsetCommits:
    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       offsets: dict[tuple[str, int], tuple[int, int, str | None]]) -> CommitInfo:
        self._ensure_loaded()
        error = self._member_check(group_id, generation_id, member_id or "", group_instance_id)
        if error is not None:
            return CommitInfo({tp: error for tp in offsets}, None)
        errors: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        now_ms = int(self.clock() * 1000)
        for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
            meta = metadata or ""
            topic_md = self.logs.store.get_topic(topic)
            if topic_md is None or not 0 <= partition < topic_md.partitions:
                errors[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            elif len(meta.encode()) > MAX_METADATA_BYTES:
                errors[(topic, partition)] = ErrorCode.offset_metadata_too_large
            else:
                accepted[(topic, partition)] = OffsetAndMetadata(offset, leader_epoch, meta, now_ms)
                errors[(topic, partition)] = ErrorCode.none
        if not accepted:
            return CommitInfo(errors, None)
        if (group_id not in self._groups and group_id not in self.consumer.groups
                and group_id not in self.streams.groups and not is_share_state(group_id)):
            self._groups[group_id] = Group(group_id)  # a group used only to store offsets
        try:
            durable_at = self.offsets.commit(group_id, accepted)
        except (LogError, OSError, ValueError) as exc:
            code = (ErrorCode.invalid_commit_offset_size if isinstance(exc, RecordTooLargeError)
                    else ErrorCode.coordinator_not_available)
            log.warning("offset commit of group %s failed: %s", group_id, exc)
            return CommitInfo({tp: (code if tp in accepted else e) for tp, e in errors.items()}, None)
        return CommitInfo(errors, durable_at)

    def check_txn_member(self, group_id: str, generation_id: int, member_id: str,
                         instance_id: str | None) -> ErrorCode | None:
        """TxnOffsetCommit's member check (KIP-447): a KIP-848 member's generation field carries
        its member epoch; a classic member's, its generation. A request without member
        metadata (epoch -1, no member id, no instance id: the pre-KIP-447 shape) is not fenced.
        TxnOffsetCommit has no STALE_MEMBER_EPOCH: a wrong member epoch is ILLEGAL_GENERATION
        there, as Kafka's group coordinator answers it."""
        self._ensure_loaded()
        if generation_id < 0 and not member_id and instance_id is None:
            return None
        error = self._member_check(group_id, generation_id, member_id, instance_id)
        return ErrorCode.illegal_generation if error == ErrorCode.stale_member_epoch else error

    def _member_check(self, group_id: str, generation_id: int, member_id: str,
                      instance_id: str | None) -> ErrorCode | None:
        """A KIP-848 consumer or KIP-1071 streams member commits at its member epoch; a classic
        member, at its generation."""
        if group_id in self.consumer.groups:
            return self.consumer.commit_error(group_id, member_id, generation_id)
        if group_id in self.streams.groups:
            return self.streams.commit_error(group_id, member_id, generation_id)
        return self._commit_check(group_id, generation_id, member_id, instance_id)

    def _commit_check(self, group_id: str, generation_id: int, member_id: str,
                      instance_id: str | None) -> ErrorCode | None:
        group = self._groups.get(group_id)
        if group is None:
            # Nobody manages this group: a generation below zero is a client using us as an
            # offset store (assign() + commit); anything else comes from a generation long gone.
            return None if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(EMPTY):
            return None
        error = self._validate_member(group, member_id, instance_id, generation_id)
        if error is not None:
            return error
        if group.is_(COMPLETING):
            return ErrorCode.rebalance_in_progress
        group.members[member_id].last_heartbeat = self.clock()
        return None

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], tuple[int, int, str | None]]:
        """Committed offsets; partitions asked for but never committed come back as (-1, -1, "")."""
        self._ensure_loaded()
        committed = self.offsets.fetch(group_id, partitions)
        if partitions is None:
            return {tp: om.as_tuple() for tp, om in committed.items()}
        return {tp: committed[tp].as_tuple() if tp in committed else (-1, -1, "") for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> OffsetDeleteInfo:
        """OffsetDelete: the offsets :func:`offset_delete_errors` allows are tombstoned."""
        self._ensure_loaded()
        error, errors = offset_delete_errors(group_id, self._groups.get(group_id), partitions)
        try:
            durable_at = self.offsets.delete_topic_partitions(group_id, [tp for tp, e in errors.items() if not e])
        except (LogError, OSError):
            log.exception("could not write the offset tombstones of group %s", group_id)
            return OffsetDeleteInfo(ErrorCode.coordinator_not_available, {}, None)
        return OffsetDeleteInfo(error, errors, durable_at)
