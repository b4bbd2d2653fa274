"""Sparse indexes of a segment: offset -> file position, and timestamp -> offset.

On disk both are flat arrays of fixed-size big-endian entries, appended as the segment
grows (one entry per ``index.interval.bytes`` of log, not per batch):

* ``<base>.index``: ``relative_offset int32 | position uint32`` (8 bytes). The relative
  offset is the base offset of a batch minus the segment's base offset; the position is
  where that batch starts in the ``.log`` file.
* ``<base>.timeindex``: ``timestamp int64 | relative_offset int32`` (12 bytes): the
  largest timestamp seen so far in the segment and the base offset of the batch that
  carried it. Timestamps are non-decreasing along the file.

Indexes are a cache of what the ``.log`` says: they are rebuilt from it whenever they
are missing, torn, or disagree with it (see :meth:`SparseIndex.load`). New entries are
gathered in memory and written (open, append, close) every ``WRITE_EVERY`` entries and when
the segment is synced (a roll) or closed: no descriptor stays open per index, so ten
thousand queues do not need thirty thousand descriptors, and an entry costs no system call.
After a crash the active segment is scanned and its indexes rebuilt anyway; a reader in
another process (spark.logfiles) that finds the newest entries missing scans a little more.
In memory an index is two ``array`` columns searched with ``bisect``. Not thread-safe: the
owning log's thread does everything.
"""
from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path


WRITE_EVERY = 64  # entries gathered in memory before they are appended to the file


class SparseIndex:
    """Common part of the two indexes: two sorted int64 columns and an append-only file."""

    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")
        self._pending = bytearray()  # packed entries not yet in the file

    # --- encoding, per index type -------------------------------------------------
    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _unpack(self, raw: bytes) -> tuple[int, int]:
        raise NotImplementedError

    # --- file handling ------------------------------------------------------------
    @classmethod
    def load(cls, path: Path, base_offset: int, valid) -> "SparseIndex | None":
        """Read an index file; return None when it is missing or fails ``valid(keys, values)``.

        A torn final entry (the file length is not a multiple of the entry size) also
        counts as damage: the caller rebuilds the index from the log.
        """
        index = cls(path, base_offset)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        size = cls.entry.size
        if len(raw) % size:
            return None
        for i in range(0, len(raw), size):
            key, value = index._unpack(raw[i : i + size])
            index.keys.append(key)
            index.values.append(value)
        if not valid(index.keys, index.values):
            return None
        return index

    def write_pending(self) -> None:
        """Append the entries gathered since the last write to the file (created if need be)."""
        if not self._pending:
            return
        data = bytes(self._pending)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            before = os.fstat(fd).st_size
            written = 0
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
            except OSError:  # disk full: keep the entries for the next write, no torn entry in the file
                os.ftruncate(fd, before)
                raise
        finally:
            os.close(fd)
        del self._pending[:len(data)]

    def rewrite(self, keys, values) -> None:
        """Replace the whole file (used by rebuilds and truncation)."""
        self._pending.clear()
        self.keys = array("q", keys)
        self.values = array("q", values)
        data = b"".join(self._pack(k, v) for k, v in zip(self.keys, self.values))
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def _append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self._pending += self._pack(key, value)
        if len(self._pending) >= WRITE_EVERY * self.entry.size:
            try:
                self.write_pending()
            except OSError:  # the batch is in the log already: the entries wait for the next write
                pass

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        if count < len(self.keys):
            self.rewrite(self.keys[:count], self.values[:count])

    def sync(self) -> None:
        self.write_pending()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # no entry yet
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.write_pending()

    def __len__(self) -> int:
        return len(self.keys)


class OffsetIndex(SparseIndex):
    """Absolute batch base offset -> position of that batch in the segment's log."""

    entry = struct.Struct(">iI")

    def _pack(self, key: int, value: int) -> bytes:
        return self.entry.pack(key - self.base_offset, value)

    def _unpack(self, raw: bytes) -> tuple[int, int]:
        rel, pos = self.entry.unpack(raw)
        return rel + self.base_offset, pos

    def append(self, offset: int, position: int) -> None:
        if self.keys and offset <= self.keys[-1]:
            return
        self._append(offset, position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before ``offset`` (0 if none)."""
        i = bisect_right(self.keys, offset)
        return self.values[i - 1] if i else 0

    def entries_below_position(self, position: int) -> int:
        return bisect_left(self.values, position)

    @staticmethod
    def validator(base_offset: int, log_size: int):
        def valid(keys, values) -> bool:
            last_k, last_v = base_offset - 1, -1
            for k, v in zip(keys, values):
                if k <= last_k or v <= last_v or v >= max(log_size, 1):
                    return False
                last_k, last_v = k, v
            return True

        return valid


class TimeIndex(SparseIndex):
    """Largest timestamp so far -> base offset of the batch that carried it."""

    entry = struct.Struct(">qi")

    def _pack(self, key: int, value: int) -> bytes:
        return self.entry.pack(key, value - self.base_offset)

    def _unpack(self, raw: bytes) -> tuple[int, int]:
        ts, rel = self.entry.unpack(raw)
        return ts, rel + self.base_offset

    def append(self, timestamp: int, offset: int) -> None:
        if self.keys and timestamp <= self.keys[-1]:
            return
        self._append(timestamp, offset)

    def lookup(self, timestamp: int) -> int | None:
        """An offset from which a scan for the first timestamp >= ``timestamp`` may start.

        Every batch before the returned offset has a max timestamp below ``timestamp``;
        None means "start at the segment's beginning".
        """
        i = bisect_left(self.keys, timestamp)
        return self.values[i - 1] if i else None

    def entries_below_offset(self, offset: int) -> int:
        return bisect_left(self.values, offset)  # values (offsets) increase along the file

    @staticmethod
    def validator(base_offset: int, next_offset: int):
        def valid(keys, values) -> bool:
            last_t, last_o = None, base_offset - 1
            for t, o in zip(keys, values):
                if (last_t is not None and t <= last_t) or o <= last_o or o >= next_offset:
                    return False
                last_t, last_o = t, o
            return True

        return valid
