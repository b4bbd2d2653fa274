"""Compaction keeps the newest record per key; tombstones go after delete.retention.ms."""
from __future__ import annotations

from core.cleaner import compact
from core.config import TopicConfig
from core.log import PartitionLog
from tests.logutil import FakeClock, keyed_batch
from wire.records import decode_batch, iter_batches


def records_of(log):
    out = []
    for segment in log.segments:
        data = segment.read_all()
        for pos, _h in iter_batches(bytearray(data)):
            out += [(r.offset, r.key, r.value) for r in decode_batch(data, pos).records]
    return out


def make_log(tmp_path, clock, **extra):
    config = TopicConfig.from_strings({"cleanup.policy": "compact", "segment.bytes": "1024",
                                       "delete.retention.ms": "60000", **extra})
    return PartitionLog(tmp_path / "c-0", config, clock=clock)


def test_compaction_keeps_the_newest_value_of_each_key(tmp_path):
    clock = FakeClock()
    ts = int(clock() * 1000)
    log = make_log(tmp_path, clock)
    for round_ in range(20):
        log.append(keyed_batch([(b"k%d" % (i % 5), b"v%d-%d" % (round_, i)) for i in range(3)], ts=ts))
    log.flush()
    before = records_of(log)
    active_base = log.active.base_offset
    info = compact(log)
    assert info.records_removed > 0 and info.bytes_after < info.bytes_before
    after = records_of(log)
    offsets = [o for o, _k, _v in after]
    assert offsets == sorted(offsets)
    newest = {}
    for o, k, v in before:
        newest[k] = (o, v)
    closed = [(o, k, v) for o, k, v in after if o < active_base]
    for o, k, v in closed:  # what survives in closed segments is its key's newest record
        assert newest[k] == (o, v)
    assert {k: (o, v) for o, k, v in after} == newest
    # Reads still work across the gaps, from any offset.
    assert log.read(0, 10_000).records
    assert log.next_offset == 60


def test_tombstones_are_dropped_after_delete_retention(tmp_path):
    clock = FakeClock()
    ts = int(clock() * 1000)
    log = make_log(tmp_path, clock)
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"2")], ts=ts))
    log.append(keyed_batch([(b"a", None)], ts=ts))
    for i in range(30):
        log.append(keyed_batch([(b"filler%d" % i, b"x" * 40)], ts=ts))
    log.flush()
    compact(log)
    keys = {(k, v) for _o, k, v in records_of(log)}
    assert (b"a", None) in keys and (b"a", b"1") not in keys and (b"b", b"2") in keys
    clock.advance(120)
    compact(log)
    keys = {k for _o, k, _v in records_of(log)}
    assert b"a" not in keys and b"b" in keys


def test_compacted_log_reopens_cleanly(tmp_path):
    clock = FakeClock()
    log = make_log(tmp_path, clock)
    for i in range(40):
        log.append(keyed_batch([(b"k%d" % (i % 3), b"value-%d" % i)]))
    log.flush()
    compact(log)
    expected = records_of(log)
    log.close()
    again = PartitionLog(tmp_path / "c-0", log.config, clock=clock, recover=True)
    assert records_of(again) == expected
    assert again.next_offset == 40
