"""Log compaction (``cleanup.policy=compact``): keep the newest record of every key.

The cleaner reads the whole log to learn the last offset of each key, then rewrites each
closed segment (never the active one) keeping only records that are their key's newest.
A tombstone (a record whose value is null) is kept while it is younger than
``delete.retention.ms`` by its own timestamp, so that consumers catching up still see the
delete, and dropped after that. Kept records keep their offsets: a rewritten batch has its
original base offset and lastOffsetDelta, producer fields and codec, so offsets stay
monotonic with gaps where records were removed. Control batches are kept as they are.

Transactions: a record counts as its key's newest only once its transaction committed.
Records of aborted transactions are removed, and records of a transaction still open (no
marker yet) neither count nor shadow older values: otherwise an abort could leave a key
with no committed value at all (``__consumer_offsets`` holds transactional offset commits).

Batches whose records all survive are copied byte for byte; the swap of each segment is
crash-safe (see :meth:`PartitionLog.replace_segment`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from core.log import PartitionLog
from wire.records import decode_batch, encode_batch, parse_control_record


@dataclass(frozen=True, slots=True)
class CleanInfo:
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def _batches(segment):
    for bp in segment.iter_positions():
        yield bp, os.pread(segment.fd, bp.size, bp.position)


def _latest_committed(log: PartitionLog) -> tuple[dict[bytes, int], set[int], set[int]]:
    """(key -> offset of its newest committed record, offsets of aborted records, offsets of
    records whose transaction is still open)."""
    latest: dict[bytes, int] = {}
    aborted: set[int] = set()
    open_txns: dict[int, list[tuple[bytes, int]]] = {}
    for segment in log.segments:
        for _bp, raw in _batches(segment):
            batch = decode_batch(raw)
            if batch.is_control:
                pending = open_txns.pop(batch.producer_id, [])
                if batch.records and parse_control_record(batch.records[0])[0]:
                    latest.update(pending)
                else:
                    aborted.update(offset for _key, offset in pending)
                continue
            keyed = [(r.key, r.offset) for r in batch.records if r.key is not None]
            if batch.is_transactional:
                open_txns.setdefault(batch.producer_id, []).extend(keyed)
            else:
                latest.update(keyed)
    unresolved = {offset for pending in open_txns.values() for _key, offset in pending}
    return latest, aborted, unresolved


def compact(log: PartitionLog) -> CleanInfo:
    now_ms = int(log.clock() * 1000)
    latest, aborted, unresolved = _latest_committed(log)

    rewritten = removed = before = after = 0
    tombstone_horizon = now_ms - log.config.delete_retention_ms
    for index, segment in enumerate(log.segments[:-1]):
        out, changed = [], False
        for _bp, raw in _batches(segment):
            batch = decode_batch(raw)
            if batch.is_control:
                out.append(raw)
                continue
            keep = [
                r for r in batch.records
                if r.offset in unresolved or (
                    r.key is not None and r.offset not in aborted and latest.get(r.key) == r.offset
                    and not (r.value is None and r.timestamp < tombstone_horizon))
            ]
            if len(keep) == len(batch.records):
                out.append(raw)
                continue
            changed = True
            removed += len(batch.records) - len(keep)
            if keep:
                out.append(encode_batch(
                    keep,
                    base_offset=batch.base_offset,
                    compression=batch.compression,
                    producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch,
                    base_sequence=batch.base_sequence,
                    partition_leader_epoch=batch.partition_leader_epoch,
                    is_transactional=batch.is_transactional,
                    timestamp_type=batch.timestamp_type,
                    last_offset_delta=batch.last_offset_delta,
                ))
        if changed:
            data = b"".join(out)
            before += segment.size
            after += len(data)
            log.replace_segment(index, data)
            rewritten += 1
    return CleanInfo(rewritten, removed, before, after)
