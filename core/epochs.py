"""The leader-epoch checkpoint of one partition: which leader epoch began at which offset.

``<partition-dir>/leader-epoch-checkpoint``, text, as Kafka writes it::

    0              version
    2              number of entries
    0 0            epoch start_offset, one line per entry, epochs and offsets increasing
    3 1200

Replication uses it to find where a follower's log diverges from the leader's
(OffsetForLeaderEpoch): the end offset of an epoch is the start offset of the next one.
Every change is written whole with core.checkpoint.write_atomic, so a reader sees the old
list or the new one. Appends only mark a new epoch dirty (``persist=False``) and the log's flush
writes it, as Kafka has done since KAFKA-15046: three syncs on a partition's first append made
spreading messages over thousands of new queues slow. A kill -9 between an append and that
flush leaves a file that lacks the newest epoch; PartitionLog checks its last batch at start-up
and rebuilds the cache from the log then. The log keeps it in line with its own contents (see PartitionLog):
truncating the log truncates the cache from the end, moving the log start truncates it
from the start.

The owning log's thread calls everything except :meth:`persist_if_dirty` (the flush thread);
files are written under a lock from a snapshot taken under it, so an older list never lands
after a newer one.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterable

from core.checkpoint import write_atomic

FILE = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED = (-1, -1)


class LeaderEpochCache:
    def __init__(self, directory: Path):
        self.path = Path(directory) / FILE
        self._entries: list[tuple[int, int]] = []
        self._write_lock = threading.Lock()
        self.dirty = False  # changed since the file was last written (persist=False assigns)
        # False while the file is missing or unreadable: the owner rebuilds the list from the log.
        self.loaded = self._load()

    # --- file ---------------------------------------------------------------------
    def _load(self) -> bool:
        try:
            lines = self.path.read_text().split("\n")
        except (FileNotFoundError, UnicodeDecodeError):
            return False
        try:
            if int(lines[0]) != VERSION:
                return False
            count = int(lines[1])
            entries = [(int(e), int(s)) for e, s in (line.split() for line in lines[2:2 + count])]
        except (ValueError, IndexError):
            return False
        if len(entries) != count or not _well_ordered(entries):
            return False
        self._entries = entries
        return True

    def _persist(self) -> None:
        with self._write_lock:
            self.dirty = False  # before the snapshot: an assign racing this write marks it again
            entries = list(self._entries)
            body = "".join(f"{epoch} {start}\n" for epoch, start in entries)
            try:
                write_atomic(self.path, f"{VERSION}\n{len(entries)}\n{body}".encode())
            except BaseException:
                self.dirty = True
                raise
            self.loaded = True

    def persist_if_dirty(self) -> None:
        """Write what appends assigned (the flush calls this). A log with one epoch and no file
        yet gets none: start-up reads that epoch from the log's first batch (PartitionLog), and
        creating a file per new log cost about half a millisecond of CPU each, 10,000 of them in
        one group commit when messages first spread over 10,000 new queues."""
        if not self.dirty:
            return
        if self.loaded or len(self._entries) > 1:
            self._persist()
        else:
            self.dirty = False

    # --- state --------------------------------------------------------------------
    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else -1

    def __len__(self) -> int:
        return len(self._entries)

    # --- changing -----------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; return whether anything changed.

        An epoch at or below the latest one is ignored (epochs only grow along a log).
        ``persist=False`` leaves the file to the next :meth:`persist_if_dirty`.
        """
        return self.assign_many(((epoch, start_offset),), persist=persist)

    def assign_many(self, pairs: Iterable[tuple[int, int]], *, persist: bool = True) -> bool:
        """:meth:`assign` each (epoch, start_offset) in order, writing the file once."""
        changed = False
        for epoch, start in pairs:
            if epoch < 0 or epoch <= self.latest_epoch:
                continue
            # An earlier epoch starting at or after this one's start never held a record
            # (or its records were truncated without telling us): its range is empty.
            while self._entries and self._entries[-1][1] >= start:
                self._entries.pop()
            self._entries.append((epoch, start))
            changed = True
        if changed:
            if persist:
                self._persist()
            else:
                self.dirty = True
        return changed

    def truncate_from_end(self, offset: int) -> bool:
        """Forget the epochs that start at or after ``offset`` (the log was cut there)."""
        keep = len(self._entries)
        while keep and self._entries[keep - 1][1] >= offset:
            keep -= 1
        if keep == len(self._entries):
            return False
        del self._entries[keep:]
        self._persist()
        return True

    def truncate_from_start(self, offset: int) -> bool:
        """The log now starts at ``offset``: the epoch holding it starts there, earlier ones go."""
        holding = 0  # index of the last entry starting at or before offset
        while holding + 1 < len(self._entries) and self._entries[holding + 1][1] <= offset:
            holding += 1
        if not self._entries or (holding == 0 and self._entries[0][1] >= offset):
            return False
        epoch, start = self._entries[holding]
        self._entries[: holding + 1] = [(epoch, max(start, offset))]
        self._persist()
        return True

    def clear(self) -> bool:
        if not self._entries:
            return False
        self._entries.clear()
        self._persist()
        return True

    # --- OffsetForLeaderEpoch -------------------------------------------------------
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower asking where ``requested_epoch`` ended here.

        The latest epoch ends at the log end offset. An older one is answered with the
        largest known epoch at or below it and the start offset of the epoch after that.
        An epoch below every known one, above the latest, or an empty cache: (-1, -1).
        """
        if not self._entries or requested_epoch < 0:
            return UNDEFINED
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        floor = None
        for i, (epoch, _start) in enumerate(self._entries):
            if epoch > requested_epoch:
                break
            floor = i
        if floor is None or floor + 1 == len(self._entries):
            return UNDEFINED  # below the first epoch, or above the latest
        return self._entries[floor][0], self._entries[floor + 1][1]

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path.parent.name}, {self._entries})"


def _well_ordered(entries: list[tuple[int, int]]) -> bool:
    return all(e0 < e1 and s0 <= s1 for (e0, s0), (e1, s1) in zip(entries, entries[1:])) and all(
        e >= 0 and s >= 0 for e, s in entries)
