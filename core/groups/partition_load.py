"""Loading and unloading the group coordinator's state, per ``__consumer_offsets`` partition.

:class:`PartitionLoading` is mixed into ``GroupCoordinator`` (core.groups.coordinator), whose
state it fills and empties: the classic group table ``_groups``, ``consumer``, ``streams``,
``share`` and ``offsets``. On one broker everything is loaded once at start-up. In cluster mode
a broker coordinates the groups of the offsets partitions it leads, as in Kafka: when it becomes
a partition's leader the partition is replayed (its offsets, and its groups as they were written
last), and when another broker leads it, or this one only follows it, its groups leave memory
(Kafka's resignation), so no broker lists, ticks or times out a group it does not coordinate.
Thread-safety: none; the owner's thread (the reactor) only.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from core.groups.consumer_state import restore_groups as restore_consumer_groups
from core.groups.group import Group
from core.groups.results import JoinResult, SyncResult
from core.groups.streams_state import restore_groups as restore_streams_groups
from core.offsets import is_share_state

log = logging.getLogger(__name__)


class PartitionLoading:
    def load(self) -> None:
        """Create ``__consumer_offsets`` if missing and replay it; classic groups with offsets come
        back Empty, KIP-848 groups with their members (core.groups.consumer_state)."""
        replayed = self.offsets.load()
        self._classic_from_offsets(None)
        restore_consumer_groups(self.consumer.groups, self._groups, self.offsets, None, self.clock())
        restore_streams_groups(self.streams.groups, self._groups, self.offsets, None, self.clock())
        self._loaded = True
        log.info("loaded %d offset record(s) of %d group(s)", replayed, len(self.offsets.groups()))

    def reload(self, partition: int) -> int:
        """Cluster mode: this broker leads an offsets partition now; its offsets and groups come
        back from its replica: classic groups with offsets as Empty groups, KIP-848 and streams
        groups with their members, ids and epochs."""
        replayed = self.offsets.reload(partition)
        self._classic_from_offsets(partition)
        restore_consumer_groups(self.consumer.groups, self._groups, self.offsets, partition, self.clock())
        restore_streams_groups(self.streams.groups, self._groups, self.offsets, partition, self.clock())
        return replayed

    def unload(self, partition: int) -> int:
        """Cluster mode: this broker does not lead an offsets partition (any more); its groups
        leave memory. Joins and syncs parked in them are answered NOT_COORDINATOR, which sends
        their members to the partition's leader. Returns how many groups left."""
        if not self._loaded:
            return 0
        here = [g for g in self._groups if self.offsets.partition_for(g) == partition]
        for group_id in here:
            for member in self._groups.pop(group_id).members.values():
                self._answer_join(member, JoinResult.failed(ErrorCode.not_coordinator, member.member_id))
                self._answer_sync(member, SyncResult.failed(ErrorCode.not_coordinator))
        unloaded = len(here)
        for table in (self.consumer.groups, self.streams.groups, self.share.groups):
            for group_id in [g for g in table if self.offsets.partition_for(g) == partition]:
                del table[group_id]
                unloaded += 1
        self._flush()
        if unloaded:
            log.info("__consumer_offsets-%d is led elsewhere: %d group(s) unloaded", partition, unloaded)
        return unloaded

    def _classic_from_offsets(self, partition: int | None) -> None:
        """An Empty classic group for each group with committed offsets (every partition: None)."""
        for group_id in self.offsets.groups():
            if is_share_state(group_id):  # share groups' start offsets are not a group
                continue
            if partition is None or self.offsets.partition_for(group_id) == partition:
                self._groups.setdefault(group_id, Group(group_id))
