"""A partition's log: an ordered list of segments in one directory.

Directory ``<data-dir>/<topic>-<partition>/``::

    00000000000000000000.log / .index / .timeindex   one segment per base offset
    log-start-offset                                  first readable offset (DeleteRecords)
    recovery-point                                    base offset of the first segment that
                                                      may hold data not yet fsync'd

Offsets are dense and assigned here, in place, on the producer's bytes: a produced batch
is validated (length, magic, CRC-32C) and stored without decoding its records, and reads
return stored bytes. The log end offset (LEO) is one past the last stored offset; the
high watermark (HW) is what readers may see: the flushed offset when the topic flushes
before acknowledging (``flush.messages=1``), else the LEO. It never moves backwards.

Thread-safety: one owner thread appends, reads and maintains. :meth:`flush` may run on
another thread at the same time (it fsyncs a duplicate descriptor and only raises
``flushed_offset``).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from core.checkpoint import read_int, write_int
from core.config import TopicConfig
from core.errors import InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from core.segment import LogSegment, RecoverInfo
from wire.records import RecordBatch, decode_batch, iter_batches, set_offsets_in_place

LOG_START_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
_LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".tmp", ".deleted")


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    batches: int
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class LogRecoveryInfo:
    segments: int
    recovered_segments: int
    truncated_bytes: int
    reasons: tuple[str, ...]


class PartitionLog:
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
        self.recovery_info = self._load(recover)
        self.log_start_offset = max(read_int(self.directory / LOG_START_FILE, 0), self.segments[0].base_offset)
        self.flushed_offset = self.next_offset  # everything on disk now has been fsync'd by _load
        self._hw = self.next_offset

    # --- opening ------------------------------------------------------------------
    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, index_interval_bytes=self.config.index_interval_bytes)

    def _load(self, recover: bool) -> LogRecoveryInfo:
        for path in self.directory.iterdir():
            if path.suffix in _LEFTOVER_SUFFIXES:  # an interrupted clean or swap: the original stands
                path.unlink()
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        for path in self.directory.glob("*index"):
            if path.stem.isdigit() and int(path.stem) not in bases:
                path.unlink()
        recovery_point = read_int(self.directory / RECOVERY_POINT_FILE, 0)
        truncated, recovered, reasons = 0, 0, []
        for i, base in enumerate(bases):
            segment = self._new_segment(base)
            later = bases[i + 1 :]
            needs_recovery = recover and (not later or later[0] > recovery_point)
            info: RecoverInfo | None = segment.load(recover=needs_recovery)
            if self.segments and segment.base_offset < self.segments[-1].next_offset:
                reasons.append(f"{segment.log_path.name} overlaps the segment before it")
                later = [base] + later
                segment.close()
            else:
                self._add(segment)
                if info is not None:
                    recovered += 1
                    truncated += info.truncated_bytes
                    if info.reason:
                        reasons.append(f"{segment.log_path.name}: {info.reason}")
                if info is None or not info.reason or not later:
                    continue
            # A damaged segment ends the log: what follows it cannot be trusted to be contiguous.
            for base_after in later:
                doomed = self._new_segment(base_after)
                truncated += doomed.size
                doomed.delete()
            reasons.append(f"removed {len(later)} segment(s) from the damage onwards")
            break
        if not self.segments:
            self._add(self._new_segment(read_int(self.directory / LOG_START_FILE, 0)))
        if recover:
            for segment in self.segments[-max(recovered, 1):]:
                segment.sync()
            write_int(self.directory / RECOVERY_POINT_FILE, self.active.base_offset)
        return LogRecoveryInfo(len(self.segments), recovered, truncated, tuple(reasons))

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
    def high_watermark(self) -> int:
        candidate = self.flushed_offset if self.config.sync_flush else self.next_offset
        if candidate > self._hw:
            self._hw = candidate
        return self._hw

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- appending ----------------------------------------------------------------
    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int = 0) -> LogAppendInfo:
        """Validate whole batches, give them the next offsets in place, write them in one go.

        Raises CorruptBatchError (wire) for malformed bytes, RecordTooLargeError for a batch
        over ``max.message.bytes`` and InvalidRecordError for a keyless record on a
        compacted topic. Nothing is written unless every batch passes.
        """
        buf = records if isinstance(records, bytearray) else bytearray(records)
        batches = list(iter_batches(buf))
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
        if self.config.compact:
            self._check_keys(buf, batches)
        self.maybe_roll(len(buf))
        first = offset = self.next_offset
        for pos, header in batches:
            set_offsets_in_place(buf, pos, offset, leader_epoch)
            offset += header.last_offset_delta + 1
        self.active.append(buf, batches, first)
        self._unflushed_records += count
        return LogAppendInfo(first, offset - 1, max_ts, len(batches), count, len(buf))

    @staticmethod
    def _check_keys(buf: bytearray, batches) -> None:
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
        old.sync()  # rolled segments are durable, so recovery only ever scans the last one
        segment = self._new_segment(old.next_offset)
        self._add(segment)
        write_int(self.directory / RECOVERY_POINT_FILE, segment.base_offset)
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
        with self._flush_lock:
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

    def replay(self, start: int | None = None, chunk_bytes: int = 1 << 20) -> Iterator[RecordBatch]:
        """Every stored batch from the one holding ``start`` (default: the log start) to the log end,
        flushed or not, decoded, in order: for state rebuilt from a log (offsets, transactions)."""
        position, end = max(self.log_start_offset if start is None else start, self.log_start_offset), self.next_offset
        while position < end:
            data = self.read(position, chunk_bytes, max_offset=end).records
            if not data:
                break
            buf = bytearray(data)
            for pos, header in iter_batches(buf):
                position = max(position, header.last_offset + 1)
                yield decode_batch(buf, pos)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True) -> FetchDataInfo:
        """Stored batches from the one holding ``offset``, whole, up to ``max_bytes``.

        Readers see offsets below the high watermark only (or below ``max_offset``, for
        a replica fetching up to the LEO). Raises OffsetOutOfRangeError outside
        [log start offset, LEO].
        """
        self._check_range(offset)
        hw = self.high_watermark
        limit = hw if max_offset is None else max_offset
        data = b""
        if offset < limit:
            for segment in self.segments[self._segment_index(offset):]:
                data = segment.read(offset, max_bytes, limit, min_one=min_one)
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

    # --- moving the start ----------------------------------------------------------
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the first readable offset (-1 means the HW)."""
        hw = self.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, hw)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            write_int(self.directory / LOG_START_FILE, offset)
            self._delete_segments(lambda s: s.next_offset <= offset)
        return self.log_start_offset

    def apply_retention(self) -> int:
        """Delete whole segments past retention.ms or beyond retention.bytes; return how many."""
        if not self.config.delete:
            return 0
        now_ms = self.clock() * 1000
        deleted = 0
        if self.config.retention_ms >= 0:
            horizon = now_ms - self.config.retention_ms
            deleted += self._delete_segments(lambda s: 0 <= s.max_timestamp < horizon)
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes

            def over(segment: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_segments(over)
        return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment], bool]) -> int:
        """Delete the oldest segments while ``predicate`` holds, never beyond the HW."""
        hw = self.high_watermark
        doomed = []
        for segment in self.segments:
            if segment.empty or segment.next_offset > hw or not predicate(segment):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if doomed[-1] is self.active:
            self.roll()  # keep an (empty) active segment at the LEO
        for segment in doomed:
            segment.delete()
        self.segments = self.segments[len(doomed):]
        self._bases = self._bases[len(doomed):]
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            write_int(self.directory / LOG_START_FILE, self.log_start_offset)
        return len(doomed)

    def replace_segment(self, index: int, data: bytes) -> None:
        """Swap segment ``index`` (not the active one) for ``data`` (used by the cleaner).

        Crash-safe order: the new file is written and fsync'd beside the old one as
        ``.cleaned``; the old indexes are removed (a missing index is rebuilt); a rename
        replaces the log atomically.
        """
        old = self.segments[index]
        assert old is not self.active, "the active segment is never rewritten"
        cleaned = old.log_path.with_name(old.log_path.name + ".cleaned")
        fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        old.close()
        old.index_path.unlink(missing_ok=True)
        old.timeindex_path.unlink(missing_ok=True)
        os.replace(cleaned, old.log_path)
        segment = self._new_segment(old.base_offset)
        segment.load(recover=False)
        segment.sync()
        self.segments[index] = segment

    # --- closing ------------------------------------------------------------------
    def close(self) -> None:
        self.flush()
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        for segment in self.segments:
            segment.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.directory.name}, start={self.log_start_offset}, "
                f"end={self.next_offset}, segments={len(self.segments)})")
