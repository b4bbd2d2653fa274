"""Opening a partition's directory: which segments make its log, and what a crash left to cut.

A clean shutdown leaves every segment whole. After a crash, the segments from the recovery
point on (the first that may hold data never fsync'd) are scanned batch by batch and cut at
the first torn or corrupt batch; a damaged segment ends the log, and every segment after it
is removed (what follows cannot be trusted to be contiguous). Leftovers of an interrupted
clean or swap (.cleaned, .swap, .tmp, .deleted) are dropped: the original stands. The leader
epochs can be rebuilt from the batches when their checkpoint is missing or behind.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.checkpoint import read_int, write_int
from core.segment import LogSegment, RecoverInfo

LOG_START_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
_LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".tmp", ".deleted")


@dataclass(frozen=True, slots=True)
class LogRecoveryInfo:
    segments: int
    recovered_segments: int
    truncated_bytes: int
    reasons: tuple[str, ...]


def open_segments(directory: Path, recover: bool,
                  new_segment: Callable[[int], LogSegment]) -> tuple[list[LogSegment], LogRecoveryInfo]:
    """The log's segments in offset order (at least one), loaded; ``recover``: after a crash."""
    for path in directory.iterdir():
        if path.suffix in _LEFTOVER_SUFFIXES:
            path.unlink()
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    for path in directory.glob("*index"):
        if path.stem.isdigit() and int(path.stem) not in bases:
            path.unlink()
    recovery_point = read_int(directory / RECOVERY_POINT_FILE, 0)
    segments: list[LogSegment] = []
    truncated, recovered, reasons = 0, 0, []
    for i, base in enumerate(bases):
        segment = new_segment(base)
        later = bases[i + 1:]
        needs_recovery = recover and (not later or later[0] > recovery_point)
        info: RecoverInfo | None = segment.load(recover=needs_recovery)
        if segments and segment.base_offset < segments[-1].next_offset:
            reasons.append(f"{segment.log_path.name} overlaps the segment before it")
            later = [base] + later
            segment.close()
        else:
            segments.append(segment)
            if info is not None:
                recovered += 1
                truncated += info.truncated_bytes
                if info.reason:
                    reasons.append(f"{segment.log_path.name}: {info.reason}")
            if info is None or not info.reason or not later:
                continue
        for base_after in later:  # the damage ends the log
            doomed = new_segment(base_after)
            truncated += doomed.size
            doomed.delete()
        reasons.append(f"removed {len(later)} segment(s) from the damage onwards")
        break
    if not segments:
        segments.append(new_segment(read_int(directory / LOG_START_FILE, 0)))
    if recover:
        for segment in segments[-max(recovered, 1):]:
            segment.sync()
        write_int(directory / RECOVERY_POINT_FILE, segments[-1].base_offset)
    return segments, LogRecoveryInfo(len(segments), recovered, truncated, tuple(reasons))


def last_batch_epoch(active: LogSegment) -> int:
    """The leader epoch of the last batch (-1 for an empty segment): a scan from the last index entry."""
    if active.empty:
        return -1
    last = None
    for last in active.iter_positions(active.offset_index.lookup(active.next_offset)):
        pass
    return last.leader_epoch if last is not None else -1


def epochs_from_batches(segments: list[LogSegment], last_epoch: int | None = None) -> list[tuple[int, int]]:
    """(epoch, first offset) of every leader epoch, from the epochs stamped in the batches: for a
    missing or unreadable epoch checkpoint (a log with one epoch has none). ``last_epoch``: the
    last batch's (:func:`last_batch_epoch`), which spares the scan of the active segment when it
    equals its first batch's."""
    firsts = [next(s.iter_positions(), None) for s in segments]
    found: list[tuple[int, int]] = []
    for i, segment in enumerate(segments):
        following = firsts[i + 1].leader_epoch if i + 1 < len(firsts) and firsts[i + 1] is not None else (
            last_epoch if i + 1 == len(firsts) else None)
        if firsts[i] is not None and firsts[i].leader_epoch == following:
            positions = [firsts[i]]  # epochs never decrease along a log: none begins inside
        else:
            positions = segment.iter_positions()
        for bp in positions:
            if bp.leader_epoch > (found[-1][0] if found else -1):
                found.append((bp.leader_epoch, bp.base_offset))
    return found
