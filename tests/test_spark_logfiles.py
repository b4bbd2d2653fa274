"""The read-only segment reader of the Spark data source (spark/logfiles.py), the high-watermark
checkpoint (core/hw_checkpoint.py) and the offset planning (spark/offsets.py), over logs written
with core.log directly. No Spark here: these run in milliseconds."""
from __future__ import annotations

import json
import os

import pytest

from core.config import TopicConfig
from core.hw_checkpoint import FILE, HighWatermarkCheckpoint, read_high_watermarks, write_high_watermarks
from core.log import PartitionLog
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from spark import offsets
from spark.logfiles import DataLossError, disk_end_offset, read_batches, readable_range
from spark.options import gatewaylog_options, kafka_options
from tests.logutil import FakeClock
from wire.compression import GZIP, LZ4, ZSTD
from wire.records import Header, Record, control_record, encode_batch

TS = 1_700_000_000_000


def open_log(data_dir, topic="t", partition=0, **cfg):
    config = TopicConfig.from_strings({k.replace("_", "."): str(v) for k, v in cfg.items()})
    return PartitionLog(data_dir / f"{topic}-{partition}", config, clock=FakeClock())


def records(start, n, *, headers=()):
    return [Record(start + i, TS + start + i, b"k%d" % (start + i), b"value-%d" % (start + i), headers) for i in range(n)]


def append(log, n, **kw):
    first = log.next_offset
    log.append(encode_batch(records(first, n), base_offset=first, **kw))
    log.flush()
    return first


def read_offsets(data_dir, start, end, topic="t", **kw):
    out = []
    for batch in read_batches(data_dir, topic, 0, start, end, **kw):
        out += [r.offset for r in batch.records if start <= r.offset < end]
    return out


def test_reads_every_record_in_range_across_segments_and_codecs(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048, index_interval_bytes=256)
    for i, codec in enumerate([0, GZIP, LZ4, ZSTD] * 10):
        append(log, 7, compression=codec)
    assert len(log.segments) > 3
    end = log.high_watermark
    assert readable_range(tmp_path, "t", 0, end) == (0, end)
    assert read_offsets(tmp_path, 0, end) == list(range(end))
    assert read_offsets(tmp_path, 100, 200) == list(range(100, 200))  # through the sparse index
    got = [r for b in read_batches(tmp_path, "t", 0, 0, end) for r in b.records]
    assert got == records(0, end)  # keys, values, timestamps: decoded exactly


def test_never_reads_past_the_high_watermark_or_a_torn_tail(tmp_path):
    log = open_log(tmp_path)
    append(log, 10)
    log.append(encode_batch(records(10, 5), base_offset=10))  # appended, not yet fsync'd
    assert readable_range(tmp_path, "t", 0, 10) == (0, 10)
    assert read_offsets(tmp_path, 0, 10) == list(range(10))
    # A half-written batch at the end of the file is not part of the log yet.
    with open(log.active.log_path, "ab") as f:
        f.write(encode_batch(records(15, 5), base_offset=15)[:40])
    assert disk_end_offset(log.directory) == 15
    assert readable_range(tmp_path, "t", 0, 1_000) == (0, 15)  # a checkpoint ahead of the files


def test_control_batches_are_skipped(tmp_path):
    log = open_log(tmp_path)
    append(log, 3)
    log.append(encode_batch([control_record(True, offset=3)], base_offset=3, is_control=True, is_transactional=True))
    log.flush()
    append(log, 2)
    assert read_offsets(tmp_path, 0, 6) == [0, 1, 2, 4, 5]


def test_headers_and_null_values_come_back(tmp_path):
    log = open_log(tmp_path)
    hs = (Header("a", b"1"), Header("b", None))
    log.append(encode_batch([Record(0, TS, None, None, hs), Record(1, TS, b"k", b"", ())]))
    log.flush()
    got = [r for b in read_batches(tmp_path, "t", 0, 0, 2) for r in b.records]
    assert [(r.key, r.value, r.headers) for r in got] == [(None, None, hs), (b"k", b"", ())]


def test_retention_during_a_read(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024)
    for _ in range(20):
        append(log, 5)
    end = log.high_watermark
    reader = read_batches(tmp_path, "t", 0, 0, end)
    first = next(reader)  # the first segment is open now: deleting it does not take it away
    log.delete_records(60)
    seen = [r.offset for r in first.records]
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        for b in reader:  # the open segment is read to its end; the next ones were deleted unopened
            seen += [r.offset for r in b.records]
    assert seen == list(range(len(seen))) and 0 < len(seen) < 60
    skipped = read_offsets(tmp_path, 0, end, fail_on_data_loss=False)
    assert skipped[0] >= 55 and skipped == list(range(skipped[0], end))
    assert readable_range(tmp_path, "t", 0, end)[0] == 60


def test_a_missing_partition_is_data_loss(tmp_path):
    with pytest.raises(DataLossError):
        read_offsets(tmp_path, 0, 5, topic="nope")
    assert read_offsets(tmp_path, 0, 5, topic="nope", fail_on_data_loss=False) == []


def test_checkpoint_file_round_trip_and_throttle(tmp_path):
    assert read_high_watermarks(tmp_path) is None
    write_high_watermarks(tmp_path, {"a": {0: 5, 1: 7}})
    assert read_high_watermarks(tmp_path) == {"a": {0: 5, 1: 7}}
    assert json.loads((tmp_path / FILE).read_text())["version"] == 1
    now = [0.0]
    checkpoint = HighWatermarkCheckpoint(tmp_path, interval=1.0, clock=lambda: now[0])
    log = open_log(tmp_path, topic="b")
    logs = {("b", 0): log}
    assert checkpoint.maybe_write(logs)
    append(log, 3)
    assert not checkpoint.maybe_write(logs)  # within the interval
    now[0] = 1.5
    assert checkpoint.maybe_write(logs)
    assert read_high_watermarks(tmp_path) == {"b": {0: 3}}
    now[0] = 3.0
    assert not checkpoint.maybe_write(logs)  # nothing changed: no write
    (tmp_path / FILE).write_text("{")
    with pytest.raises(ValueError, match=FILE):
        read_high_watermarks(tmp_path)


def test_log_manager_writes_the_checkpoint_from_flush_and_shutdown(tmp_path):
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    manager.startup()
    manager.create_topic("orders", 2, {"flush.messages": "1"})
    log = manager.get_log("orders", 1)
    log.append(encode_batch(records(0, 4)))
    assert manager.flush_dirty() == 1
    assert read_high_watermarks(tmp_path) == {"orders": {0: 0, 1: 4}}
    log.append(encode_batch(records(4, 2), base_offset=4))
    manager.shutdown()
    assert read_high_watermarks(tmp_path) == {"orders": {0: 0, 1: 6}}


def test_the_checkpoint_follows_flushes_new_and_deleted_topics_without_listing_every_log(tmp_path):
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    manager.startup()
    manager.hw_checkpoint.interval = 0
    manager.create_topic("a", 2, {"flush.messages": "1"})
    manager.create_topic("b", 1, {"flush.messages": "1"})
    manager.get_log("a", 0).append(encode_batch(records(0, 3)))
    manager.flush_dirty()
    assert read_high_watermarks(tmp_path) == {"a": {0: 3, 1: 0}, "b": {0: 0}}
    assert not manager.hw_checkpoint.layout_changed  # from here on only flushed logs are looked at
    manager.get_log("b", 0).append(encode_batch(records(0, 2)))
    manager.get_log("a", 1).append(encode_batch(records(0, 1)))
    manager.flush_dirty()
    assert read_high_watermarks(tmp_path) == {"a": {0: 3, 1: 1}, "b": {0: 2}}
    manager.create_topic("c", 1, {"flush.messages": "1"})
    manager.delete_topic("b")
    manager.get_log("a", 0).append(encode_batch(records(3, 1), base_offset=3))
    manager.flush_dirty()
    assert read_high_watermarks(tmp_path) == {"a": {0: 4, 1: 1}, "c": {0: 0}}
    before = (tmp_path / FILE).stat().st_mtime_ns
    manager.flush_dirty()  # nothing flushed, nothing changed: no write
    assert (tmp_path / FILE).stat().st_mtime_ns == before


def test_plan_splits_ranges_and_resolves_specs():
    earliest, latest = {"t": {0: 10, 1: 0}}, {"t": {0: 110, 1: 5}}
    start = offsets.resolve('{"t": {"1": 2}}', "earliest", earliest, latest)
    assert start == {"t": {0: 10, 1: 2}}
    assert offsets.resolve("latest", "earliest", earliest, latest) == latest
    assert offsets.resolve('{"t": {"0": -1}}', "earliest", earliest, latest) == {"t": {0: 110, 1: 0}}
    ranges = offsets.plan(start, latest, earliest, max_records=40)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 10, 44), (0, 44, 78), (0, 78, 110), (1, 2, 5)]
    assert len(offsets.plan(start, latest, earliest, min_partitions=10)) >= 10
    new = offsets.plan({}, latest, earliest)  # partitions not in start begin at earliest
    assert [(r.start, r.end) for r in new] == [(10, 110), (0, 5)]
    assert offsets.to_json(latest) == {"t": {"0": 110, "1": 5}}
    assert offsets.from_json(json.dumps(offsets.to_json(latest))) == latest


def test_cap_shares_max_offsets_by_lag():
    capped = offsets.cap({"t": {0: 0, 1: 0}}, {"t": {0: 300, 1: 100}}, {}, 100)
    assert capped == {"t": {0: 75, 1: 25}}
    assert offsets.cap({"t": {0: 0, 1: 0}}, {"t": {0: 3, 1: 2}}, {}, 1) == {"t": {0: 1, 1: 0}}
    assert offsets.cap({"t": {0: 0}}, {"t": {0: 10}}, {}, 100) == {"t": {0: 10}}


def test_select_topics():
    assert offsets.select_topics(["a", "ab", "b"], pattern="a.*") == {"a": None, "ab": None}
    assert offsets.select_topics([], assign='{"a": [1]}') == {"a": [1]}
    with pytest.raises(ValueError, match="exactly one"):
        offsets.select_topics([], subscribe="a", pattern="b")


def test_option_maps_translate_queue_names():
    opts = kafka_options("h:1", topics=["orders"], queues=["in box"], starting_offsets={"orders": {0: 5}})
    assert opts == {"kafka.bootstrap.servers": "h:1", "subscribe": "orders,__amqp._2f.in_20box",
                    "startingOffsets": '{"orders": {"0": 5}}', "includeHeaders": "true"}
    assert kafka_options("h:1", queues=["jobs"], vhost="v", sink=True) == {
        "kafka.bootstrap.servers": "h:1", "topic": "__amqp.v.jobs"}
    with pytest.raises(ValueError):
        kafka_options("h:1", topics=["a", "b"], sink=True)
    assert gatewaylog_options("/d", topics=["a"]) == {"subscribe": "a", "includeHeaders": "true", "path": "/d"}
    assert os.path.basename(gatewaylog_options("/d/x", topics=["a"])["path"]) == "x"


def test_segments_rolling_while_reading(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024)
    for _ in range(6):
        append(log, 5)
    end = log.high_watermark
    reader = read_batches(tmp_path, "t", 0, 0, end)
    seen = [r.offset for r in next(reader).records]
    for _ in range(20):  # the broker goes on appending and rolling new segments meanwhile
        append(log, 5)
    seen += [r.offset for b in reader for r in b.records if r.offset < end]
    assert seen == list(range(end))
    assert len(log.segments) > 3
