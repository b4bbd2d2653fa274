"""What takes records out of a partition's log (core.log.PartitionLog, which this is a part of).

At the start: DeleteRecords and retention move the log start offset and delete whole segments
below it, never beyond the high watermark. At the end: a follower whose log diverged from its
leader's cuts the divergent tail (the only way offsets are ever taken back), or empties its
log and starts again where the leader's begins. In the middle: the cleaner swaps a compacted
segment in for the original, crash-safe.
"""
from __future__ import annotations

import os
from typing import Callable

from core.checkpoint import write_int
from core.errors import OffsetOutOfRangeError
from core.log_recovery import LOG_START_FILE, RECOVERY_POINT_FILE
from core.segment import LogSegment


class LogRemoval:
    """PartitionLog's removing side: it uses the log's segments, offsets and leader epochs."""

    # --- moving the start ----------------------------------------------------------
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the first readable offset (-1 means the HW)."""
        hw = self.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, hw)
        if offset > self.log_start_offset:
            self._move_log_start(offset)
            self._delete_segments(lambda s: s.next_offset <= offset)
        return self.log_start_offset

    def _move_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        write_int(self.directory / LOG_START_FILE, offset)
        self.epochs.truncate_from_start(offset)

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
            self._move_log_start(self.segments[0].base_offset)
        return len(doomed)

    # --- truncating (a follower whose log diverged from the leader's) ---------------
    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and every later one; return the new LEO.

        ``offset`` is normally a batch boundary (an epoch's end offset from the leader), so
        the LEO becomes ``offset``. At or past the LEO nothing happens; at or below the log
        start the log is emptied and restarts at ``offset``. The flushed offset, the HW and
        the leader epochs follow the log back.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.next_offset:
            return self.next_offset
        if offset <= self.log_start_offset:
            self._truncate_fully(offset)
        else:
            keep = self._segment_index(offset)
            for segment in reversed(self.segments[keep + 1:]):  # newest first: a crash leaves a prefix
                segment.delete()
            del self.segments[keep + 1:]
            del self._bases[keep + 1:]
            self.active.truncate_to(offset)  # fsync'd: the removed batches cannot come back
            write_int(self.directory / RECOVERY_POINT_FILE, self.active.base_offset)
        end = self.next_offset
        if end < self.log_start_offset:  # the start was inside the batch that went
            self.log_start_offset = end
            write_int(self.directory / LOG_START_FILE, end)
        with self._flush_lock:
            self.flushed_offset = min(self.flushed_offset, end)
        self._hw = min(self._hw, end)
        self.epochs.truncate_from_end(end)
        return end

    def restart_at(self, offset: int) -> None:
        """Empty the log and start it again at ``offset``: a follower whose log ends below the
        leader's log start (Kafka's truncate-fully-and-start-at), or a new stream told where its
        first message goes (``x-stream-initial-offset``). The HW and flushed offset go with it."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self._truncate_fully(offset)
        with self._flush_lock:
            self.flushed_offset = offset
        self._hw = offset

    def _truncate_fully(self, offset: int) -> None:
        """Drop every segment and start again, empty, at ``offset``."""
        for segment in reversed(self.segments):
            segment.delete()
        self.segments, self._bases = [], []
        self._add(self._new_segment(offset))
        self.active.sync()
        write_int(self.directory / RECOVERY_POINT_FILE, offset)
        self.log_start_offset = offset
        write_int(self.directory / LOG_START_FILE, offset)
        self.epochs.clear()  # nothing is left that an epoch could describe

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
