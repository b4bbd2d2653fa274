"""High watermarks for readers outside the broker process: ``<data-dir>/high-watermarks.json``.

A partition's high watermark lives in the broker's memory (core.log): a process that reads
the segment files directly (the Spark data source in ``spark/``) cannot see it, and must not
read past it: beyond it lie records that are not yet fsync'd, or a batch still being
written. Like Kafka's ``replication-offset-checkpoint``, the broker therefore writes every
partition's high watermark to one small file, atomically (temp file + rename, see
core.checkpoint), so a reader always sees a whole file::

    {"version": 1, "written_ms": 1700000000000,
     "high_watermarks": {"orders": {"0": 1200, "1": 1187}}}

The value written is each log's *flushed* offset: everything below it is on disk and
fsync'd, so it is never ahead of the high watermark Kafka clients see (equal to it under the
default ``flush.messages=1``) and never moves backwards while the broker runs. The file is
written at most once per ``interval`` and only when a value changed (from the group-commit
pass, see LogManager.flush_dirty), and once more at a clean shutdown. A reader may lag the
broker by that interval; it never reads too far.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Mapping

from core.checkpoint import write_atomic

FILE = "high-watermarks.json"
VERSION = 1
INTERVAL_S = 1.0

HighWatermarks = dict[str, dict[int, int]]


def snapshot(logs: Mapping[tuple[str, int], object]) -> HighWatermarks:
    """{topic: {partition: flushed offset}} of ``logs`` ((topic, partition) -> PartitionLog).

    Safe on the flush thread: it only reads ``flushed_offset``, which that thread itself
    raises, and never the ``high_watermark`` property (which updates a cache).
    """
    out: HighWatermarks = {}
    for (topic, partition), plog in list(logs.items()):
        # a replicated log (cluster mode) also stops at its replicated HW: above it nothing is committed yet
        end = min(plog.flushed_offset, plog._hw) if plog.replicated else plog.flushed_offset
        out.setdefault(topic, {})[partition] = end
    return out


def write_high_watermarks(data_dir: Path, hws: HighWatermarks, *, now_ms: int | None = None) -> None:
    doc = {
        "version": VERSION,
        "written_ms": int(time.time() * 1000) if now_ms is None else now_ms,
        "high_watermarks": {t: {str(p): hw for p, hw in sorted(parts.items())} for t, parts in sorted(hws.items())},
    }
    write_atomic(Path(data_dir) / FILE, json.dumps(doc, separators=(",", ":")).encode())


def read_high_watermarks(data_dir: Path) -> HighWatermarks | None:
    """The checkpointed high watermarks, or None when the file does not exist (yet).

    Raises ValueError naming the file when it is not a checkpoint this code understands.
    """
    path = Path(data_dir) / FILE
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ValueError(f"{path} has version {doc.get('version') if isinstance(doc, dict) else None!r}; "
                         f"this reader understands version {VERSION}")
    return {topic: {int(p): int(hw) for p, hw in parts.items()} for topic, parts in doc["high_watermarks"].items()}


class HighWatermarkCheckpoint:
    """Writes the checkpoint of a set of logs, at most every ``interval`` seconds, when it changed.

    Used from one thread at a time (the flush pass, then shutdown after it has settled), except
    :attr:`layout_changed`, which the logs' owner sets when it opens or drops one.

    Without replication a log's value moves only when a flush moves it, so the owner reports
    the logs each flush covered (:meth:`note_flushed`) and ``incremental`` writes look at those
    alone: with 10,000 queues, listing every log once a second was a tenth of the broker's
    time. Any log opened or dropped since (``layout_changed``) brings back the full listing.
    """

    def __init__(self, data_dir: Path, *, interval: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.data_dir = Path(data_dir)
        self.interval = interval
        self.clock = clock
        self._last_written: HighWatermarks | None = None
        self._next_due = 0.0
        self._keys: dict[object, tuple[str, int]] = {}  # log -> (topic, partition), as of the last full listing
        self._flushed: set = set()  # logs flushed since the last write
        self.layout_changed = True

    def note_flushed(self, logs) -> None:
        self._flushed.update(logs)

    def maybe_write(self, logs: Mapping[tuple[str, int], object], *, incremental: bool = False) -> bool:
        now = self.clock()
        if now < self._next_due:
            return False
        self._next_due = now + self.interval
        return self.write(logs, incremental=incremental)

    def write(self, logs: Mapping[tuple[str, int], object], *, incremental: bool = False) -> bool:
        """Write now if anything changed since the last write; return whether it wrote."""
        flushed, self._flushed = self._flushed, set()
        if incremental and not self.layout_changed and self._last_written is not None:
            hws, changed = self._last_written, False
            for plog in flushed:
                key = self._keys.get(plog)
                if key is not None and hws[key[0]].get(key[1]) != plog.flushed_offset:
                    hws[key[0]][key[1]] = plog.flushed_offset
                    changed = True
            if not changed:
                return False
        else:
            self.layout_changed = False  # before listing: an open or drop from here on is seen next time
            listed = dict(logs)  # one listing for both (the owner may open a log meanwhile)
            self._keys = {plog: key for key, plog in listed.items()}
            hws = snapshot(listed)
            if hws == self._last_written:
                return False
        try:
            write_high_watermarks(self.data_dir, hws)
        except BaseException:
            self._last_written, self.layout_changed = None, True  # list everything again next time
            raise
        self._last_written = hws
        return True
