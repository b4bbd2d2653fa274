"""Offset retention: Kafka's ``offsets.retention.minutes`` (KIP-211) and its periodic check.

Every ``check_interval_ms`` (Kafka's ``offsets.retention.check.interval.ms``) the committed
offsets that have expired are deleted by appending tombstones to ``__consumer_offsets``, as
OffsetDelete and DeleteGroups do, so they stay deleted after a restart; then a group that is
Empty and has no offsets left is removed (Dead), as Kafka's cleanupGroupMetadata does. When an
offset expires depends on its group (Kafka's ``offsetExpirationCondition``):

* a group with members (classic, consumer protocol, or classic members hosted by a consumer
  group) keeps every offset, however old;
* a group that had members and is Empty now: ``retention_ms`` after it became Empty, all its
  offsets at once;
* offsets without group membership (a standalone ``assign()`` + commit, a transactional commit
  for a group nobody joined) and every group after a restart, since membership is not
  persisted: ``retention_ms`` after each offset's own commit (Kafka's rule for a group without a
  protocol type, or without a state timestamp);
* a RabbitMQ stream client's stored offset (metadata :data:`KEEP`) never: RabbitMQ keeps it as
  long as the stream, and so do we; share groups' start offsets (``__share-state:``) neither.

Kafka 4 counts an Empty KIP-848 group's offsets from their commit time, which is never later
than the time the group emptied; counting from the latter keeps them at least as long.
Offsets an open transaction is about to commit are kept, and so is their group. "Became Empty"
is the first :meth:`OffsetRetention.tick` that finds the group without members (the
coordinator ticks every 100 ms). In cluster mode only groups whose ``__consumer_offsets``
partition this broker leads are looked at (``leads``).

Thread-safety: none; the coordinator's thread only.
"""
from __future__ import annotations

import logging
from typing import Callable

from core.errors import LogError
from core.groups.consumer_group import ConsumerGroups
from core.groups.group import Group, GroupState
from core.offsets import OffsetAndMetadata, OffsetStore

log = logging.getLogger(__name__)

# The metadata of offsets that never expire: a RabbitMQ stream consumer's stored offset lives as
# long as its stream does, as in RabbitMQ (gateway/stream/handlers.py writes it).
KEEP = "rabbitmq-stream-offset"

DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes = 10080
DEFAULT_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms

TopicPartition = tuple[str, int]


class OffsetRetention:
    def __init__(self, offsets: OffsetStore, classic: dict[str, Group], consumer: ConsumerGroups,
                 is_share_group: Callable[[str], bool], clock: Callable[[], float], *,
                 retention_ms: int = DEFAULT_RETENTION_MS, check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS):
        self.offsets = offsets
        self.classic = classic  # the classic coordinator's group table (group id -> Group)
        self.consumer = consumer
        self.is_share_group = is_share_group
        self.retention_ms = retention_ms
        self.check_interval_ms = check_interval_ms
        self.leads: Callable[[int], bool] = lambda partition: True  # cluster mode: leads that offsets partition
        self._empty_since: dict[str, float] = {}  # group id -> clock time it was first seen without members
        self._next_check = clock() + check_interval_ms / 1000

    def tick(self, now: float) -> None:
        """Note which groups are Empty since when; run the check when it is due."""
        before = self._empty_since
        empty = {g: before.get(g, now) for g, group in self.classic.items() if group.is_(GroupState.EMPTY)}
        empty.update((g, before.get(g, now)) for g, group in self.consumer.groups.items() if not group.members)
        self._empty_since = empty
        if now >= self._next_check:
            self._next_check = now + self.check_interval_ms / 1000
            self.expire(now)

    def expire(self, now: float) -> dict[str, list[TopicPartition]]:
        """Tombstone the offsets expired at ``now``, remove Empty groups left without offsets;
        return the expired partitions by group."""
        now_ms = now * 1000
        out: dict[str, list[TopicPartition]] = {}
        for group_id in set(self.offsets.groups()) | set(self.classic) | set(self.consumer.groups):
            if self.is_share_group(group_id) or not self.leads(self.offsets.partition_for(group_id)):
                continue
            base = self._base_ms(group_id, now)
            if base is None:
                continue  # it has members: nothing expires
            expired = [tp for tp, om in self.offsets.fetch(group_id).items()
                       if om.metadata != KEEP and now_ms - base(om) >= self.retention_ms
                       and not self.offsets.has_pending(group_id, [tp])]
            if expired:
                try:
                    self.offsets.delete_topic_partitions(group_id, expired)
                except (LogError, OSError):
                    log.exception("could not write the tombstones of group %s's expired offsets", group_id)
                    continue
                log.info("group %s: %d committed offset(s) expired (offsets.retention.minutes %g): %s", group_id,
                         len(expired), self.retention_ms / 60_000, sorted(expired))
                out[group_id] = expired
            if not self.offsets.has_offsets(group_id) and not self.offsets.has_pending(group_id):
                self._remove_if_empty(group_id)
        return out

    def _base_ms(self, group_id: str, now: float) -> Callable[[OffsetAndMetadata], float] | None:
        """What an offset's age counts from; None while the group has members."""
        consumer = self.consumer.groups.get(group_id)
        group = self.classic.get(group_id)
        if consumer is not None and consumer.members or group is not None and not group.is_(GroupState.EMPTY):
            return None
        if consumer is None and (group is None or group.protocol_type is None):
            return lambda om: om.commit_timestamp  # no membership: from each commit
        since_ms = self._empty_since.get(group_id, now) * 1000
        return lambda om: since_ms

    def _remove_if_empty(self, group_id: str) -> None:
        if group_id in self.consumer.groups:
            if not self.consumer.groups[group_id].members:
                self.consumer.delete(group_id)
                log.info("consumer group %s is empty and has no offsets: removed", group_id)
            return
        group = self.classic.get(group_id)
        if group is not None and group.is_(GroupState.EMPTY) and not group.pending_members:
            group.state = GroupState.DEAD
            del self.classic[group_id]
            log.info("group %s is empty and has no offsets: removed (Dead)", group_id)
