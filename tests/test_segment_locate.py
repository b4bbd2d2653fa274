"""Reads located from batch headers (LogSegment.locate, the zero-copy Fetch path) return exactly
the whole batches a plain scan of the bytes would: the first batch holding the offset, every
following batch that fits in max_bytes and starts below the high watermark, the first one whole
with min_one however large."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from core.config import TopicConfig
from core.log import PartitionLog
from core.segment import FileRange
from tests.logutil import FakeClock, batch
from wire.records import iter_batches

LOG_OVERHEAD = 12


def _reference(segment_bytes: bytes, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
    """Whole batches as the pre-zero-copy read cut them: scan every header from the start."""
    batches = [(pos, h) for pos, h in iter_batches(bytearray(segment_bytes))]
    start = next((i for i, (_, h) in enumerate(batches) if h.base_offset + h.last_offset_delta >= offset), None)
    if start is None or batches[start][1].base_offset >= max_offset:
        return b""
    pos0, h0 = batches[start]
    size0 = h0.batch_length + LOG_OVERHEAD
    if size0 > max_bytes:
        return segment_bytes[pos0:pos0 + size0] if min_one else b""
    end = pos0
    for pos, h in batches[start:]:
        size = h.batch_length + LOG_OVERHEAD
        if h.base_offset >= max_offset or pos + size - pos0 > max_bytes:
            break
        end = pos + size
    return segment_bytes[pos0:end]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 6), st.integers(5, 900)), min_size=1, max_size=40),
       interval=st.sampled_from([0, 100, 4096]), data=st.data())
def test_locate_matches_a_scan_of_the_bytes(tmp_path_factory, sizes, interval, data):
    config = TopicConfig.from_strings({"index.interval.bytes": str(interval), "flush.messages": "1000000"})
    log = PartitionLog(tmp_path_factory.mktemp("seg") / "t-0", config, clock=FakeClock())
    try:
        for n, size in sizes:
            log.append(batch(n, size=size))
        log.flush()
        segment = log.segments[-1]
        whole = segment.read_all()
        end = log.next_offset
        for _ in range(8):
            offset = data.draw(st.integers(0, end - 1))
            max_bytes = data.draw(st.integers(1, len(whole) + 100))
            max_offset = data.draw(st.integers(offset, end))
            min_one = data.draw(st.booleans())
            expected = _reference(whole, offset, max_bytes, max_offset, min_one)
            assert segment.read(offset, max_bytes, max_offset, min_one=min_one) == expected
            ranged = segment.read_range(offset, max_bytes, max_offset, min_one=min_one)
            assert (ranged.read() if isinstance(ranged, FileRange) else ranged) == expected
            assert len(ranged) == len(expected)
    finally:
        log.close()
