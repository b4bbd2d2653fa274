"""Storage for replication: the leader-epoch cache, replica appends, truncation, the replicated HW."""
from __future__ import annotations

import pytest

from core.config import TopicConfig
from core.epochs import FILE as EPOCH_FILE
from core.epochs import LeaderEpochCache
from core.errors import OffsetMismatchError, RecordTooLargeError
from core.log import PartitionLog
from tests.logutil import FakeClock, batch
from wire.records import CorruptBatchError, Record, decode_batch, encode_batch, iter_batches

TS = 1_700_000_000_000


def open_log(path, *, recover=False, **cfg):
    config = TopicConfig.from_strings({k.replace("_", "."): str(v) for k, v in cfg.items()})
    return PartitionLog(path, config, clock=FakeClock(), recover=recover)


def small(path, **cfg):
    """Small segments and a dense index, so a few dozen batches span several segments."""
    return open_log(path, segment_bytes=1024, index_interval_bytes=150, **cfg)


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for pos, _h in iter_batches(bytearray(data)) for r in decode_batch(data, pos).records]


def stored_files(log: PartitionLog) -> dict[str, bytes]:
    for segment in log.segments:  # index entries gathered in memory go to the files first
        segment.offset_index.write_pending()
        segment.time_index.write_pending()
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex")}


def fill_leader(log: PartitionLog, n: int = 40, *, first_epoch: int = 0, start: int = 0) -> None:
    """``n`` produce requests of 1-3 records; the leader epoch goes up every 15; timestamps wobble."""
    for i in range(start, start + n):
        log.append(batch(1 + i % 3, size=20 + i % 7, ts=TS + i * 10 - (i % 4) * 25, prefix=b"r%d-" % i),
                   leader_epoch=first_epoch + i // 15)


def leader_batch(base: int, n: int = 1, *, epoch: int = 0, last_offset_delta: int | None = None) -> bytes:
    """A batch as a leader stores it: ``n`` keyed records from offset ``base``, stamped with ``epoch``."""
    records = [Record(offset=base + i, timestamp=TS, key=b"k%d" % i, value=b"v") for i in range(n)]
    return encode_batch(records, base_offset=base, partition_leader_epoch=epoch, last_offset_delta=last_offset_delta)


def replicate(leader: PartitionLog, follower: PartitionLog, chunk: int) -> None:
    """What a follower's fetch loop does: read from the leader at the follower's LEO, append."""
    while follower.next_offset < leader.next_offset:
        data = leader.read(follower.next_offset, chunk, max_offset=leader.next_offset).records
        follower.append_replica(data)


# --- the leader-epoch cache -------------------------------------------------------

def test_empty_cache(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert (cache.latest_epoch, cache.entries, cache.loaded) == (-1, [], False)
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.end_offset_for(-1, 10) == (-1, -1)
    assert not (tmp_path / EPOCH_FILE).exists()


def test_assign_records_growing_epochs_only_and_persists_as_kafka_does(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.assign(0, 0)
    assert not cache.assign(0, 0)  # the same entry
    assert not cache.assign(0, 5)  # the same epoch, later: still began at 0
    assert cache.assign(2, 10)
    assert not cache.assign(1, 12)  # an older epoch never comes back
    assert not cache.assign(-1, 20)
    assert cache.assign(5, 30)
    assert cache.entries == [(0, 0), (2, 10), (5, 30)] and cache.latest_epoch == 5
    assert (tmp_path / EPOCH_FILE).read_text() == "0\n3\n0 0\n2 10\n5 30\n"
    again = LeaderEpochCache(tmp_path)
    assert again.loaded and again.entries == [(0, 0), (2, 10), (5, 30)]


def test_assign_drops_an_epoch_that_never_held_a_record(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(2, 10)  # leader in epoch 2, then lost leadership before appending anything
    cache.assign(3, 10)
    assert cache.entries == [(1, 0), (3, 10)]


def test_end_offset_for_follows_offset_for_leader_epoch(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, start)
    leo = 27
    assert cache.end_offset_for(5, leo) == (5, 27)  # the latest epoch ends at the LEO
    assert cache.end_offset_for(4, leo) == (3, 20)  # unknown epoch: the one below it, ended by the next
    assert cache.end_offset_for(3, leo) == (3, 20)
    assert cache.end_offset_for(2, leo) == (1, 10)
    assert cache.end_offset_for(1, leo) == (1, 10)
    assert cache.end_offset_for(0, leo) == (-1, -1)  # below the first epoch
    assert cache.end_offset_for(6, leo) == (-1, -1)  # above the latest
    assert cache.end_offset_for(-1, leo) == (-1, -1)


def test_truncate_from_end(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, start)
    assert not cache.truncate_from_end(21)  # epoch 5 keeps its start
    assert cache.truncate_from_end(20)  # an epoch starting at the cut is gone
    assert cache.entries == [(1, 0), (3, 10)]
    assert cache.truncate_from_end(5)
    assert cache.entries == [(1, 0)]
    assert LeaderEpochCache(tmp_path).entries == [(1, 0)]
    assert cache.truncate_from_end(0)
    assert cache.entries == [] and LeaderEpochCache(tmp_path).entries == []


@pytest.mark.parametrize("offset, expected", [
    (0, [(1, 0), (3, 10), (5, 20)]),
    (5, [(1, 5), (3, 10), (5, 20)]),
    (10, [(3, 10), (5, 20)]),
    (15, [(3, 15), (5, 20)]),
    (20, [(5, 20)]),
    (99, [(5, 99)]),
])
def test_truncate_from_start(tmp_path, offset, expected):
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(offset)
    assert cache.entries == expected
    assert LeaderEpochCache(tmp_path).entries == expected


def test_truncate_from_start_before_the_first_epoch_changes_nothing(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(4, 10)
    assert not cache.truncate_from_start(3)
    assert cache.entries == [(4, 10)]


@pytest.mark.parametrize("text", ["", "1\n1\n0 0\n", "0\n2\n0 0\n", "0\n2\n3 0\n2 5\n", "0\n1\nx y\n", "0\n"])
def test_unreadable_file_is_not_loaded(tmp_path, text):
    (tmp_path / EPOCH_FILE).write_text(text)
    cache = LeaderEpochCache(tmp_path)
    assert not cache.loaded and cache.entries == []


# --- the log keeps its cache --------------------------------------------------------

def test_single_node_append_records_epoch_zero_once(tmp_path):
    log = open_log(tmp_path / "t-0")
    for _ in range(3):
        log.append(batch(2))
    assert log.epochs.entries == [(0, 0)]
    log.append(batch(1), leader_epoch=4)
    log.append(batch(1), leader_epoch=4)
    assert log.epochs.entries == [(0, 0), (4, 6)]
    log.close()
    assert open_log(tmp_path / "t-0").epochs.entries == [(0, 0), (4, 6)]


def test_appends_leave_the_checkpoint_to_the_flush_and_a_kill_before_it_is_recovered(tmp_path):
    log = small(tmp_path / "t-0")
    fill_leader(log, 20, first_epoch=1)
    log.flush()
    on_disk = (log.directory / EPOCH_FILE).read_text()
    assert on_disk.split("\n")[2:4] == [f"{e} {o}" for e, o in log.epochs.entries] and len(log.epochs) == 2
    log.append(batch(1), leader_epoch=7)
    assert (log.directory / EPOCH_FILE).read_text() == on_disk  # not written on the append path
    expected = log.epochs.entries
    # kill -9 now: the batch is in the file (page cache), its epoch is not in the checkpoint
    for recover in (True, False):
        reopened = small(tmp_path / "t-0", recover=recover)
        assert reopened.epochs.entries == expected and expected[-1] == (7, log.next_offset - 1)
    log.flush()
    assert (log.directory / EPOCH_FILE).read_text().split("\n")[4] == f"7 {log.next_offset - 1}"


def test_a_one_epoch_log_writes_no_checkpoint_and_reads_its_epoch_back_from_the_batches(tmp_path):
    log = small(tmp_path / "t-0")
    fill_leader(log, 10, first_epoch=3)  # one epoch: 3 from offset 0, a few segments
    log.flush()
    assert log.epochs.entries == [(3, 0)] and not (log.directory / EPOCH_FILE).exists()
    log.close()
    for recover in (False, True):
        reopened = small(tmp_path / "t-0", recover=recover)
        assert reopened.epochs.entries == [(3, 0)] and not (log.directory / EPOCH_FILE).exists()
    reopened.append(batch(1), leader_epoch=5)  # a second epoch: from now on the file is kept
    reopened.flush()
    assert LeaderEpochCache(log.directory).entries == [(3, 0), (5, reopened.next_offset - 1)]


def test_an_epoch_beginning_inside_the_active_segment_is_found_without_a_checkpoint(tmp_path):
    log = open_log(tmp_path / "t-0", index_interval_bytes=150)  # one segment, several index entries
    fill_leader(log, 40, first_epoch=1)  # epochs 1, 2 and 3, all in the active segment
    expected = log.epochs.entries
    assert [e for e, _ in expected] == [1, 2, 3] and len(log.segments) == 1
    log.close()
    (log.directory / EPOCH_FILE).unlink()
    assert open_log(tmp_path / "t-0").epochs.entries == expected


def test_an_assigned_epoch_without_batches_is_kept_in_the_file(tmp_path):
    log = small(tmp_path / "t-0")
    log.epochs.assign(4, 0)  # a new leader's epoch, before it appends anything (core.replication)
    log.close()
    assert small(tmp_path / "t-0").epochs.entries == [(4, 0)]


def test_a_flush_that_finds_its_partition_deleted_keeps_nothing_and_raises_nothing(tmp_path):
    log = small(tmp_path / "t-0")
    log.append(batch(2), leader_epoch=1)
    end = log.next_offset
    log.delete()  # e.g. an exclusive queue's topic, deleted while the group commit ran
    log.flushed(end)
    assert not (tmp_path / "t-0").exists()


def test_a_missing_checkpoint_is_rebuilt_from_the_batches(tmp_path):
    log = small(tmp_path / "t-0")
    fill_leader(log, 50, first_epoch=2)
    assert len(log.segments) > 3
    expected = log.epochs.entries
    assert [e for e, _ in expected] == [2, 3, 4, 5]
    log.close()
    (log.directory / EPOCH_FILE).unlink()
    reopened = small(tmp_path / "t-0")
    assert reopened.epochs.entries == expected
    assert (log.directory / EPOCH_FILE).exists()


def test_retention_and_delete_records_move_the_first_epoch(tmp_path):
    log = small(tmp_path / "t-0", flush_messages=10)
    fill_leader(log, 40)  # epochs 0 @0, 1 @30, 2 @60
    assert log.epochs.entries == [(0, 0), (1, 30), (2, 60)]
    log.delete_records(35)
    assert log.epochs.entries == [(1, 35), (2, 60)]
    log.delete_records(-1)
    assert log.epochs.entries == [(2, log.next_offset)]
    log.close()
    assert small(tmp_path / "t-0").epochs.entries == [(2, log.next_offset)]


# --- append_replica -----------------------------------------------------------------

@pytest.mark.parametrize("chunk", [1, 200, 700, 1 << 20])
def test_replica_is_byte_identical_to_its_leader(tmp_path, chunk):
    leader, follower = small(tmp_path / "leader"), small(tmp_path / "follower")
    fill_leader(leader, 60)
    assert len(leader.segments) >= 5
    replicate(leader, follower, chunk)
    assert stored_files(follower) == stored_files(leader)  # logs and both indexes
    assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (1, 30), (2, 60), (3, 90)]
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert [s.max_timestamp for s in follower.segments] == [s.max_timestamp for s in leader.segments]
    follower.close()
    reopened = small(tmp_path / "follower")
    assert reopened.next_offset == leader.next_offset
    assert reopened.epochs.entries == leader.epochs.entries


def test_append_replica_keeps_offsets_and_epochs_and_reports_them(tmp_path):
    leader, follower = open_log(tmp_path / "leader"), open_log(tmp_path / "follower")
    leader.append(batch(3), leader_epoch=7)
    leader.append(batch(2), leader_epoch=9)
    data = leader.read(0, 1 << 20, max_offset=leader.next_offset).records
    info = follower.append_replica(data)
    assert (info.first_offset, info.last_offset, info.batches, info.records, info.bytes) == (0, 4, 2, 5, len(data))
    assert follower.next_offset == 5
    assert follower.epochs.entries == [(7, 0), (9, 3)]
    follower.flush()
    assert follower.read(0, 1 << 20).records == data


def test_append_replica_refuses_offsets_that_do_not_continue_the_log(tmp_path):
    leader, follower = open_log(tmp_path / "leader"), open_log(tmp_path / "follower")
    for _ in range(4):
        leader.append(batch(2))
    chunks = [leader.read(o, 1 << 20, max_offset=8).records for o in (0, 2, 4)]
    with pytest.raises(OffsetMismatchError) as excinfo:
        follower.append_replica(chunks[1])  # starts at 2, the follower's log ends at 0
    assert (excinfo.value.offset, excinfo.value.log_end_offset) == (2, 0)
    follower.append_replica(leader.read(0, 1, max_offset=8).records)  # offsets 0-1
    with pytest.raises(OffsetMismatchError):
        follower.append_replica(chunks[0])  # already have it
    first, third = leader.read(2, 1, max_offset=8).records, leader.read(6, 1, max_offset=8).records
    with pytest.raises(OffsetMismatchError, match="batch 1 starts at 6, expected 4"):
        follower.append_replica(first + third)  # a hole between batches
    assert (follower.next_offset, follower.size_bytes) == (2, len(chunks[0]) - len(chunks[1]))


def test_append_replica_validates_like_append(tmp_path):
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower", max_message_bytes=200)
    leader.append(batch(1))
    data = bytearray(leader.read(0, 1 << 20, max_offset=1).records)
    data[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        follower.append_replica(bytes(data))
    with pytest.raises(CorruptBatchError):
        follower.append_replica(bytes(data[:-3]))
    leader.append(batch(20, size=50))
    with pytest.raises(RecordTooLargeError):
        follower.append_replica(leader.read(1, 1 << 20, max_offset=leader.next_offset).records)
    assert follower.next_offset == 0 and follower.size_bytes == 0


def test_append_replica_accepts_compaction_gaps_on_a_compacted_topic(tmp_path):
    follower = open_log(tmp_path / "follower", cleanup_policy="compact")
    first = leader_batch(0, epoch=1)
    after_gap = leader_batch(5, epoch=1, last_offset_delta=2)  # offsets 1-4 and 6-7 compacted away
    follower.append_replica(first + after_gap)
    assert follower.next_offset == 8
    follower.append_replica(leader_batch(10, epoch=2))
    assert follower.next_offset == 11 and follower.epochs.entries == [(1, 0), (2, 10)]
    follower.flush()
    assert offsets_of(follower.read(0, 1 << 20).records) == [0, 5, 10]
    with pytest.raises(OffsetMismatchError):
        follower.append_replica(leader_batch(9))  # never backwards
    plain = open_log(tmp_path / "plain")
    with pytest.raises(OffsetMismatchError):
        plain.append_replica(first + after_gap)


def test_an_empty_follower_whose_start_is_inside_the_first_batch_restarts_at_it(tmp_path):
    follower = open_log(tmp_path / "follower")
    follower.append(batch(10))
    follower.flush()
    follower.delete_records(-1)  # empty, starting at 10
    assert (follower.log_start_offset, follower.next_offset, follower.size_bytes) == (10, 10, 0)
    follower.append_replica(leader_batch(8, 5, epoch=3))  # the leader's start, 10, is inside it
    assert (follower.log_start_offset, follower.next_offset) == (8, 13)
    assert follower.epochs.entries == [(3, 8)]
    with pytest.raises(OffsetMismatchError):
        follower.append_replica(leader_batch(11, 5, epoch=3))  # not empty any more


# --- truncate_to --------------------------------------------------------------------

def leader_and_follower(tmp_path, n=60):
    leader, follower = small(tmp_path / "leader"), small(tmp_path / "follower")
    fill_leader(leader, n)
    replicate(leader, follower, 1 << 20)
    return leader, follower


def batch_starts(log: PartitionLog) -> list[int]:
    return [bp.base_offset for s in log.segments for bp in s.iter_positions()]


def test_truncate_in_the_middle_of_the_active_segment(tmp_path):
    leader, follower = leader_and_follower(tmp_path)
    starts = [bp.base_offset for bp in follower.active.iter_positions()]
    assert len(starts) > 3
    cut = starts[2]
    segments = len(follower.segments)
    assert follower.truncate_to(cut) == cut
    assert follower.next_offset == cut and len(follower.segments) == segments
    assert batch_starts(follower) == [o for o in batch_starts(leader) if o < cut]
    replicate(leader, follower, 333)
    assert stored_files(follower) == stored_files(leader)


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path):
    leader, follower = leader_and_follower(tmp_path)
    starts = batch_starts(follower)
    i = next(i for i in range(len(starts) - 1) if starts[i + 1] - starts[i] == 3)
    assert follower.truncate_to(starts[i] + 1) == starts[i]
    replicate(leader, follower, 1 << 20)
    assert stored_files(follower) == stored_files(leader)


def test_truncate_at_a_segment_boundary(tmp_path):
    leader, follower = leader_and_follower(tmp_path)
    boundary = follower.segments[3].base_offset
    assert follower.truncate_to(boundary) == boundary
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments[:4]]
    assert follower.active.empty and follower.active.base_offset == boundary
    assert follower.active.max_timestamp == -1 and len(follower.active.offset_index) == 0
    replicate(leader, follower, 500)
    assert stored_files(follower) == stored_files(leader)


def test_truncate_spanning_segments_then_append_continues_the_offsets(tmp_path):
    leader, follower = leader_and_follower(tmp_path)
    assert len(follower.segments) >= 5
    second = follower.segments[1]
    cut = [bp.base_offset for bp in second.iter_positions()][2]
    follower.truncate_to(cut)
    assert len(follower.segments) == 2 and follower.next_offset == cut
    assert sorted(p.name for p in follower.directory.glob("*.log")) == [
        s.log_path.name for s in leader.segments[:2]]
    assert follower.epochs.entries == [e for e in leader.epochs.entries if e[1] < cut]
    # The follower becomes leader of a new epoch: its own appends continue from the cut.
    info = follower.append(batch(4), leader_epoch=9)
    assert (info.first_offset, info.last_offset) == (cut, cut + 3)
    assert follower.epochs.latest_epoch == 9 and follower.epochs.entries[-1] == (9, cut)
    assert [r.offset for b in follower.replay() for r in b.records] == list(range(cut + 4))


def test_truncated_indexes_and_timestamps_match_a_log_that_never_had_the_tail(tmp_path):
    leader, follower = leader_and_follower(tmp_path)
    never = small(tmp_path / "never")
    starts = batch_starts(leader)
    cut = starts[len(starts) // 2 + 1]
    while never.next_offset < cut:
        never.append_replica(leader.read(never.next_offset, 1, max_offset=cut).records)
    follower.truncate_to(cut)
    assert stored_files(follower) == stored_files(never)
    for mine, theirs in zip(follower.segments, never.segments, strict=True):
        assert (mine.size, mine.next_offset, mine.max_timestamp, mine.first_timestamp) == (
            theirs.size, theirs.next_offset, theirs.max_timestamp, theirs.first_timestamp)
        assert mine._bytes_since_index == theirs._bytes_since_index


@pytest.mark.parametrize("recover", [False, True])
def test_reopen_after_truncation_keeps_the_new_end(tmp_path, recover):
    leader, follower = leader_and_follower(tmp_path)
    cut = batch_starts(follower)[-7]
    follower.truncate_to(cut)
    epochs = follower.epochs.entries
    files = stored_files(follower)
    follower.close()
    reopened = small(tmp_path / "follower", recover=recover)
    assert reopened.next_offset == cut
    assert reopened.epochs.entries == epochs
    assert reopened.recovery_info.truncated_bytes == 0
    assert stored_files(reopened) == files  # nothing rebuilt: the indexes were already right
    replicate(leader, reopened, 1 << 20)
    assert stored_files(reopened) == stored_files(leader)


def test_truncate_at_or_past_the_end_changes_nothing(tmp_path):
    leader, follower = leader_and_follower(tmp_path, n=10)
    files, end = stored_files(follower), follower.next_offset
    assert follower.truncate_to(end) == end
    assert follower.truncate_to(end + 5) == end
    assert stored_files(follower) == files


def test_truncate_below_the_log_start_empties_the_log_there(tmp_path):
    log = small(tmp_path / "t-0")
    fill_leader(log, 40)
    log.flush()
    log.delete_records(50)
    assert log.truncate_to(45) == 45
    assert (log.log_start_offset, log.next_offset, log.size_bytes) == (45, 45, 0)
    assert [s.base_offset for s in log.segments] == [45] and log.epochs.entries == []
    info = log.append(batch(2), leader_epoch=3)
    assert info.first_offset == 45 and log.epochs.entries == [(3, 45)]
    log.close()
    reopened = small(tmp_path / "t-0")
    assert (reopened.log_start_offset, reopened.next_offset) == (45, 47)


def test_restart_at_starts_a_log_again_empty_there_and_a_follower_catches_up_from_it(tmp_path):
    """A follower behind the leader's log start, or a stream created with x-stream-initial-offset."""
    leader = small(tmp_path / "leader-0")
    leader.restart_at(1000)
    assert (leader.log_start_offset, leader.next_offset, leader.high_watermark, leader.flushed_offset) == \
        (1000, 1000, 1000, 1000)
    fill_leader(leader, 10)
    follower = small(tmp_path / "follower-0")
    fill_leader(follower, 2)  # a stale tail, all of it below the leader's start
    follower.restart_at(leader.log_start_offset)
    assert follower.epochs.entries == [] and follower.size_bytes == 0
    replicate(leader, follower, 300)
    assert stored_files(follower) == stored_files(leader)
    follower.close()
    reopened = small(tmp_path / "follower-0")
    assert (reopened.log_start_offset, reopened.next_offset) == (1000, leader.next_offset)
    with pytest.raises(ValueError):
        reopened.restart_at(-1)


def test_truncate_to_the_log_start_inside_a_batch(tmp_path):
    log = open_log(tmp_path / "t-0", flush_messages=100)
    log.append(batch(5))
    log.append(batch(5))
    log.delete_records(7)  # the start is inside the second batch (5-9)
    assert log.truncate_to(8) == 5  # that batch goes; the start follows the end back
    assert (log.log_start_offset, log.next_offset) == (5, 5)
    assert log.read(5, 1000).records == b""


def test_truncation_pulls_back_flushed_offset_and_hw(tmp_path):
    leader, follower = leader_and_follower(tmp_path, n=20)
    follower.flush()
    assert follower.high_watermark == follower.next_offset
    cut = batch_starts(follower)[5]
    follower.truncate_to(cut)
    assert follower.flushed_offset == cut and follower.high_watermark == cut
    assert follower.flush() == cut
    follower.append(batch(1))
    assert follower.high_watermark == cut  # flush.messages=1: waits for the fsync as always
    follower.flush()
    assert follower.high_watermark == cut + 1


# --- the high watermark -------------------------------------------------------------

def test_single_node_hw_is_unchanged(tmp_path):
    synced = open_log(tmp_path / "a-0")
    synced.append(batch(2))
    assert (synced.high_watermark, synced.local_end_offset) == (0, 0)
    synced.flush()
    assert (synced.high_watermark, synced.local_end_offset) == (2, 2)
    lazy = open_log(tmp_path / "b-0", flush_messages=100)
    lazy.append(batch(2))
    assert (lazy.high_watermark, lazy.local_end_offset) == (2, 2)


def test_replicated_hw_moves_only_forward_and_never_past_the_end(tmp_path):
    log = open_log(tmp_path / "t-0", flush_messages=100)
    log.replicated = True
    log.append(batch(5))
    assert log.high_watermark == 0 and log.local_end_offset == 5  # the followers decide
    assert log.read(0, 1000).records == b""
    assert log.advance_high_watermark(3) == 3
    assert offsets_of(log.read(0, 1000).records) == [0, 1, 2, 3, 4]  # whole batch, starts below the HW
    assert log.advance_high_watermark(2) == 3  # never backwards
    assert log.advance_high_watermark(99) == 5  # never past the LEO
    log.append(batch(1))
    assert log.high_watermark == 5
    log.truncate_to(3)  # a follower cut back below its HW: capped at the new LEO
    assert log.high_watermark == 0 and log.next_offset == 0
