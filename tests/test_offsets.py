"""The committed-offsets store: Kafka's record format, partitioning, cache, replay."""
from __future__ import annotations

import struct

import pytest

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from core.offsets import (
    OFFSETS_TOPIC, OffsetAndMetadata, OffsetStore, decode_key, decode_value, encode_key, encode_value,
    java_string_hash, partition_for,
)
from tests.logutil import FakeClock
from wire.records import Record, decode_batch, encode_batch, iter_batches


def open_logs(data_dir, clock) -> LogManager:
    logs = LogManager(data_dir, LocalMetadataStore(data_dir, clock=clock), clock=clock)
    logs.startup()
    return logs


@pytest.fixture
def clock():
    return FakeClock()


def test_java_string_hash_matches_the_jvm():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2**31  # the one whose abs() is negative in Java
    assert partition_for("polygenelubricants", 50) == 0  # Kafka's Utils.abs maps MIN_VALUE to 0
    assert java_string_hash("é") == 233 and java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogates


def test_key_and_value_are_kafkas_bytes():
    key = encode_key("g", "t", 7)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x07"
    assert decode_key(key) == ("g", "t", 7)
    om = OffsetAndMetadata(42, 5, "m", 1_700_000_000_000)
    value = encode_value(om)
    assert value == struct.pack(">hqih", 3, 42, 5, 1) + b"m" + struct.pack(">q", 1_700_000_000_000)
    assert decode_value(value) == om


def test_older_value_versions_and_other_keys_are_read():
    v1 = struct.pack(">hqh", 1, 10, 2) + b"md" + struct.pack(">qq", 123, 456)
    assert decode_value(v1) == OffsetAndMetadata(10, -1, "md", 123)
    assert decode_key(struct.pack(">hh", 2, 1) + b"g") is None  # a group-metadata key


def test_commit_fetch_and_delete(tmp_path, clock):
    logs = open_logs(tmp_path, clock)
    store = OffsetStore(logs, clock, partitions=4)
    store.load()
    assert logs.store.get_topic(OFFSETS_TOPIC).configs["cleanup.policy"] == "compact"
    topic, partition, last = store.commit("g", {("t", 0): OffsetAndMetadata(5, -1, "", 1)})
    assert (topic, partition, last) == (OFFSETS_TOPIC, partition_for("g", 4), 0)
    store.commit("g", {("t", 1): OffsetAndMetadata(6), ("u", 0): OffsetAndMetadata(7)})
    assert store.fetch("g", [("t", 0), ("x", 0)]) == {("t", 0): OffsetAndMetadata(5, -1, "", 1)}
    assert set(store.fetch("g")) == {("t", 0), ("t", 1), ("u", 0)}
    assert store.delete_topic_partitions("g", [("u", 0), ("nope", 1)]) is not None
    assert set(store.fetch("g")) == {("t", 0), ("t", 1)}
    assert store.delete_group("g") is not None
    assert store.fetch("g") == {} and store.groups() == []
    assert store.delete_group("g") is None
    logs.shutdown()


def test_records_in_the_log_carry_commit_time_and_tombstones(tmp_path, clock):
    logs = open_logs(tmp_path, clock)
    store = OffsetStore(logs, clock)
    store.load()
    store.commit("g", {("t", 0): OffsetAndMetadata(5, -1, "", int(clock() * 1000))})
    store.delete_group("g")
    plog = logs.get_log(OFFSETS_TOPIC, 0)
    plog.flush()
    data = bytearray(plog.read(0, 1 << 20).records)
    records = [r for pos, _ in iter_batches(data) for r in decode_batch(data, pos).records]
    assert [(decode_key(r.key), r.value is None, r.timestamp) for r in records] == [
        (("g", "t", 0), False, int(clock() * 1000)), (("g", "t", 0), True, int(clock() * 1000))]
    logs.shutdown()


def test_replay_skips_garbage_and_honours_order(tmp_path, clock):
    logs = open_logs(tmp_path, clock)
    store = OffsetStore(logs, clock)
    store.load()
    plog = logs.get_log(OFFSETS_TOPIC, 0)
    plog.append(encode_batch([
        Record(0, 1, encode_key("g", "t", 0), encode_value(OffsetAndMetadata(1))),
        Record(1, 1, b"\x00\x09junk", b"junk"),  # unknown key version: skipped
        Record(2, 1, encode_key("g", "t", 0), b"\x00\x03short"),  # unreadable value: skipped
        Record(3, 1, encode_key("g", "t", 0), encode_value(OffsetAndMetadata(3))),
        Record(4, 1, encode_key("h", "t", 0), encode_value(OffsetAndMetadata(9))),
        Record(5, 1, encode_key("h", "t", 0), None),
    ]))
    logs.shutdown()
    logs = open_logs(tmp_path, clock)
    store = OffsetStore(logs, clock)
    assert store.load() == 4
    # a value without a commit time takes its record's timestamp (offset retention counts from it)
    assert store.fetch("g") == {("t", 0): OffsetAndMetadata(3, -1, "", 1)}
    assert store.groups() == ["g"]
    logs.shutdown()


def test_an_existing_topic_keeps_its_partition_count(tmp_path, clock):
    logs = open_logs(tmp_path, clock)
    OffsetStore(logs, clock, partitions=3).load()
    store = OffsetStore(logs, clock, partitions=10)
    store.load()
    assert store.partitions == 3
    logs.shutdown()
