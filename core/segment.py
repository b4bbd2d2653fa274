"""One segment of a partition log: ``<base>.log`` plus its two sparse indexes.

``<base>.log`` is record batches v2 back to back, byte for byte as Kafka stores them;
``<base>`` is the first offset the segment may hold, zero-padded to 20 digits. Batches
are appended with ``os.write`` on an ``O_APPEND`` descriptor (one write per append call,
however many batches it carries) and read with ``os.pread``, so readers never move a
shared file position and a flush thread can ``fsync`` a duplicate of the descriptor.

Thread-safety: appends, reads, truncation and close happen on one thread (the owner's);
only :meth:`dup_fd` + ``fsync`` may run elsewhere.
"""
from __future__ import annotations

import os
import struct
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from core.errors import StorageError
from core.index import OffsetIndex, TimeIndex
from wire.records import LOG_OVERHEAD, BatchHeader, CorruptBatchError, read_batch_header, validate_batch

# baseOffset int64 | batchLength int32 | leaderEpoch int32 | magic int8 | crc uint32 |
# attributes int16 | lastOffsetDelta int32: enough to walk batches and know their offsets.
_PEEK = struct.Struct(">qiibIhi")
PEEK_SIZE = _PEEK.size  # 27
_RECOVER_CHUNK = 8 * 1024 * 1024


class FileRange:
    """Stored bytes not read yet: ``length`` bytes at ``position`` of a segment file.

    A plaintext Kafka connection hands them to the socket with ``os.sendfile`` (no copy through
    Python); anything else reads them with :meth:`read`. Valid only until control returns to the
    reactor: segments are closed (and their descriptors reused) on the reactor thread only, so a
    range is sent or read before that, never kept."""

    __slots__ = ("fd", "position", "length")

    def __init__(self, fd: int, position: int, length: int):
        self.fd, self.position, self.length = fd, position, length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)

    def __repr__(self) -> str:
        return f"<FileRange fd={self.fd} {self.position}+{self.length}>"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where one batch sits in a segment."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class RecoverInfo:
    valid_bytes: int
    truncated_bytes: int
    batches: int
    reason: str | None  # why the tail was cut, if it was


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096):
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = segment_name(base_offset)
        self.log_path = self.directory / f"{stem}.log"
        self.index_path = self.directory / f"{stem}.index"
        self.timeindex_path = self.directory / f"{stem}.timeindex"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset  # one past the last offset stored here
        self.max_timestamp = -1
        self.first_timestamp: int | None = None  # max timestamp of the first batch (segment.ms)
        self._bytes_since_index = index_interval_bytes  # index the first batch
        self.offset_index = OffsetIndex(self.index_path, base_offset)
        self.time_index = TimeIndex(self.timeindex_path, base_offset)

    # --- opening ------------------------------------------------------------------
    def load(self, *, recover: bool) -> RecoverInfo | None:
        """Bring in-memory state in line with the files.

        With ``recover`` the whole log file is validated batch by batch (length, magic,
        CRC-32C, offsets increasing) and cut after the last good batch; indexes are
        rebuilt. Without it, the indexes are loaded, validated and used to find the tail
        cheaply; a damaged or missing index is rebuilt from the log.
        """
        if recover:
            return self._scan(validate=True)
        if self.size == 0:
            self._scan(validate=False)
            return None
        off = OffsetIndex.load(self.index_path, self.base_offset, OffsetIndex.validator(self.base_offset, self.size))
        if off is None:
            self._scan(validate=False)
            return None
        self.offset_index = off
        last = self._last_batch_from(off.values[-1] if len(off) else 0)
        self.next_offset = last.last_offset + 1 if last else self.base_offset
        tim = TimeIndex.load(self.timeindex_path, self.base_offset, TimeIndex.validator(self.base_offset, self.next_offset))
        if tim is None:
            self._scan(validate=False)
            return None
        self.time_index = tim
        self._load_timestamps()
        return None

    def _scan(self, *, validate: bool) -> RecoverInfo:
        """Walk every batch from the start, rebuild both indexes, cut a bad tail."""
        offset_keys, offset_vals, time_keys, time_vals = [], [], [], []
        position, batches, since_index = 0, 0, self.index_interval_bytes
        expected = self.base_offset
        max_ts, first_ts, last_indexed_ts = -1, None, None
        reason = None
        buf, buf_start = b"", 0
        while position < self.size:
            rel = position - buf_start
            if len(buf) - rel < PEEK_SIZE:
                buf, buf_start, rel = os.pread(self.fd, _RECOVER_CHUNK, position), position, 0
            if len(buf) - rel < PEEK_SIZE:
                reason = f"torn batch header at position {position}"
                break
            base, length = _PEEK.unpack_from(buf, rel)[:2]
            size = length + LOG_OVERHEAD
            if length < 49 or position + size > self.size:
                reason = f"batch at position {position} claims {size} bytes, file has {self.size - position}"
                break
            if len(buf) - rel < size:
                buf, buf_start, rel = os.pread(self.fd, max(size, _RECOVER_CHUNK), position), position, 0
            try:
                header = validate_batch(buf, rel) if validate else read_batch_header(buf, rel)
            except CorruptBatchError as exc:
                reason = f"corrupt batch at position {position}: {exc.reason}"
                break
            if base < expected:
                reason = f"batch at position {position} has offset {base}, expected at least {expected}"
                break
            max_ts = max(max_ts, header.max_timestamp)
            if first_ts is None:
                first_ts = header.max_timestamp
            if since_index >= self.index_interval_bytes:
                offset_keys.append(base)
                offset_vals.append(position)
                since_index = 0
                if last_indexed_ts is None or max_ts > last_indexed_ts:
                    time_keys.append(max_ts)
                    time_vals.append(base)
                    last_indexed_ts = max_ts
            since_index += size
            expected = header.last_offset + 1
            position += size
            batches += 1
        truncated = self.size - position
        if truncated:
            os.ftruncate(self.fd, position)
            self.size = position
        self.next_offset = expected
        self.max_timestamp, self.first_timestamp = max_ts, first_ts
        self._bytes_since_index = since_index if batches else self.index_interval_bytes
        self.offset_index.rewrite(offset_keys, offset_vals)
        self.time_index.rewrite(time_keys, time_vals)
        return RecoverInfo(position, truncated, batches, reason)

    def _last_batch_from(self, position: int) -> BatchPosition | None:
        """Walk the tail after the last index entry: the last batch and the tail's max timestamp."""
        last, tail_max = None, -1
        for bp in self.iter_positions(position):
            last = bp
            tail_max = max(tail_max, read_batch_header(os.pread(self.fd, 61, bp.position)).max_timestamp)
        self._tail_max_timestamp = tail_max
        if last is not None:
            self._bytes_since_index = last.position + last.size - position
        return last

    def _load_timestamps(self) -> None:
        indexed = self.time_index.keys[-1] if len(self.time_index) else -1
        self.max_timestamp = max(indexed, self._tail_max_timestamp)
        if self.size:
            self.first_timestamp = read_batch_header(os.pread(self.fd, 61, 0)).max_timestamp

    # --- appending ----------------------------------------------------------------
    def append(self, data, batches: list[tuple[int, BatchHeader]], first_offset: int | None,
               size: int | None = None) -> None:
        """Append ``data`` (whole batches whose offsets are already assigned), or with ``size``
        given, the list of buffers whose concatenation they are (one writev).

        ``batches`` lists (position within ``data``, header as parsed before offsets were
        assigned); ``first_offset`` is the base offset given to the first batch, the
        following ones being contiguous. None means the headers' own base offsets are
        the stored ones (a replica's batches, which may have compaction gaps between them).
        """
        start = self.size
        try:
            if size is None:
                size = len(data)
                written = os.write(self.fd, data)
            else:
                written = os.writev(self.fd, data)
        except OSError as exc:
            self._refuse(start, exc.strerror or str(exc))
        if written != size:  # a short write on a regular file means the disk is full
            self._refuse(start, f"short write, {written} of {size} bytes (file system full)")
        offset = first_offset
        for pos, header in batches:
            if first_offset is None:
                offset = header.base_offset
            self._track(start + pos, offset, header.size, header.max_timestamp)
            offset += header.last_offset_delta + 1
        self.size = start + size
        self.next_offset = offset

    def append_batch(self, buffers, size: int, first_offset: int, last_offset_delta: int, max_timestamp: int) -> None:
        """Append one whole batch given as the buffers it is the concatenation of (one writev)."""
        start = self.size
        try:
            written = os.writev(self.fd, buffers)
        except OSError as exc:
            self._refuse(start, exc.strerror or str(exc))
        if written != size:
            self._refuse(start, f"short write, {written} of {size} bytes (file system full)")
        self._track(start, first_offset, size, max_timestamp)
        self.size = start + size
        self.next_offset = first_offset + last_offset_delta + 1

    def _refuse(self, start: int, why: str) -> None:
        """Cut what a failed append left (a torn batch must not stay for the next one to follow)."""
        try:
            os.ftruncate(self.fd, start)
        except OSError:  # recovery at the next start-up cuts the torn tail instead
            pass
        raise StorageError(f"cannot append to {self.log_path}: {why}; free space on its file system "
                           "(the broker refuses writes until there is)")

    def _track(self, position: int, offset: int, size: int, max_timestamp: int) -> None:
        """Timestamps and the sparse indexes for a batch just written at ``position``."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if self.first_timestamp is None:
            self.first_timestamp = max_timestamp
        if self._bytes_since_index >= self.index_interval_bytes:
            # Both indexes grow at the same sparse points; the time entry carries the
            # running maximum, so every batch up to ``offset`` is at or below it.
            self.offset_index.append(offset, position)
            self.time_index.append(self.max_timestamp, offset)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    # --- reading ------------------------------------------------------------------
    def iter_positions(self, position: int = 0, end: int | None = None):
        """Yield every batch from ``position`` (a batch boundary) to ``end`` (default: size)."""
        end = self.size if end is None else end
        while position + PEEK_SIZE <= end:
            base, length, epoch, _magic, _crc, _attr, delta = _PEEK.unpack(os.pread(self.fd, PEEK_SIZE, position))
            size = length + LOG_OVERHEAD
            yield BatchPosition(position, base, base + delta, size, epoch)
            position += size

    def find(self, offset: int) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset``."""
        for bp in self.iter_positions(self.offset_index.lookup(offset)):
            if bp.last_offset >= offset:
                return bp
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int, *, min_one: bool) -> bytes:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (see :meth:`locate`)."""
        position, length = self.locate(offset, max_bytes, max_offset, min_one=min_one)
        return os.pread(self.fd, length, position) if length else b""

    def read_range(self, offset: int, max_bytes: int, max_offset: int, *, min_one: bool) -> FileRange | bytes:
        """What :meth:`read` returns, as a :class:`FileRange` (b"" when empty)."""
        position, length = self.locate(offset, max_bytes, max_offset, min_one=min_one)
        return FileRange(self.fd, position, length) if length else b""

    def locate(self, offset: int, max_bytes: int, max_offset: int, *, min_one: bool) -> tuple[int, int]:
        """(position, length) of whole batches from the one holding ``offset``, up to ``max_bytes``.

        Only batches starting below ``max_offset`` (the high watermark) count. With ``min_one``
        the first batch is taken whole even if it is larger than ``max_bytes`` (so a consumer
        can always make progress). Found from batch headers only, as Kafka's translateOffset
        does: the end is the last batch boundary within the limit, walked to from the nearest
        indexed batch below it (at most index.interval.bytes of headers), so no byte of the
        records themselves is read here."""
        first = self.find(offset)
        if first is None or first.base_offset >= max_offset:
            return 0, 0
        if first.size > max_bytes:
            return first.position, first.size if min_one else 0
        limit = min(first.position + max_bytes, self.size)
        if max_offset < self.next_offset:  # the high watermark is inside this segment
            limit = min(limit, self._position_of_first_at_or_after(max_offset))
        return first.position, self._last_boundary(first.position, limit) - first.position

    def _position_of_first_at_or_after(self, offset: int) -> int:
        for bp in self.iter_positions(self.offset_index.lookup(offset)):
            if bp.base_offset >= offset:
                return bp.position
        return self.size

    def _last_boundary(self, start: int, limit: int) -> int:
        """The end of the last whole batch at or before ``limit``, walking from ``start`` (a batch
        boundary) or from the indexed batch nearest below ``limit`` if that is further on."""
        positions = self.offset_index.values
        i = bisect_right(positions, limit)
        position = max(start, positions[i - 1] if i else 0)
        end = position
        for bp in self.iter_positions(position, limit):
            if bp.position + bp.size > limit:
                break
            end = bp.position + bp.size
        return end

    def read_all(self) -> bytes:
        return os.pread(self.fd, self.size, 0)

    def first_position_at_or_after_time(self, timestamp: int) -> BatchPosition | None:
        """The first batch whose max timestamp is >= ``timestamp``."""
        start = self.time_index.lookup(timestamp)
        position = 0 if start is None else self.offset_index.lookup(start)
        for bp in self.iter_positions(position):
            header = read_batch_header(os.pread(self.fd, 61, bp.position))
            if header.max_timestamp >= timestamp:
                return bp
        return None

    # --- changing -----------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding ``offset`` and every batch after it; return the bytes removed.

        As Kafka truncates a follower: batches wholly below ``offset`` stay. The cut is
        fsync'd before returning, so the caller may then forget what lay beyond it (leader
        epochs) without a crash bringing the removed batches back. The indexes lose their
        entries at or past the cut; the tail state comes from the last kept index entry
        onwards, as at load, instead of a rescan of the whole segment.
        """
        first_gone = self.find(offset)
        if first_gone is None:
            return 0
        cut = first_gone.position
        removed = self.size - cut
        os.ftruncate(self.fd, cut)
        os.fsync(self.fd)
        self.size = cut
        self.offset_index.truncate_entries(self.offset_index.entries_below_position(cut))
        self.time_index.truncate_entries(self.time_index.entries_below_offset(first_gone.base_offset))
        if cut == 0:
            self.next_offset = self.base_offset
            self.max_timestamp, self.first_timestamp = -1, None
            self._bytes_since_index = self.index_interval_bytes  # index the next first batch
        else:
            last = self._last_batch_from(self.offset_index.values[-1] if len(self.offset_index) else 0)
            self.next_offset = last.last_offset + 1
            self._load_timestamps()
        return removed

    def dup_fd(self) -> int:
        return os.dup(self.fd)

    def sync(self) -> None:
        os.fsync(self.fd)
        self.offset_index.sync()
        self.time_index.sync()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            path.unlink(missing_ok=True)

    @property
    def empty(self) -> bool:
        return self.size == 0

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, next_offset={self.next_offset})"
