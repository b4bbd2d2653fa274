"""The partition log: append, read, roll, indexes, timestamps, retention, DeleteRecords."""
from __future__ import annotations

import os

import pytest

from core.config import TopicConfig
from core.errors import InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from core.log import PartitionLog
from tests.logutil import FakeClock, batch, keyed_batch
from wire.records import CorruptBatchError, decode_batch, iter_batches

TS = 1_700_000_000_000


def offsets_of(data: bytes) -> list[int]:
    out = []
    for pos, _h in iter_batches(bytearray(data)):
        out += [r.offset for r in decode_batch(data, pos).records]
    return out


def open_log(tmp_path, clock=None, **cfg):
    config = TopicConfig.from_strings({k.replace("_", "."): str(v) for k, v in cfg.items()})
    return PartitionLog(tmp_path / "t-0", config, clock=clock or FakeClock())


def test_offsets_are_dense_from_zero_and_bytes_are_kept(tmp_path):
    log = open_log(tmp_path)
    infos = [log.append(batch(n)) for n in (1, 3, 5)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 0), (1, 3), (4, 8)]
    assert log.next_offset == 9
    log.flush()
    data = log.read(0, 1 << 20).records
    assert offsets_of(data) == list(range(9))
    # Stored bytes are the produced bytes with only base offset and leader epoch rewritten.
    original = batch(3)
    stored = log.read(1, 1 << 20).records
    pos = [p for p, _ in iter_batches(bytearray(stored))][0]
    assert pos == 0
    assert stored[16:len(original)] == original[16:]  # magic, CRC, attributes ... records: untouched


def test_leader_epoch_is_written_in_place(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2), leader_epoch=7)
    log.flush()
    assert decode_batch(log.read(0, 1000).records).partition_leader_epoch == 7


def test_hw_waits_for_flush_when_flush_messages_is_one(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(2))
    assert log.high_watermark == 0
    assert log.read(0, 1000).records == b""
    log.flush()
    assert log.high_watermark == 2
    assert offsets_of(log.read(0, 1000).records) == [0, 1]


def test_async_flush_policy_serves_before_fsync(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path, clock, flush_messages=3, flush_ms=1000)
    log.append(batch(2))
    assert log.high_watermark == 2
    assert not log.needs_flush(clock())
    log.append(batch(1))
    assert log.needs_flush(clock())
    log.flush()
    log.append(batch(1))
    assert not log.needs_flush(clock())
    clock.advance(2)
    assert log.needs_flush(clock())


def test_hw_never_moves_back_when_policy_tightens(tmp_path):
    log = open_log(tmp_path, flush_messages=100)
    log.append(batch(4))
    assert log.high_watermark == 4
    log.config = TopicConfig()  # back to flush before serving
    log.append(batch(1))
    assert log.high_watermark == 4


def test_read_respects_max_bytes_in_whole_batches_and_min_one(tmp_path):
    log = open_log(tmp_path)
    for _ in range(10):
        log.append(batch(5, size=100))
    log.flush()
    one = len(log.read(0, 1).records)
    assert one > 500  # the first batch whole even though it is over the limit
    assert log.read(0, 1, min_one=False).records == b""
    three = log.read(0, one * 3 + one // 2).records
    assert len(three) == one * 3
    assert offsets_of(log.read(7, one * 2).records)[0] == 5  # from the batch holding offset 7


def test_offset_out_of_range(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(3))
    log.flush()
    assert log.read(3, 100).records == b""  # at the LEO: empty, not an error
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_bad_batches_are_refused_and_nothing_is_written(tmp_path):
    log = open_log(tmp_path, max_message_bytes=2000)
    log.append(batch(1))
    good = batch(2)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        log.append(good + bytes(bad))
    with pytest.raises(CorruptBatchError):
        log.append(good[:-3])
    with pytest.raises(RecordTooLargeError):
        log.append(batch(1, size=5000))
    with pytest.raises(InvalidRecordError):
        log.append(b"")
    assert log.next_offset == 1
    log.flush()
    assert offsets_of(log.read(0, 10000).records) == [0]


def test_compacted_topic_needs_keys(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact")
    with pytest.raises(InvalidRecordError):
        log.append(batch(1))
    log.append(keyed_batch([(b"k", b"v")]))
    assert log.next_offset == 1


def test_segments_roll_by_size_and_are_named_by_base_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=4096)
    for _ in range(40):
        log.append(batch(4, size=100))
    log.flush()
    assert len(log.segments) >= 5
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    assert all(s.size <= 4096 for s in log.segments[:-1])
    seen, offset = [], 0
    while offset < log.next_offset:
        data = log.read(offset, 1000).records
        got = offsets_of(data)
        seen += got
        offset = got[-1] + 1
    assert seen == list(range(160))


def test_segment_rolls_by_time(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path, clock, segment_ms=60_000)
    log.append(batch(1, ts=int(clock() * 1000)))
    clock.advance(30)
    log.append(batch(1, ts=int(clock() * 1000)))
    assert len(log.segments) == 1
    clock.advance(31)
    log.append(batch(1, ts=int(clock() * 1000)))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_reopen_uses_index_and_rebuilds_damaged_ones(tmp_path):
    log = open_log(tmp_path, segment_bytes=4096, index_interval_bytes=512)
    for i in range(60):
        log.append(batch(3, size=50, ts=TS + i))
    log.close()
    first = log.segments[0]
    assert len(first.offset_index) > 3
    # Damage: a torn entry in one index, nonsense in another, one missing.
    with open(first.index_path, "ab") as f:
        f.write(b"\x01\x02\x03")
    log.segments[1].timeindex_path.write_bytes(b"\xff" * 24)
    log.segments[2].index_path.unlink()
    again = PartitionLog(tmp_path / "t-0", log.config, clock=FakeClock())
    assert again.next_offset == 180
    for offset in (0, 17, 99, 179):
        assert offsets_of(again.read(offset, 1).records)[0] <= offset
    assert again.offset_for_timestamp(TS + 30)[1] == TS + 30
    assert first.index_path.stat().st_size % 8 == 0


def test_offset_for_timestamp_and_max_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048, index_interval_bytes=256)
    for i in range(50):
        log.append(batch(2, size=40, ts=TS + i * 10))
    log.append(batch(1, size=40, ts=TS + 5))  # an out-of-order timestamp
    log.flush()
    assert log.offset_for_timestamp(TS) == (0, TS)
    assert log.offset_for_timestamp(TS + 1) == (2, TS + 10)
    assert log.offset_for_timestamp(TS + 250) == (50, TS + 250)
    assert log.offset_for_timestamp(TS + 10_000) is None
    assert log.max_timestamp_offset() == (98, TS + 490)


def test_retention_by_time_deletes_whole_segments(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path, clock, segment_bytes=2048, retention_ms=60_000)
    now = int(clock() * 1000)
    for i in range(30):
        log.append(batch(2, size=60, ts=now - 120_000 if i < 20 else now))
    log.flush()
    before = len(log.segments)
    assert log.apply_retention() > 0
    assert len(log.segments) < before
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert offsets_of(log.read(log.log_start_offset, 100).records)[0] == log.log_start_offset
    # Everything expired: the active segment goes too, a new empty one waits at the LEO.
    clock.advance(3600)
    log.apply_retention()
    assert log.log_start_offset == log.next_offset == 60
    assert len(log.segments) == 1 and log.active.empty


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048, retention_bytes=5000)
    for _ in range(40):
        log.append(batch(2, size=60))
    log.flush()
    log.apply_retention()
    assert log.size_bytes <= 5000 + 2048
    assert log.size_bytes - log.segments[0].size < 5000


def test_delete_records_moves_log_start_and_survives_restart(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048)
    for _ in range(30):
        log.append(batch(2, size=60))
    log.flush()
    assert log.delete_records(25) == 25
    assert log.segments[0].base_offset <= 25
    with pytest.raises(OffsetOutOfRangeError):
        log.read(24, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(61)
    assert log.delete_records(10) == 25  # never moves back
    log.close()
    again = PartitionLog(tmp_path / "t-0", log.config)
    assert again.log_start_offset == 25
    assert again.delete_records(-1) == 60
    assert again.read(60, 100).records == b""


def test_reads_stop_at_max_offset(tmp_path):
    log = open_log(tmp_path, flush_messages=10)
    log.append(batch(2))
    log.append(batch(1))
    assert log.read(0, 1 << 20, max_offset=0).records == b""
    assert offsets_of(log.read(0, 1 << 20, max_offset=2).records) == [0, 1]
    assert offsets_of(log.read(0, 1 << 20).records) == [0, 1, 2]


def test_append_built_stores_the_same_bytes_as_append(tmp_path):
    """The router's unchecked path: same files, offsets, indexes and answers as the checked one."""
    from wire.records import batch_of_tails, built_batch, record_tail
    config = TopicConfig.from_strings({"segment.bytes": "2048", "index.interval.bytes": "100"})
    checked = PartitionLog(tmp_path / "a", config, clock=FakeClock())
    built = PartitionLog(tmp_path / "b", config, clock=FakeClock())
    for log in (checked, built):
        log.leader_epoch = 3
    for i in range(60):
        stamps = [1_700_000_000_000 + i * 7 + j for j in range(1 + i % 3)]
        tails = [record_tail(b"k%d" % i, b"v" * (i % 40), []) for _ in stamps]
        data = batch_of_tails(stamps, tails)
        assert checked.append(data) == built.append_built(*built_batch(stamps, tails), len(stamps), max(stamps))
    assert len(built.segments) > 3
    for name in sorted(os.listdir(tmp_path / "a")):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert built.epochs.entries == checked.epochs.entries == [(3, 0)]
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        small = PartitionLog(tmp_path / "c", TopicConfig.from_strings({"max.message.bytes": "100"}), clock=FakeClock())
        small.append_built(*built_batch([1], [record_tail(None, b"x" * 200, [])]), 1, 1)
