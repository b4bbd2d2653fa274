"""Records of a queue's log by offset, read in chunks and decoded once.

Deliveries walk a queue's log mostly in order, so a miss reads up to ``chunk_bytes`` of
whole batches from the offset on and decodes all of them; the following deliveries are
served from that chunk. Control batches (transaction markers) hold no messages: their
offsets read as None.
"""
from __future__ import annotations

from core.log import PartitionLog
from wire.records import Record, decode_batch, iter_batches

CHUNK_BYTES = 1 << 20


class LogReader:
    def __init__(self, plog: PartitionLog, chunk_bytes: int = CHUNK_BYTES):
        self.plog = plog
        self.chunk_bytes = chunk_bytes
        self._records: dict[int, Record | None] = {}
        self._low = self._high = 0  # offsets covered by the cache: [low, high)

    def get(self, offset: int) -> Record | None:
        """The record at ``offset`` (None for a control record or a compacted-away offset)."""
        if not self._low <= offset < self._high:
            self._load(offset)
        return self._records.get(offset)

    def _load(self, offset: int) -> None:
        # Up to the log end, not the high watermark: AMQP delivers before the fsync, as RabbitMQ does.
        data = self.plog.read(offset, self.chunk_bytes, max_offset=self.plog.next_offset).records
        self._fill(offset, data, lambda header: False)

    def _fill(self, offset: int, data: bytes, dropped) -> None:
        """Cache the records of ``data`` (read from ``offset``); batches ``dropped(header)`` read as None."""
        self._records = {}
        self._low, self._high = offset, offset
        for pos, header in iter_batches(data):
            last = header.base_offset + header.last_offset_delta
            if not header.is_control and not dropped(header):
                for record in decode_batch(data, pos, verify_crc=False).records:
                    self._records[record.offset] = record
            self._high = max(self._high, last + 1)

    def forget(self) -> None:
        self._records, self._low, self._high = {}, 0, 0


class CommittedReader(LogReader):
    """A read_committed reader: records below the last stable offset only, and those of aborted
    transactions read as None (like markers: the queue skips them, so they are never delivered).

    ``view()`` is None while the reader reads uncommitted, else ``(last stable offset,
    aborted(start, end))``, the latter listing ``(producer id, first offset, marker offset)`` of
    the aborted transactions with data in ``[start, end)``. Nothing at or past the stable offset
    is cached, so a transaction still open when a chunk is read cannot be mistaken for committed.
    """

    def __init__(self, plog: PartitionLog, view, chunk_bytes: int = CHUNK_BYTES):
        super().__init__(plog, chunk_bytes)
        self.view = view

    def _load(self, offset: int) -> None:
        view = self.view()
        if view is None:
            return super()._load(offset)
        stable, aborted = view
        data = self.plog.read(offset, self.chunk_bytes, max_offset=stable).records if offset < stable else b""
        spans = [(e.producer_id, e.first_offset, e.last_offset) for e in aborted(offset, stable)] if data else []

        def dropped(header) -> bool:
            return header.is_transactional and any(
                pid == header.producer_id and first <= header.base_offset <= last for pid, first, last in spans)
        self._fill(offset, data, dropped)
