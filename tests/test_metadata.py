"""The single-node metadata store and the log manager on top of it."""
from __future__ import annotations

import json

import pytest

from core.errors import (InvalidConfigError, InvalidPartitionsError, InvalidTopicError,
                         TopicExistsError, UnknownTopicError)
from core.log_manager import CLEAN_SHUTDOWN, LogManager
from core.metadata import LocalMetadataStore
from tests.logutil import batch


def test_topics_persist_atomically(tmp_path):
    store = LocalMetadataStore(tmp_path)
    t = store.create_topic("orders", 3, {"retention.ms": "1000"})
    assert len(t.topic_id) == 32
    with pytest.raises(TopicExistsError):
        store.create_topic("orders", 1)
    store.alter_topic_configs("orders", {"segment.bytes": "4096", "retention.ms": None})
    store.set_partitions("orders", 5)
    again = LocalMetadataStore(tmp_path)
    got = again.get_topic("orders")
    assert got.partitions == 5 and dict(got.configs) == {"segment.bytes": "4096"}
    assert got.topic_id == t.topic_id
    assert not list(tmp_path.glob(".*.tmp"))
    assert json.loads((tmp_path / "metadata.json").read_text())["version"] == 1
    again.delete_topic("orders")
    assert LocalMetadataStore(tmp_path).topics() == {}


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "spaces here", "ünïcode"])
def test_illegal_topic_names(tmp_path, name):
    with pytest.raises(InvalidTopicError):
        LocalMetadataStore(tmp_path).create_topic(name, 1)


def test_bad_requests_are_refused(tmp_path):
    store = LocalMetadataStore(tmp_path)
    with pytest.raises(InvalidConfigError, match="unknown topic config"):
        store.create_topic("t", 1, {"retention.msx": "1"})
    with pytest.raises(InvalidConfigError, match="integer"):
        store.create_topic("t", 1, {"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError):
        store.create_topic("t", 1, {"cleanup.policy": "forever"})
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("t", 0)
    store.create_topic("t", 2)
    with pytest.raises(InvalidPartitionsError):
        store.set_partitions("t", 1)
    with pytest.raises(UnknownTopicError):
        store.delete_topic("nope")


def test_corrupt_metadata_file_is_reported(tmp_path):
    (tmp_path / "metadata.json").write_text("{not json")
    with pytest.raises(ValueError, match="metadata.json"):
        LocalMetadataStore(tmp_path)


def test_log_manager_life_cycle(tmp_path):
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    info = manager.startup()
    assert info.clean_shutdown and info.partitions == 0
    manager.create_topic("events", 2)
    manager.get_log("events", 1).append(batch(3))
    assert manager.flush_dirty() == 1
    assert manager.flush_dirty() == 0
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()

    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    info = manager.startup()
    assert info.clean_shutdown and info.partitions == 2 and info.recovered_segments == 0
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    assert manager.get_log("events", 1).next_offset == 3
    manager.add_partitions("events", 3)
    assert manager.get_log("events", 2).next_offset == 0
    manager.alter_topic_configs("events", {"retention.ms": "5"})
    assert manager.get_log("events", 0).config.retention_ms == 5
    manager.delete_topic("events")
    assert not list(tmp_path.glob("events-*"))
    with pytest.raises(UnknownTopicError):
        manager.get_log("events", 0)
    # No shutdown: the next start sees a crash and recovers.
    manager.create_topic("more", 1)
    manager.get_log("more", 0).append(batch(2))
    manager.flush_dirty()
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    info = manager.startup()
    assert not info.clean_shutdown and info.recovered_segments == 1
    assert manager.get_log("more", 0).next_offset == 2


def test_changes_are_journaled_and_replayed_and_a_torn_last_line_is_ignored(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.create_topic("a", 1)
    store.create_topic("b", 2)
    store.delete_topic("a")
    store.set_partitions("b", 4)
    journal = tmp_path / "metadata.journal"
    assert len(journal.read_bytes().splitlines()) == 4
    with open(journal, "ab") as f:  # a crash in the middle of the next append
        f.write(b'{"name":"c","topic":{"partiti')
    again = LocalMetadataStore(tmp_path)
    assert {n: t.partitions for n, t in again.topics().items()} == {"b": 4}
    assert not journal.exists()  # start-up folded it into the snapshot
    assert set(json.loads((tmp_path / "metadata.json").read_text())["topics"]) == {"b"}


def test_a_damaged_journal_line_before_the_last_is_reported(tmp_path):
    LocalMetadataStore(tmp_path).create_topic("a", 1)
    (tmp_path / "metadata.journal").write_bytes(b'garbage\n{"delete":"a"}\n')
    with pytest.raises(ValueError, match="metadata.journal line 1"):
        LocalMetadataStore(tmp_path)


def test_the_journal_is_compacted_once_it_outgrows_the_snapshot(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.MIN_COMPACT_BYTES = 2048
    for i in range(200):
        store.create_topic(f"t{i}", 1)
    journal = tmp_path / "metadata.journal"
    snapshot = json.loads((tmp_path / "metadata.json").read_text())["topics"]
    assert 0 < len(snapshot) < 200  # compacted along the way, not only at start-up
    assert journal.stat().st_size <= max(2048, (tmp_path / "metadata.json").stat().st_size) + 200
    assert len(LocalMetadataStore(tmp_path).topics()) == 200


def test_a_journal_left_behind_the_snapshot_it_was_folded_into_replays_to_the_same_state(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.create_topic("a", 1)
    store.alter_topic_configs("a", {"retention.ms": "5"})
    store.delete_topic("a")
    store.create_topic("a", 3)
    store.create_topic("b", 1)
    kept = (tmp_path / "metadata.journal").read_bytes()
    before = LocalMetadataStore(tmp_path).topics()  # compacts into the snapshot
    (tmp_path / "metadata.journal").write_bytes(kept)  # a crash before the journal was emptied
    assert LocalMetadataStore(tmp_path).topics() == before
    assert before["a"].partitions == 3 and dict(before["a"].configs) == {}


def test_a_group_commit_of_many_logs_syncs_the_file_system_once(tmp_path, monkeypatch):
    import core.log_manager as log_manager
    calls = []
    real = log_manager._syncfs
    assert real is not None  # Linux: libc has syncfs
    monkeypatch.setattr(log_manager, "_syncfs", lambda d: (calls.append(d), real(d)))
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    manager.startup()
    manager.create_topic("wide", log_manager.SYNCFS_FROM)
    for p in range(log_manager.SYNCFS_FROM):
        manager.get_log("wide", p).append(batch(2))
    manager.get_log("wide", 0).append(batch(1))
    assert manager.flush_dirty() == log_manager.SYNCFS_FROM and calls == [tmp_path]
    assert [manager.get_log("wide", p).flushed_offset for p in range(3)] == [3, 2, 2]
    manager.get_log("wide", 1).append(batch(1))
    assert manager.flush_dirty() == 1 and len(calls) == 1  # a few logs: an fsync each
    assert manager.get_log("wide", 1).flushed_offset == 3
    manager.shutdown()


def test_the_partition_budget_refuses_topics_and_partitions_beyond_it(tmp_path):
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path), max_partitions=5)
    manager.startup()
    manager.create_topic("a", 3)
    with pytest.raises(InvalidPartitionsError, match=r"3 more partition\(s\) would make 6, above this broker's "
                                                      r"limit of 5 .*--max-partitions"):
        manager.create_topic("b", 3)
    assert manager.store.get_topic("b") is None
    manager.create_topic("b", 2)
    with pytest.raises(InvalidPartitionsError, match="would make 6"):
        manager.add_partitions("a", 4)
    assert manager.store.get_topic("a").partitions == 3
    manager.shutdown()


def test_the_partition_total_follows_creates_growth_deletes_and_a_reopen(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.create_topic("a", 3)
    store.create_topic("b", 1)
    store.set_partitions("b", 4)
    store.alter_topic_configs("a", {"retention.ms": "1000"})
    store.delete_topic("a")
    store.create_topic("c", 2)
    assert store.partition_total() == 6 == sum(t.partitions for t in store.topics().values())
    assert LocalMetadataStore(tmp_path).partition_total() == 6
