"""Read a partition's segment files directly, read-only, beside a running broker.

This is the storage side of the ``gatewaylog`` Spark data source (spark/datasource.py), kept
free of pyspark so it can be tested on a log written with core.log directly. It opens files
with ``O_RDONLY`` only and never writes, locks or repairs anything: the broker owns the log.

What a reader may see of partition P of topic T (directory ``<data-dir>/T-P``):

* from the log start offset: the larger of the ``log-start-offset`` checkpoint and the base
  offset of the oldest segment still on disk (retention deletes whole segments);
* up to ``min(high watermark, end of the last complete batch on disk)``: the high watermark
  comes from ``high-watermarks.json`` (core.hw_checkpoint), because the broker's own is in its
  memory; the on-disk end guards against a checkpoint that is ahead of the files (a topic
  deleted and created again). Nothing past a torn batch is ever read.

The broker keeps appending, rolling segments and deleting old ones by retention while a
reader runs. Appends and rolls never touch bytes below the high watermark. A segment
deleted after it was opened stays readable through its descriptor; one deleted before it
could be opened means the records it held are gone: :class:`DataLossError`, or, when the
caller allows it (Spark's ``failOnDataLoss=false``), a jump to the new log start offset.
"""
from __future__ import annotations

import os
import struct
from bisect import bisect_right
from pathlib import Path
from typing import Iterator

from core.checkpoint import read_int
from core.index import OffsetIndex
from core.log import LOG_START_FILE
from core.log_manager import partition_dir_name
from core.segment import segment_name
from wire.records import LOG_OVERHEAD, RecordBatch, decode_batch

_PEEK = struct.Struct(">qi")  # baseOffset, batchLength
_DELTA = struct.Struct(">i")  # lastOffsetDelta, at byte 23 of a batch
_DELTA_POS = 23
_HEADER_NEED = 27  # enough of a batch to know its offsets
_CHUNK = 1 << 20  # read a segment a megabyte at a time


class DataLossError(RuntimeError):
    """Records the caller asked for are no longer on disk (retention, DeleteRecords, a deleted topic)."""


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return Path(data_dir) / partition_dir_name(topic, partition)


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the segments in ``directory``, oldest first (empty if it does not exist)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())


def log_start_offset(directory: Path, bases: list[int] | None = None) -> int:
    bases = segment_bases(directory) if bases is None else bases
    return max(read_int(directory / LOG_START_FILE, 0), bases[0] if bases else 0)


def _index_position(directory: Path, base: int, offset: int, size: int) -> int:
    """Where to start scanning segment ``base`` for ``offset``: from its sparse index, else 0.

    The broker appends index entries after the batches they point at, so a valid entry is
    always a complete batch; a torn or odd index just means scanning from the start.
    """
    index = OffsetIndex.load(directory / f"{segment_name(base)}.index", base, OffsetIndex.validator(base, size))
    return index.lookup(offset) if index is not None else 0


def disk_end_offset(directory: Path, bases: list[int] | None = None) -> int:
    """One past the last offset of the last complete batch on disk (the on-disk LEO)."""
    bases = segment_bases(directory) if bases is None else bases
    for base in reversed(bases):
        try:
            fd = os.open(directory / f"{segment_name(base)}.log", os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return base  # a freshly rolled, empty active segment: its base is the LEO
            position = _index_position(directory, base, 1 << 62, size)
            end = base
            while position + _HEADER_NEED <= size:
                head = os.pread(fd, _HEADER_NEED, position)
                batch_base, length = _PEEK.unpack_from(head)
                (delta,) = _DELTA.unpack_from(head, _DELTA_POS)
                batch_size = length + LOG_OVERHEAD
                if batch_base < end or length <= 0 or position + batch_size > size:
                    break  # a torn tail (a write in progress, or a crash not yet recovered)
                end = batch_base + delta + 1
                position += batch_size
            return end
        finally:
            os.close(fd)
    return 0


def readable_range(data_dir: Path, topic: str, partition: int, high_watermark: int) -> tuple[int, int]:
    """``(log start offset, end)`` a reader may read now; ``end`` is never past ``high_watermark``."""
    directory = partition_dir(data_dir, topic, partition)
    bases = segment_bases(directory)
    end = min(high_watermark, disk_end_offset(directory, bases))
    return min(log_start_offset(directory, bases), end), end


def read_batches(data_dir: Path, topic: str, partition: int, start: int, end: int, *,
                 fail_on_data_loss: bool = True) -> Iterator[RecordBatch]:
    """Decoded batches holding offsets ``[start, end)``, in order, control batches left out.

    Batches are whole: the first may begin before ``start`` and the last run past ``end``;
    the caller keeps the records in range. Compressed batches come back decompressed and
    every batch's CRC is checked (wire.records.decode_batch). Records missing below ``end``
    raise DataLossError, or are skipped when ``fail_on_data_loss`` is false.
    """
    directory = partition_dir(data_dir, topic, partition)
    offset = start
    while offset < end:
        bases = segment_bases(directory)
        first = log_start_offset(directory, bases)
        if not bases or offset < first:
            _lost(fail_on_data_loss, topic, partition, offset, first if bases else end)
            offset = first if bases else end
            continue
        vanished = False
        for base in bases[max(bisect_right(bases, offset) - 1, 0):]:
            if offset >= end:
                break
            try:
                fd = os.open(directory / f"{segment_name(base)}.log", os.O_RDONLY)
            except FileNotFoundError:  # deleted by retention since we listed: list again
                vanished = True
                break
            try:
                for batch in _segment_batches(fd, directory, base, offset, end):
                    offset = batch.last_offset + 1
                    if not batch.is_control:  # transaction markers are not records a consumer sees
                        yield batch
            finally:
                os.close(fd)
        if vanished:
            continue
        if offset < end:
            _lost(fail_on_data_loss, topic, partition, offset, offset)
        return


def _lost(fail: bool, topic: str, partition: int, offset: int, available: int) -> None:
    if fail:
        raise DataLossError(
            f"{topic}-{partition}: offsets from {offset} are no longer on disk (what is left starts or ends at "
            f"{available}): retention or DeleteRecords removed them, or the topic was deleted; "
            "set failOnDataLoss=false to skip what is gone")


def _segment_batches(fd: int, directory: Path, base: int, offset: int, end: int) -> Iterator[RecordBatch]:
    """Every batch of one segment whose offsets reach ``offset``, up to the first at ``end``."""
    size = os.fstat(fd).st_size
    position = _index_position(directory, base, offset, size)
    chunk, chunk_at = b"", position
    while offset < end and position + _HEADER_NEED <= size:
        rel = position - chunk_at
        if len(chunk) - rel < _HEADER_NEED:
            chunk, chunk_at, rel = os.pread(fd, _CHUNK, position), position, 0
        batch_base, length = _PEEK.unpack_from(chunk, rel)
        batch_size = length + LOG_OVERHEAD
        if batch_base >= end or position + batch_size > size:
            break  # past what was asked for, or a torn tail past the high watermark
        if len(chunk) - rel < batch_size:
            chunk, chunk_at, rel = os.pread(fd, max(batch_size, _CHUNK), position), position, 0
        (delta,) = _DELTA.unpack_from(chunk, rel + _DELTA_POS)
        last = batch_base + delta
        if last >= offset:
            yield decode_batch(chunk, rel)  # checks the CRC: a corrupt batch below the HW is an error
            offset = last + 1
        position += batch_size
