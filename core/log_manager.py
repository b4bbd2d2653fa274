"""All partition logs of one broker, in one data directory.

``<data-dir>/``::

    metadata.json           topics (core.metadata, single-node mode), with metadata.journal
    <topic>-<partition>/    one PartitionLog each (core.log)
    .clean-shutdown         present only between a clean shutdown and the next start-up

When ``.clean-shutdown`` is missing at start-up the broker died: every partition's
unflushed tail is scanned and repaired (see PartitionLog). The marker is removed as soon
as the logs are open, so a crash after that is detected next time.

Thread-safety: everything runs on the owner's thread except :meth:`flush_dirty`, which is
meant for a worker thread and touches only what PartitionLog.flush allows.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from core.checkpoint import fsync_dir
from core.cleaner import compact
from core.config import TopicConfig
from core.errors import InvalidPartitionsError, UnknownTopicError
from core.hw_checkpoint import HighWatermarkCheckpoint, read_high_watermarks
from core.log import PartitionLog
from core.metadata import MetadataStore, TopicMetadata

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".clean-shutdown"
# Logs due in one group commit from which one syncfs beats an fsync each. Measured on a 2-core VM
# with 1 KB appends: 8 fsyncs cost about 0.8 ms of CPU and 2 ms, one syncfs 0.2 to 0.3 ms of CPU
# and 0.6 ms, or 1.7 ms while another process kept dirtying files on the same file system; at 4
# the syncfs still cost less CPU but took longer than the fsyncs next to such a writer.
SYNCFS_FROM = 8


def _load_syncfs():
    """syncfs(2) through libc (Linux; the os module has no binding), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        call = libc.syncfs
    except (OSError, AttributeError):
        return None

    def syncfs(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if call(fd) != 0:  # ctypes drops the GIL around the call, as os.fsync does
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs of {directory}: {os.strerror(err)}")
        finally:
            os.close(fd)
    return syncfs


_syncfs = _load_syncfs()


@dataclass(frozen=True)
class StartupInfo:
    partitions: int
    recovered_segments: int
    truncated_bytes: int
    clean_shutdown: bool
    seconds: float


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogManager:
    def __init__(self, data_dir: Path, store: MetadataStore, *, clock: Callable[[], float] = time.time,
                 node_id: int = 0, max_partitions: int = 0):
        self.data_dir = Path(data_dir)
        self.max_partitions = max_partitions  # 0: no limit; each open partition holds a file descriptor
        self.store = store
        self.node_id = node_id  # in cluster mode only the partitions assigned to this broker are opened here
        self.replicated = False  # cluster mode: every log's high watermark is moved by replication
        self.clock = clock
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._dirty: set[PartitionLog] = set()  # appended to since the last group commit (flush_dirty)
        # told (on the owner's thread) when a log is written while none waited for a group commit:
        # the broker's commit timer runs only while there is something to flush
        self.on_dirty: Callable[[], None] | None = None
        self._cleaned_upto: dict[tuple[str, int], int] = {}
        self._clean_start = True
        self.hw_checkpoint = HighWatermarkCheckpoint(self.data_dir)  # for readers outside the process

    # --- life cycle -----------------------------------------------------------------
    def startup(self) -> StartupInfo:
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.data_dir.glob("*-delete"):  # a topic deletion cut short by a crash
            shutil.rmtree(leftover, ignore_errors=True)
        marker = self.data_dir / CLEAN_SHUTDOWN
        clean = marker.exists() or not any(self._partition_dirs())
        recovered = truncated = 0
        for topic in self.store.topics().values():
            for partition in range(topic.partitions):
                if not topic.is_replica(partition, self.node_id):
                    continue
                plog = self._open(topic, partition, recover=not clean)
                recovered += plog.recovery_info.recovered_segments
                truncated += plog.recovery_info.truncated_bytes
                for reason in plog.recovery_info.reasons:
                    log.warning("log repaired: %s %s", plog.directory.name, reason)
        if self.replicated:  # a replica's HW comes back from the checkpoint, not from its log end
            saved = read_high_watermarks(self.data_dir) or {}
            for (name, partition), plog in self.logs.items():
                plog.restore_high_watermark(saved.get(name, {}).get(partition, 0))
        marker.unlink(missing_ok=True)
        fsync_dir(self.data_dir)
        return StartupInfo(len(self.logs), recovered, truncated, clean, time.monotonic() - started)

    def shutdown(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.hw_checkpoint.write(self.logs)  # closed logs are flushed: their final high watermarks
        self.logs.clear()
        (self.data_dir / CLEAN_SHUTDOWN).write_bytes(b"")
        fsync_dir(self.data_dir)

    def _partition_dirs(self) -> Iterator[Path]:
        if not self.data_dir.is_dir():
            return iter(())
        return (p for p in self.data_dir.iterdir() if p.is_dir() and "-" in p.name)

    def _open(self, topic: TopicMetadata, partition: int, *, recover: bool = False) -> PartitionLog:
        directory = self.data_dir / partition_dir_name(topic.name, partition)
        plog = PartitionLog(directory, TopicConfig.from_strings(topic.configs), clock=self.clock, recover=recover)
        plog.replicated = self.replicated
        plog.dirty = self._dirty
        plog.became_dirty = self._became_dirty
        self.logs[(topic.name, partition)] = plog
        self.hw_checkpoint.layout_changed = True
        return plog

    # --- topics ---------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog:
        plog = self.logs.get((topic, partition))
        if plog is None:
            raise UnknownTopicError(f"partition {topic}-{partition} does not exist")
        return plog

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
                     **placement) -> TopicMetadata:
        """``placement``: cluster-mode arguments of MetadataStore.create_topic (replicas, leadership)."""
        self._check_partition_budget(partitions)
        topic = self.store.create_topic(name, partitions, configs, **placement)
        for partition in range(topic.partitions):
            if topic.is_replica(partition, self.node_id):
                self._open(topic, partition)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.store.delete_topic(name)
        for partition in range(topic.partitions):
            self.drop_partition(name, partition)

    def open_partition(self, topic: TopicMetadata, partition: int) -> PartitionLog:
        """Cluster mode: a partition newly assigned to this broker (its log may be left from before)."""
        return self.logs.get((topic.name, partition)) or self._open(topic, partition)

    def drop_partition(self, name: str, partition: int) -> None:
        """Close and delete one partition's log (its topic was deleted, or it moved to other brokers)."""
        plog = self.logs.pop((name, partition), None)
        if plog is None:
            return
        plog.dropped = True
        self._dirty.discard(plog)
        self.hw_checkpoint.layout_changed = True
        # Rename first so a crash mid-delete cannot leave a half-deleted log that looks live.
        graveyard = plog.directory.with_name(f"{plog.directory.name}.{uuid.uuid4().hex}-delete")
        for segment in plog.segments:
            segment.close()
        os.replace(plog.directory, graveyard)
        shutil.rmtree(graveyard, ignore_errors=True)

    def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> TopicMetadata:
        topic = self.store.alter_topic_configs(name, changes)
        config = TopicConfig.from_strings(topic.configs)
        for partition in range(topic.partitions):
            plog = self.logs.get((name, partition))
            if plog is not None:
                plog.config = config
                self._dirty.add(plog)  # a new flush policy may make what it holds due
                self._became_dirty()
        return topic

    def _became_dirty(self) -> None:
        if self.on_dirty is not None:
            self.on_dirty()

    def _check_partition_budget(self, adding: int) -> None:
        if not self.max_partitions or adding <= 0:
            return
        have = self.store.partition_total()
        if have + adding > self.max_partitions:
            raise InvalidPartitionsError(
                f"{adding} more partition(s) would make {have + adding}, above this broker's limit of "
                f"{self.max_partitions} (each keeps a file open); raise --max-partitions and the open-file limit")

    def add_partitions(self, name: str, total: int) -> TopicMetadata:
        before = self.store.get_topic(name)
        self._check_partition_budget(total - (before.partitions if before else 0))
        topic = self.store.set_partitions(name, total)
        for partition in range(before.partitions if before else 0, total):
            if topic.is_replica(partition, self.node_id):
                self._open(topic, partition)
        return topic

    # --- background duties ----------------------------------------------------------
    @property
    def has_dirty(self) -> bool:
        """Whether a log was written since the last group commit (or is due later)."""
        return bool(self._dirty)

    def flush_dirty(self, seen: list | None = None) -> int:
        """fsync every log that its flush policy says is due (group commit); return how many.
        ``seen``: gets every log written since the last pass (those whose ends may have moved).

        With many logs due at once (messages spread over thousands of queues) one syncfs(2) of
        the data directory's file system replaces an fsync per log: it costs about what one
        fsync does, where a thousand fsyncs cost a thousand journal commits."""
        now = self.clock()
        due = []
        dirty = self._dirty
        written = list(dirty)  # the logs written since the last pass, not every log (10,000 queues)
        if seen is not None:
            seen.extend(written)
        for plog in written:
            dirty.discard(plog)  # before looking: an append from here on marks it again
            if plog.needs_flush(now):
                due.append(plog)
            elif plog.next_offset > plog.flushed_offset and plog.config.flushes_by_itself:
                dirty.add(plog)  # due later (flush.messages / flush.ms not reached yet)
        try:
            if len(due) >= SYNCFS_FROM and _syncfs is not None:
                ends = [(plog, plog.next_offset) for plog in due]  # read before the sync, as PartitionLog.flush does
                _syncfs(self.data_dir)
                for plog, end in ends:
                    plog.flushed(end)
            else:
                for plog in due:
                    plog.flush()
        except BaseException:
            dirty.update(plog for plog in due if plog.next_offset > plog.flushed_offset)  # the next pass retries
            raise
        self.hw_checkpoint.note_flushed(due)
        # throttled: at most once a second, when changed; a replicated log's value moves without a flush
        self.hw_checkpoint.maybe_write(self.logs, incremental=not self.replicated)
        return len(due)

    def maintenance(self) -> None:
        """Roll by age, apply retention, compact: the periodic housekeeping of every log."""
        for key, plog in list(self.logs.items()):
            plog.maybe_roll()
            deleted = plog.apply_retention()
            if deleted:
                log.info("retention deleted %d segment(s) of %s; log start offset now %d",
                         deleted, plog.directory.name, plog.log_start_offset)
            if plog.config.compact and plog.active.base_offset > self._cleaned_upto.get(key, -1):
                info = compact(plog)
                self._cleaned_upto[key] = plog.active.base_offset
                if info.records_removed:
                    log.info("compacted %s: %d record(s) removed, %d -> %d bytes", plog.directory.name,
                             info.records_removed, info.bytes_before, info.bytes_after)
