"""Idempotent producers: producer ids, and per-partition sequence tracking.

A producer with idempotence on gets a producer id and epoch from InitProducerId and numbers
its batches per partition (baseSequence). The broker remembers, per (producer id,
partition), the last five batches it stored; a retried batch that matches one of them is
acknowledged with the offsets it got the first time instead of being appended again, and a
batch that skips ahead is refused (OUT_OF_ORDER_SEQUENCE_NUMBER), as in Kafka.

Transactional producers also open a transaction on a partition with their first
transactional batch there; a control batch (the commit or abort marker the transaction
coordinator appends) closes it. The last stable offset (LSO) of a partition is the first
offset of its oldest open transaction, or the high watermark when none is open:
read_committed consumers read below it only. Every aborted transaction's offset range is
kept in ``<partition dir>/aborted-transactions`` (Kafka keeps a ``.txnindex`` per segment),
so a read_committed fetch can tell the client which producer's batches to drop.

Producer ids come from blocks reserved in ``<data-dir>/producer-id-block`` (the end of the
last block handed out), so ids stay unique across restarts. Sequence state and open
transactions are not written anywhere: after a restart they are rebuilt from the batch
headers at the tail of each log (markers found there also restore aborted-index lines a
crash may have lost). A transaction that began before the scanned tail segments and is
still open at a restart is not seen as open (its data becomes visible to read_committed);
with 1 GiB segments that takes a transaction longer than two full segments.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from core.checkpoint import read_int, write_int
from core.log import PartitionLog
from wire.records import BATCH_HEADER_SIZE, BatchHeader, decode_batch, parse_control_record, read_batch_header

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
MAX_EPOCH = 32767
TRACKED_BATCHES = 5  # max.in.flight.requests.per.connection a client may use with idempotence
REBUILD_SCAN_SEGMENTS = 2  # tail segments scanned after a restart
_BLOCK = 1000
_INT32_MAX = 2**31 - 1


class ProducerIdAllocator:
    FILE = "producer-id-block"

    def __init__(self, data_dir: Path, *, node_id: int = 0, stride: int = 1):
        self.path = Path(data_dir) / self.FILE
        self._lock = threading.Lock()
        self._next = self._end = read_int(self.path, 0)
        # cluster mode: broker n hands out n, n + stride, n + 2*stride, ... so no two brokers share an id
        self.node_id, self.stride = node_id, stride

    def allocate(self) -> int:
        with self._lock:
            if self._next >= self._end:
                self._end = self._next + _BLOCK
                write_int(self.path, self._end)  # reserve before handing out: no id is ever reused
            pid, self._next = self._next, self._next + 1
            return pid * self.stride + self.node_id


@dataclass(frozen=True, slots=True)
class _Batch:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=TRACKED_BATCHES))
    last_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One producer as DescribeProducers shows it."""
    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int  # -1 when no transaction is open here


class AbortedIndex:
    """The aborted transactions of one partition, one ``pid first last`` line each."""
    FILE = "aborted-transactions"

    def __init__(self, directory: Path | None):
        self.path = Path(directory) / self.FILE if directory is not None else None
        self.entries: list[AbortedTxn] = []
        if self.path is not None and self.path.exists():
            for line in self.path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and all(p.lstrip("-").isdigit() for p in parts):
                    self.entries.append(AbortedTxn(*map(int, parts)))

    def add(self, entry: AbortedTxn) -> None:
        if any(e.producer_id == entry.producer_id and e.first_offset == entry.first_offset for e in self.entries):
            return
        self.entries.append(entry)
        if self.path is not None:
            # Appended, not fsync'd: the marker is in the log, and a restart finds it there again.
            with open(self.path, "a") as f:
                f.write(f"{entry.producer_id} {entry.first_offset} {entry.last_offset}\n")

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with data in ``[start, end)``."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    """The verdict on one produced batch: append it, or answer ``error``, or it is ``duplicate_of``."""
    error: ErrorCode = ErrorCode.none
    duplicate_of: tuple[int, int] | None = None  # (first, last) offsets it was stored at


APPEND = SequenceCheck()


def _last_seq(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % (_INT32_MAX + 1)


class PartitionProducers:
    """Sequence state and open transactions of every producer writing to one partition."""

    def __init__(self, directory: Path | None = None) -> None:
        self.producers: dict[int, _Producer] = {}
        self.open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted = AbortedIndex(directory)

    def check(self, header: BatchHeader) -> SequenceCheck:
        pid = header.producer_id
        if pid < 0 or header.base_sequence < 0:
            return APPEND  # not an idempotent producer
        state = self.producers.get(pid)
        if state is None:
            return APPEND  # unknown producer (new, or its state aged out): accept, as Kafka does
        if header.producer_epoch < state.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if header.producer_epoch > state.epoch:
            return APPEND if header.base_sequence == 0 else SequenceCheck(ErrorCode.out_of_order_sequence_number)
        last = _last_seq(header)
        for batch in state.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last:
                return SequenceCheck(duplicate_of=(batch.first_offset, batch.last_offset))
        if state.batches and header.base_sequence != (state.batches[-1].last_seq + 1) % (_INT32_MAX + 1):
            return SequenceCheck(ErrorCode.out_of_order_sequence_number)
        return APPEND

    def last_sequence(self, producer_id: int) -> int:
        """The last sequence stored for a producer here (-1: none known): for error messages."""
        state = self.producers.get(producer_id)
        return state.batches[-1].last_seq if state is not None and state.batches else -1

    def record(self, header: BatchHeader, first_offset: int) -> None:
        """Remember a batch that was appended at ``first_offset``."""
        if header.producer_id < 0:
            return
        if header.is_transactional:
            self.open_txns.setdefault(header.producer_id, first_offset)
        if header.base_sequence < 0:
            return
        state = self.producers.get(header.producer_id)
        if state is None or header.producer_epoch != state.epoch:
            state = self.producers[header.producer_id] = _Producer(header.producer_epoch)
        state.batches.append(_Batch(header.base_sequence, _last_seq(header), first_offset,
                                    first_offset + header.last_offset_delta))
        state.last_timestamp = header.max_timestamp

    def end_txn(self, producer_id: int, epoch: int, commit: bool, marker_offset: int) -> None:
        """A commit or abort marker of ``producer_id`` was appended at ``marker_offset``."""
        first = self.open_txns.pop(producer_id, None)
        if not commit and first is not None:
            self.aborted.add(AbortedTxn(producer_id, first, marker_offset))
        state = self.producers.get(producer_id)
        if state is None or epoch > state.epoch:
            # A marker of a newer epoch (the coordinator fenced the producer): its old epoch is refused from now on.
            self.producers[producer_id] = _Producer(epoch)

    def last_stable_offset(self, high_watermark: int) -> int:
        return min(high_watermark, min(self.open_txns.values(), default=high_watermark))

    def describe(self) -> list[ProducerInfo]:
        pids = sorted(set(self.producers) | set(self.open_txns))
        out = []
        for pid in pids:
            state = self.producers.get(pid)
            last_seq = state.batches[-1].last_seq if state and state.batches else -1
            out.append(ProducerInfo(pid, state.epoch if state else -1, last_seq,
                                    state.last_timestamp if state else -1, self.open_txns.get(pid, -1)))
        return out

    @classmethod
    def rebuild(cls, plog: PartitionLog) -> "PartitionProducers":
        """Replay the batch headers (and markers) of the log's last segments."""
        producers = cls(plog.directory)
        for segment in plog.segments[-REBUILD_SCAN_SEGMENTS:]:
            for bp in segment.iter_positions():
                header = read_batch_header(os.pread(segment.fd, BATCH_HEADER_SIZE, bp.position))
                if not header.is_control:
                    producers.record(header, header.base_offset)
                elif header.producer_id >= 0 and header.records_count:
                    batch = decode_batch(os.pread(segment.fd, bp.size, bp.position), verify_crc=False)
                    commit, _ = parse_control_record(batch.records[0])
                    producers.end_txn(header.producer_id, header.producer_epoch, commit, header.base_offset)
        return producers


class ProducerStates:
    """Producer ids and the sequence state of every partition (built on first use)."""

    def __init__(self, data_dir: Path, *, node_id: int = 0, stride: int = 1):
        self.ids = ProducerIdAllocator(data_dir, node_id=node_id, stride=stride)
        self._partitions: dict[tuple[str, int], PartitionProducers] = {}

    def partition(self, topic: str, partition: int, plog: PartitionLog) -> PartitionProducers:
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = PartitionProducers.rebuild(plog)
        return state

    def reset(self, topic: str, partition: int) -> None:
        """Rebuild from the log at next use: it was written by another leader (cluster mode)."""
        self._partitions.pop((topic, partition), None)

    def forget(self, topic: str) -> None:
        for key in [k for k in self._partitions if k[0] == topic]:
            del self._partitions[key]

    def init_producer(self, producer_id: int = NO_PRODUCER_ID, epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for InitProducerId; a known id asking again gets its epoch bumped."""
        if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
            return producer_id, epoch + 1
        return self.ids.allocate(), 0
