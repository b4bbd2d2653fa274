"""Committed offsets: the compacted topic ``__consumer_offsets`` and the cache in front of it.

A group's commits all go to one partition of ``__consumer_offsets``, chosen as Kafka does
(:func:`partition_for`: ``abs(java hashCode(group_id)) % partitions``), so one group's
history is ordered. The topic is created with ``cleanup.policy=compact``: the cleaner keeps
the newest record per key, and a record with a null value (a tombstone) deletes the key.

Record format: Kafka's own (``OffsetCommitKey`` v1 / ``OffsetCommitValue`` v3), so tools
that read ``__consumer_offsets`` understand ours. Integers are big-endian; a ``string`` is an
int16 byte length followed by UTF-8::

    key    int16  version = 1        (0 is read too; 2 is Kafka's group-metadata key, skipped)
           string group_id
           string topic
           int32  partition

    value  int16  version = 3        (0..2 are read too)
           int64  offset
           int32  leader_epoch       (-1 = none; absent before v3)
           string metadata           (Kafka stores a null metadata as "", and so do we)
           int64  commit_timestamp   (ms; v1 has an int64 expire timestamp after it)

    value  null                      tombstone: the group's offset for that partition is deleted

A KIP-848 group's own state (core.groups.consumer_state) is one more record per group, under a
key version of ours that Kafka's record types do not use::

    key    int16  version = 0x7F01
           string group_id
    value  UTF-8 JSON, or null when the group is gone

Every record's timestamp is the commit time, which is what the cleaner measures
``delete.retention.ms`` against for tombstones.

The cache (group -> (topic, partition) -> :class:`OffsetAndMetadata`) answers every fetch;
:meth:`OffsetStore.load` rebuilds it at start-up by replaying every partition from its log
start offset to its end, in offset order, so the newest record per key wins and tombstones
delete. The cache is updated as soon as a commit is appended; the caller holds the
*response* until the append is durable (``durable_at``), as Kafka's coordinator does.

Transactional commits (TxnOffsetCommit) are appended the same way but as a transactional
batch of the producer; they stay pending (invisible to fetches) until the transaction
coordinator's marker for that producer lands in the same partition: a commit marker applies
them, an abort marker drops them. Replay does the same with the markers it finds, so
offsets committed by a transaction that was decided before a crash come back.

Thread-safety: none; the owner's thread only, like the logs it writes.
"""
from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

from core.errors import LogError, UnknownTopicError
from core.log_manager import LogManager
from wire.records import Record, encode_batch, parse_control_record

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's offsets.topic.segment.bytes: small enough that closed segments exist for the cleaner.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes
GROUP_STATE_KEY_VERSION = 0x7F01  # a KIP-848 group's snapshot (see the module docstring)

_KEY_VERSION, _GROUP_METADATA_KEY_VERSION, _VALUE_VERSION = 1, 2, 3
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")

TopicPartition = tuple[str, int]
DurableAt = tuple[str, int, int]  # (topic, partition, last offset of the append)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1

    def as_tuple(self) -> tuple[int, int, str]:
        return self.offset, self.leader_epoch, self.metadata

    def stamped(self, now_ms: int) -> "OffsetAndMetadata":
        """With ``now_ms`` as commit time if it has none (offset retention counts from it)."""
        return self if self.commit_timestamp >= 0 else replace(self, commit_timestamp=now_ms)


# --- partitioning -------------------------------------------------------------------------

def java_string_hash(text: str) -> int:
    """``String.hashCode()`` of the JVM: 31-polynomial over UTF-16 code units, as an int32."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


# Share groups' start offsets in cluster mode (routing.share, gateway.cluster.share_state) are kept
# as the offsets of this key + the group id, in the group's own partition; not a group of their own.
SHARE_STATE_PREFIX = "__share-state:"


def share_state_key(group_id: str) -> str:
    return SHARE_STATE_PREFIX + group_id


def is_share_state(key: str) -> bool:
    return key.startswith(SHARE_STATE_PREFIX)


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`` (a share group's state
    goes with the group)."""
    if is_share_state(group_id):
        group_id = group_id[len(SHARE_STATE_PREFIX):]
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# --- record codec -------------------------------------------------------------------------

def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _I16.pack(len(data)) + data


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return "", pos
    if pos + n > len(buf):
        raise ValueError("string runs past the end of the record")
    return buf[pos:pos + n].decode(), pos + n


def encode_key(group_id: str, topic: str, partition: int) -> bytes:
    return _I16.pack(_KEY_VERSION) + _string(group_id) + _string(topic) + _I32.pack(partition)


def decode_key(key: bytes) -> tuple[str, str, int] | None:
    """``(group_id, topic, partition)`` of an offset key, None for other key kinds (group metadata)."""
    (version,) = _I16.unpack_from(key, 0)
    if version not in (0, 1):
        return None
    group_id, pos = _read_string(key, 2)
    topic, pos = _read_string(key, pos)
    (partition,) = _I32.unpack_from(key, pos)
    return group_id, topic, partition


def encode_value(om: OffsetAndMetadata) -> bytes:
    return (_I16.pack(_VALUE_VERSION) + _I64.pack(om.offset) + _I32.pack(om.leader_epoch)
            + _string(om.metadata) + _I64.pack(om.commit_timestamp))


def decode_value(value: bytes) -> OffsetAndMetadata:
    (version,) = _I16.unpack_from(value, 0)
    if not 0 <= version <= 3:
        raise ValueError(f"unknown offset value version {version}")
    (offset,) = _I64.unpack_from(value, 2)
    pos, epoch = 10, -1
    if version >= 3:
        (epoch,) = _I32.unpack_from(value, pos)
        pos += 4
    metadata, pos = _read_string(value, pos)
    (commit_ts,) = _I64.unpack_from(value, pos)
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts)


# --- the store ----------------------------------------------------------------------------

class OffsetStore:
    """Committed offsets of every group: appended to ``__consumer_offsets``, served from memory."""

    def __init__(self, logs: LogManager, clock: Callable[[], float] = time.time, *, partitions: int = 1):
        if partitions < 1:
            raise ValueError(f"__consumer_offsets needs at least one partition, not {partitions}")
        self.logs = logs
        self.clock = clock
        self.partitions = partitions
        self._cache: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # producer id -> group -> offsets committed inside its open transaction
        self._pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self.group_states: dict[str, str] = {}  # KIP-848 group -> its latest snapshot, as replayed

    def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` if missing; adopt the partition count of an existing one."""
        topic = self.logs.store.get_topic(OFFSETS_TOPIC)
        if topic is None:
            try:
                self.logs.create_topic(OFFSETS_TOPIC, self.partitions, OFFSETS_TOPIC_CONFIGS)
            except LogError as exc:  # cluster mode: created by another broker meanwhile, or too few brokers yet
                log.warning("%s not created: %s", OFFSETS_TOPIC, exc)
        elif topic.partitions != self.partitions:
            log.warning("%s has %d partitions, not the configured %d; keeping %d (groups are hashed over them)",
                        OFFSETS_TOPIC, topic.partitions, self.partitions, topic.partitions)
            self.partitions = topic.partitions

    def load(self) -> int:
        """Rebuild the cache from the topic (created if missing); return how many records were replayed."""
        self.ensure_topic()
        self._cache.clear()
        self._pending.clear()
        self.group_states.clear()
        replayed = 0
        for partition in range(self.partitions):
            plog = self.logs.logs.get((OFFSETS_TOPIC, partition))
            if plog is not None:  # cluster mode: only the partitions this broker holds
                replayed += self._replay(plog, partition)
        return replayed

    def reload(self, partition: int) -> int:
        """Forget and replay one partition (cluster mode: this broker just became its leader)."""
        plog = self.logs.logs.get((OFFSETS_TOPIC, partition))
        for group in [g for g in self._cache if self.partition_for(g) == partition]:
            del self._cache[group]
        for group in [g for g in self.group_states if self.partition_for(g) == partition]:
            del self.group_states[group]
        for groups in self._pending.values():
            for group in [g for g in groups if self.partition_for(g) == partition]:
                del groups[group]
        return self._replay(plog, partition) if plog is not None else 0

    def _replay(self, plog, partition: int) -> int:
        replayed = 0
        for batch in plog.replay():
            if batch.is_control:
                if batch.records:
                    self._end_pending(batch.producer_id, parse_control_record(batch.records[0])[0], partition)
                continue
            for record in batch.records:
                replayed += self._apply(record, batch.producer_id if batch.is_transactional else None)
        return replayed

    def _apply(self, record: Record, txn_producer: int | None = None) -> int:
        if record.key is None:
            return 0
        try:
            if _I16.unpack_from(record.key, 0)[0] == GROUP_STATE_KEY_VERSION:
                group_id, _ = _read_string(record.key, 2)
                if record.value is None:
                    self.group_states.pop(group_id, None)
                else:
                    self.group_states[group_id] = record.value.decode()
                return 1
            key = decode_key(record.key)
            if key is None:
                return 0
            group_id, topic, partition = key
            if record.value is None:
                offsets = self._cache.get(group_id)
                if offsets is not None:
                    offsets.pop((topic, partition), None)
                    if not offsets:
                        del self._cache[group_id]
            elif txn_producer is not None:
                self._pending.setdefault(txn_producer, {}).setdefault(group_id, {})[(topic, partition)] = \
                    decode_value(record.value).stamped(record.timestamp)
            else:
                self._cache.setdefault(group_id, {})[(topic, partition)] = \
                    decode_value(record.value).stamped(record.timestamp)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            log.warning("skipping unreadable %s record at offset %d: %s", OFFSETS_TOPIC, record.offset, exc)
            return 0
        return 1

    # --- queries --------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def groups(self) -> list[str]:
        """Groups that have at least one committed offset."""
        return list(self._cache)

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._cache.get(group_id))

    def fetch(self, group_id: str, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets; only those committed (missing partitions are left out)."""
        offsets = self._cache.get(group_id, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    def has_pending(self, group_id: str, partitions: Iterable[TopicPartition] | None = None) -> bool:
        """Whether an open transaction holds offsets of the group (for these partitions)."""
        for groups in self._pending.values():
            offsets = groups.get(group_id)
            if offsets and (partitions is None or any(tp in offsets for tp in partitions)):
                return True
        return False

    # --- writes ---------------------------------------------------------------------
    def commit(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> DurableAt | None:
        """Append the offsets as one batch and cache them. Raises LogError/OSError if the append fails."""
        if not offsets:
            return None
        now_ms = int(self.clock() * 1000)
        offsets = {tp: om.stamped(now_ms) for tp, om in offsets.items()}
        records = [Record(i, now_ms, encode_key(group_id, topic, partition), encode_value(om))
                   for i, ((topic, partition), om) in enumerate(offsets.items())]
        durable_at = self._append(group_id, records)
        cached = self._cache.setdefault(group_id, {})
        cached.update(offsets)
        return durable_at

    def commit_in_txn(self, group_id: str, producer_id: int, producer_epoch: int,
                      offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> DurableAt | None:
        """Append offsets as part of the producer's transaction; they apply when it commits."""
        if not offsets:
            return None
        now_ms = int(self.clock() * 1000)
        offsets = {tp: om.stamped(now_ms) for tp, om in offsets.items()}
        records = [Record(i, now_ms, encode_key(group_id, topic, partition), encode_value(om))
                   for i, ((topic, partition), om) in enumerate(offsets.items())]
        durable_at = self._append(group_id, records, producer_id=producer_id, producer_epoch=producer_epoch,
                                  is_transactional=True)
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)
        return durable_at

    def end_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        """The producer's marker was appended to ``partition``: apply or drop what it committed there."""
        self._end_pending(producer_id, commit, partition)

    def _end_pending(self, producer_id: int, commit: bool, partition: int) -> None:
        groups = self._pending.get(producer_id)
        if not groups:
            return
        for group_id in [g for g in groups if self.partition_for(g) == partition]:
            offsets = groups.pop(group_id)
            if commit:
                self._cache.setdefault(group_id, {}).update(offsets)
        if not groups:
            del self._pending[producer_id]

    def delete_group(self, group_id: str) -> DurableAt | None:
        """Tombstone every committed offset of the group."""
        offsets = self._cache.get(group_id)
        if not offsets:
            return None
        now_ms = int(self.clock() * 1000)
        records = [Record(i, now_ms, encode_key(group_id, topic, partition), None)
                   for i, (topic, partition) in enumerate(offsets)]
        durable_at = self._append(group_id, records)
        del self._cache[group_id]
        return durable_at

    def delete_topic_partitions(self, group_id: str, partitions: Iterable[TopicPartition]) -> DurableAt | None:
        """Tombstone some of the group's offsets (OffsetDelete)."""
        offsets = self._cache.get(group_id, {})
        doomed = [tp for tp in partitions if tp in offsets]
        if not doomed:
            return None
        now_ms = int(self.clock() * 1000)
        records = [Record(i, now_ms, encode_key(group_id, t, p), None) for i, (t, p) in enumerate(doomed)]
        durable_at = self._append(group_id, records)
        for tp in doomed:
            offsets.pop(tp, None)
        if not offsets:
            self._cache.pop(group_id, None)
        return durable_at

    def write_group_state(self, group_id: str, state: str | None) -> DurableAt:
        """Append a KIP-848 group's snapshot (None: the group is gone)."""
        key = _I16.pack(GROUP_STATE_KEY_VERSION) + _string(group_id)
        if state is None:
            self.group_states.pop(group_id, None)
        else:
            self.group_states[group_id] = state
        now_ms = int(self.clock() * 1000)
        return self._append(group_id, [Record(0, now_ms, key, None if state is None else state.encode())])

    def _append(self, group_id: str, records: list[Record], **batch_fields) -> DurableAt:
        partition = self.partition_for(group_id)
        try:
            plog = self.logs.get_log(OFFSETS_TOPIC, partition)
        except UnknownTopicError:
            self.ensure_topic()
            partition = self.partition_for(group_id)
            plog = self.logs.get_log(OFFSETS_TOPIC, partition)
        info = plog.append(encode_batch(records, **batch_fields))
        return OFFSETS_TOPIC, partition, info.last_offset


__all__ = [
    "OFFSETS_TOPIC", "OFFSETS_TOPIC_CONFIGS", "MAX_METADATA_BYTES", "OffsetAndMetadata", "OffsetStore",
    "java_string_hash", "partition_for", "encode_key", "decode_key", "encode_value", "decode_value",
]
