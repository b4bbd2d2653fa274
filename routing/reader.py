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
        self._records = {}
        self._low, self._high = offset, offset
        for pos, header in iter_batches(data):
            last = header.base_offset + header.last_offset_delta
            if not header.is_control:
                for record in decode_batch(data, pos, verify_crc=False).records:
                    self._records[record.offset] = record
            self._high = max(self._high, last + 1)

    def forget(self) -> None:
        self._records, self._low, self._high = {}, 0, 0
