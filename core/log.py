"""A partition's log: an ordered list of segments in one directory.

Directory ``<data-dir>/<topic>-<partition>/``::

    00000000000000000000.log / .index / .timeindex   one segment per base offset
    log-start-offset                                  first readable offset (DeleteRecords)
    recovery-point                                    base offset of the first segment that
                                                      may hold data not yet fsync'd
    leader-epoch-checkpoint                           where each leader epoch began (core.epochs)

Offsets are dense and assigned here, in place, on the producer's bytes: a produced batch
is validated (length, magic, CRC-32C) and stored without decoding its records, and reads
return stored bytes. The log end offset (LEO) is one past the last stored offset; the
high watermark (HW) is what readers may see: the flushed offset when the topic flushes
before acknowledging (``flush.messages=1``), else the LEO. It never moves backwards.

Replication: with ``replicated`` set, the HW no longer follows this log's own end; the
partition's leader moves it (:meth:`advance_high_watermark`) to what the in-sync replicas
hold. A follower appends the leader's batches as they are (:meth:`append_replica`) and
cuts a divergent tail (:meth:`truncate_to`), the only way offsets are ever taken back.

Thread-safety: one owner thread appends, reads and maintains. :meth:`flush` may run on
another thread at the same time (it fsyncs a duplicate descriptor and only raises
``flushed_offset``).
"""
from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from core.checkpoint import read_int, write_int
from core.config import TopicConfig
from core.epochs import LeaderEpochCache
from core.errors import InvalidRecordError, OffsetMismatchError, OffsetOutOfRangeError, RecordTooLargeError, StorageError
from core.log_removal import LogRemoval
from core.log_recovery import (LOG_START_FILE, RECOVERY_POINT_FILE, LogRecoveryInfo, epochs_from_batches,
                               last_batch_epoch, open_segments)
from core.segment import LogSegment
from wire.records import RecordBatch, decode_batch, iter_batches, set_offsets_in_place, stamp_built

_BATCH_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: outside the CRC
_WRITEV_BATCHES = 256  # two iovecs a batch, under Linux's IOV_MAX of 1024


class LogAppendInfo(NamedTuple):  # a tuple: made once per append, a frozen dataclass cost a microsecond more
    first_offset: int
    last_offset: int
    max_timestamp: int
    batches: int
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    records: bytes  # or a core.segment.FileRange (read with zero_copy)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class PartitionLog(LogRemoval):
    def __init__(
        self,
        directory: Path,
        config: TopicConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        recover: bool = False,
    ):
        self.directory = Path(directory)
        self.config = config or TopicConfig()
        self.clock = clock
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._flush_lock = threading.Lock()
        self._hw = 0
        self._unflushed_records = 0
        self._last_flush = clock()
        self.dirty: set | None = None  # a LogManager's set of logs written since its last group commit
        self.became_dirty: Callable[[], None] | None = None  # the LogManager's, told when that set gains a first log
        self.replicated = False  # True: the HW is moved by replication, see advance_high_watermark
        self.dropped = False  # deleted (its topic or queue went): its high watermark moves no more
        self.leader_epoch = 0  # stamped on appended batches unless the caller says otherwise (the leader's epoch)
        self.recovery_info = self._load(recover)
        self.log_start_offset = max(read_int(self.directory / LOG_START_FILE, 0), self.segments[0].base_offset)
        self.flushed_offset = self.next_offset  # everything on disk now has been fsync'd by _load
        self._hw = self.next_offset
        self.epochs = LeaderEpochCache(self.directory)
        last_epoch = last_batch_epoch(self.active)
        if not self.epochs.loaded or last_epoch > self.epochs.latest_epoch:
            # missing (a one-epoch log has no file), or an append's epoch was never flushed
            # (kill -9): the batches say
            self.epochs.assign_many(epochs_from_batches(self.segments, last_epoch), persist=False)
            self.epochs.persist_if_dirty()
        # A crash may have cut a tail whose epochs were recorded, or stopped between moving the
        # log start and trimming the cache: the log is the authority. An epoch beginning right
        # at the LEO describes no lost record (e.g. DeleteRecords up to the end): it stays.
        self.epochs.truncate_from_end(self.next_offset + 1)
        self.epochs.truncate_from_start(self.log_start_offset)

    # --- opening ------------------------------------------------------------------
    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, index_interval_bytes=self.config.index_interval_bytes)

    def _load(self, recover: bool) -> LogRecoveryInfo:
        segments, info = open_segments(self.directory, recover, self._new_segment)
        for segment in segments:
            self._add(segment)
        return info

    def _add(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    # --- state --------------------------------------------------------------------
    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def next_offset(self) -> int:
        """The log end offset: the offset the next appended record gets."""
        return self.segments[-1].next_offset

    @property
    def local_end_offset(self) -> int:
        """What this replica holds by the topic's durability policy: fsync'd, or merely written."""
        return self.flushed_offset if self.config.sync_flush else self.next_offset

    @property
    def high_watermark(self) -> int:
        if not self.replicated:
            candidate = self.local_end_offset
            if candidate > self._hw:
                self._hw = candidate
        return self._hw

    def restore_high_watermark(self, offset: int) -> None:
        """Replication, at open: the HW last checkpointed (not the LEO: the tail may not be committed)."""
        self._hw = min(max(offset, 0), self.next_offset)

    def advance_high_watermark(self, offset: int) -> int:
        """Replication: raise the HW to ``offset`` (never past the LEO, never backwards)."""
        offset = min(offset, self.next_offset)
        if offset > self._hw:
            self._hw = offset
        return self._hw

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- appending ----------------------------------------------------------------
    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int | None = None) -> LogAppendInfo:
        """Validate whole batches, give them the next offsets, write them in one go.

        Raises CorruptBatchError (wire) for malformed bytes, RecordTooLargeError for a batch
        over ``max.message.bytes`` and InvalidRecordError for a keyless record on a
        compacted topic. Nothing is written unless every batch passes.
        """
        if leader_epoch is None:
            leader_epoch = self.leader_epoch
        batches = list(iter_batches(records))
        count, max_ts = self._check_batches(batches)
        if self.config.compact:
            self._check_keys(records, batches)
        size = len(records)
        self.maybe_roll(size)
        first = offset = self.next_offset
        if len(batches) <= _WRITEV_BATCHES:
            # No copy of the request to stamp offsets: each batch's 16-byte prefix goes out patched
            # beside the untouched rest of it, all in one writev (a 1 MB produce was copied whole).
            view = memoryview(records)
            parts = []
            for pos, header in batches:
                parts.append(_BATCH_PREFIX.pack(offset, header.batch_length, leader_epoch))
                parts.append(view[pos + 16:pos + header.size])
                offset += header.last_offset_delta + 1
            self.active.append(parts, batches, first, size)
        else:
            buf = records if isinstance(records, bytearray) else bytearray(records)
            for pos, header in batches:
                set_offsets_in_place(buf, pos, offset, leader_epoch)
                offset += header.last_offset_delta + 1
            self.active.append(buf, batches, first)
        self._written(count)
        if leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(leader_epoch, first, persist=False)  # written by the next flush
        return LogAppendInfo(first, offset - 1, max_ts, len(batches), count, size)

    def append_built(self, buffers: list, length: int, crc: int, records: int, max_timestamp: int) -> LogAppendInfo:
        """Append one batch this process has just encoded (``wire.records.built_batch``: the
        CRC-covered part as buffers, ``buffers[0]`` free): known good, so it is neither parsed
        nor CRC-checked again, and it is never joined: the stamped prefix and the pieces go out
        in one writev. With messages spread over thousands of queues each batch holds a message
        or two, and :meth:`append`'s parsing and copying were most of their cost."""
        if self.config.compact:  # keys must be checked: the general path
            stamp_built(buffers, length, crc, 0, -1)
            return self.append(b"".join(buffers))
        first = self.segments[-1].next_offset
        epoch = self.leader_epoch
        size = stamp_built(buffers, length, crc, first, epoch)
        if size > self.config.max_message_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={self.config.max_message_bytes}; "
                                      "raise the topic's max.message.bytes or send smaller messages")
        self.maybe_roll(size)  # a new segment starts at the LEO: ``first`` stays right
        self.segments[-1].append_batch(buffers, size, first, records - 1, max_timestamp)
        self._written(records)
        if epoch > self.epochs.latest_epoch:
            self.epochs.assign(epoch, first, persist=False)
        return LogAppendInfo(first, first + records - 1, max_timestamp, 1, records, size)

    def _written(self, records: int) -> None:
        """An append's records await the next flush; the LogManager's group commit is told."""
        self._unflushed_records += records
        dirty = self.dirty
        if dirty is not None:
            if not dirty and self.became_dirty is not None:
                self.became_dirty()
            dirty.add(self)

    def append_replica(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """A follower's append: the leader's batches, offsets and leader epochs as it stored them.

        Validated as :meth:`append` validates (whole batches, CRC-32C, max.message.bytes;
        keys were the leader's to check), never restamped. The first batch must start at
        the LEO and each next one right after the one before, else OffsetMismatchError;
        on a compacted topic a batch may start further on (the leader's cleaner dropped
        whole batches). One exception, as in Kafka: an empty log whose start lies inside the
        first batch (DeleteRecords moved the leader's start mid-batch) restarts at that
        batch. Segments roll batch by batch as the leader's would have, and each leader
        epoch the batches bring is recorded in :attr:`epochs`.
        """
        buf = memoryview(records)
        batches = list(iter_batches(buf))
        count, max_ts = self._check_batches(batches)
        first = batches[0][1].base_offset
        if first < self.next_offset <= batches[0][1].last_offset and self.size_bytes == 0:
            self._truncate_fully(first)
        expected = self.next_offset
        for i, (pos, header) in enumerate(batches):
            base = header.base_offset
            if base != expected and not (self.config.compact and base > expected):
                raise OffsetMismatchError(first, self.next_offset,
                                          f"batch {i} starts at {base}, expected {expected}" if i else "")
            expected = header.last_offset + 1
        limit = self.config.segment_bytes
        self.maybe_roll(batches[0][1].size)
        run_start, run_bytes = 0, 0
        for i, (pos, header) in enumerate(batches):
            if run_bytes and self.active.size + run_bytes + header.size > limit:
                self._append_run(buf, batches[run_start:i])
                self.roll()
                run_start, run_bytes = i, 0
            run_bytes += header.size
        self._append_run(buf, batches[run_start:])
        self._written(count)
        last = batches[-1][1]
        return LogAppendInfo(first, last.last_offset, max_ts, len(batches), count, len(buf))

    def _append_run(self, buf, run) -> None:
        """Write consecutive replica batches to the active segment in one write; record new epochs."""
        start = run[0][0]
        end = run[-1][0] + run[-1][1].size
        self.active.append(buf[start:end], [(pos - start, header) for pos, header in run], None)
        self.epochs.assign_many(((h.partition_leader_epoch, h.base_offset) for _pos, h in run), persist=False)

    def _check_batches(self, batches) -> tuple[int, int]:
        """(records, max timestamp) of validated batches, refusing none or one over max.message.bytes."""
        if not batches:
            raise InvalidRecordError("the request carries no record batch")
        limit = self.config.max_message_bytes
        count, max_ts = 0, -1
        for pos, header in batches:
            if header.size > limit:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes exceeds max.message.bytes={limit}; "
                    "raise the topic's max.message.bytes or send smaller batches"
                )
            count += header.records_count
            max_ts = max(max_ts, header.max_timestamp)
        return count, max_ts

    @staticmethod
    def _check_keys(buf, batches) -> None:
        for pos, header in batches:
            if header.is_control:
                continue
            for record in decode_batch(buf, pos, verify_crc=False).records:
                if record.key is None:
                    raise InvalidRecordError("a compacted topic (cleanup.policy=compact) needs a key on every record")

    def maybe_roll(self, incoming: int = 0) -> bool:
        """Start a new segment when the active one is full (segment.bytes) or old (segment.ms)."""
        active = self.active
        if active.empty:
            return False
        too_big = active.size + incoming > self.config.segment_bytes
        first_ts = active.first_timestamp
        too_old = first_ts is not None and first_ts >= 0 and self.clock() * 1000 - first_ts > self.config.segment_ms
        if too_big or too_old:
            self.roll()
            return True
        return False

    def roll(self) -> LogSegment:
        """Close the active segment to writes (fsync'd) and open a new one at the LEO."""
        old = self.active
        if old.empty:
            return old
        try:
            old.sync()  # rolled segments are durable, so recovery only ever scans the last one
            segment = self._new_segment(old.next_offset)
            self._add(segment)
            write_int(self.directory / RECOVERY_POINT_FILE, segment.base_offset)
        except OSError as exc:  # a stale recovery point only means a longer scan at start-up
            raise StorageError(f"cannot roll the log in {self.directory}: {exc.strerror or exc}; free space on "
                               "its file system (the broker refuses writes until there is)") from None
        return segment

    # --- flushing (may run on another thread) ---------------------------------------
    def needs_flush(self, now: float) -> bool:
        if self.next_offset <= self.flushed_offset:
            return False
        if self.config.sync_flush:
            return True
        return (self._unflushed_records >= self.config.flush_messages
                or (now - self._last_flush) * 1000 >= self.config.flush_ms)

    def flush(self) -> int:
        """fsync everything appended so far; return the offset now known durable."""
        end = self.next_offset  # read before the segment: a roll in between syncs the old one itself
        segment = self.active
        try:
            fd = segment.dup_fd()
        except OSError:  # closed by the owner meanwhile; close() syncs on its own
            return self.flushed_offset
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return self.flushed(end)

    def flushed(self, end: int) -> int:
        """Everything below ``end`` (a :attr:`next_offset` read before the sync) is now on disk:
        by :meth:`flush`, or by a file-system-wide sync that covered this log (LogManager)."""
        try:
            self.epochs.persist_if_dirty()
        except FileNotFoundError:
            if self.directory.exists():
                raise
            return self.flushed_offset  # the partition was deleted meanwhile: nothing left to keep
        with self._flush_lock:
            end = min(end, self.next_offset)  # truncate_to may have cut the log meanwhile
            if end > self.flushed_offset:
                self.flushed_offset = end
            self._unflushed_records = 0
            self._last_flush = self.clock()
        return end

    # --- reading ------------------------------------------------------------------
    def _check_range(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.next_offset:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self.next_offset)

    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def replay(self, start: int | None = None, chunk_bytes: int = 1 << 20, *,
               end: int | None = None) -> Iterator[RecordBatch]:
        """Every stored batch from the one holding ``start`` (default: the log start) to ``end``
        (default: the log end, flushed or not), decoded, in order: for state rebuilt from a log
        (offsets, transactions, a follower's AMQP definitions)."""
        position = max(self.log_start_offset if start is None else start, self.log_start_offset)
        end = self.next_offset if end is None else min(end, self.next_offset)
        while position < end:
            data = self.read(position, chunk_bytes, max_offset=end).records
            if not data:
                break
            buf = bytearray(data)
            for pos, header in iter_batches(buf):
                position = max(position, header.last_offset + 1)
                yield decode_batch(buf, pos)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True,
             zero_copy: bool = False) -> FetchDataInfo:
        """Stored batches from the one holding ``offset``, whole, up to ``max_bytes``.

        Readers see offsets below the high watermark only (or below ``max_offset``, for
        a replica fetching up to the LEO). Raises OffsetOutOfRangeError outside
        [log start offset, LEO]. ``zero_copy``: the records are a
        :class:`core.segment.FileRange` (not read; see there how long it may be kept).
        """
        self._check_range(offset)
        hw = self.high_watermark
        limit = hw if max_offset is None else max_offset
        data = b""
        if offset < limit:
            for segment in self.segments[self._segment_index(offset):]:
                data = (segment.read_range if zero_copy else segment.read)(offset, max_bytes, limit, min_one=min_one)
                if data or segment.next_offset >= limit:
                    break  # an empty read of a non-final segment means a compaction gap: go on
        return FetchDataInfo(data, hw, self.log_start_offset, self.next_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` below the HW."""
        hw = self.high_watermark
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            bp = segment.first_position_at_or_after_time(timestamp)
            if bp is None:
                continue
            if bp.base_offset >= hw:
                return None
            batch = decode_batch(os.pread(segment.fd, bp.size, bp.position))
            for record in batch.records:
                if record.timestamp >= timestamp and self.log_start_offset <= record.offset < hw:
                    return record.offset, record.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        candidates = [s for s in self.segments if s.max_timestamp >= 0]
        if not candidates:
            return None
        segment = max(reversed(candidates), key=lambda s: s.max_timestamp)
        best = None
        for bp in segment.iter_positions():
            if bp.base_offset >= self.high_watermark:
                break
            for record in decode_batch(os.pread(segment.fd, bp.size, bp.position)).records:
                if best is None or record.timestamp > best[1]:
                    best = (record.offset, record.timestamp)
        return best

    # --- closing ------------------------------------------------------------------
    def close(self) -> None:
        self.flush()
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.dropped = True
        for segment in self.segments:
            segment.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.directory.name}, start={self.log_start_offset}, "
                f"end={self.next_offset}, segments={len(self.segments)})")
