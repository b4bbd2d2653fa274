"""The transaction coordinator and per-partition transaction state, over real logs on disk."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from core.cleaner import compact
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from core.offsets import OFFSETS_TOPIC, OffsetAndMetadata, OffsetStore
from core.producers import ProducerStates
from core.transactions import (COMPLETE_ABORT, COMPLETE_COMMIT, ONGOING, PREPARE_COMMIT, Transaction,
                               TransactionCoordinator, decode_value, encode_value)
from tests.logutil import FakeClock
from wire.records import decode_batch, encode_batch, iter_batches, parse_control_record


@pytest.fixture
def clock():
    return FakeClock()


class Node:
    """One broker's worth of core state on a data directory; ``reopen`` is a restart."""

    def __init__(self, data_dir, clock):
        self.data_dir, self.clock = data_dir, clock
        self.reopen()

    def reopen(self):
        self.logs = LogManager(self.data_dir, LocalMetadataStore(self.data_dir, clock=self.clock), clock=self.clock)
        self.logs.startup()
        self.producers = ProducerStates(self.data_dir)
        self.offsets = OffsetStore(self.logs, self.clock)
        self.offsets.load()
        self.txns = TransactionCoordinator(self.logs, self.producers, self.offsets, self.clock)
        self.load_steps = self.txns.load()
        if ("t", 0) not in self.logs.logs:
            self.logs.create_topic("t", 1)
        return self

    def produce(self, pid, epoch, seq, values, transactional=True):
        plog = self.logs.get_log("t", 0)
        now = int(self.clock() * 1000)
        batch = encode_batch([(i, now, None, v) for i, v in enumerate(values)], producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
        state = self.producers.partition("t", 0, plog)
        assert state.check(decode_batch(batch)).error == ErrorCode.none
        info = plog.append(batch)
        state.record(decode_batch(batch), info.first_offset)
        return info

    def flush(self):
        for plog in self.logs.logs.values():
            plog.flush()

    def lso(self):
        plog = self.logs.get_log("t", 0)
        return self.producers.partition("t", 0, plog).last_stable_offset(plog.next_offset)

    def run(self, step):
        while step.then:
            step = step.then()
        return step


def markers(plog):
    found = []
    data = bytearray(plog.read(0, 1 << 20, max_offset=plog.next_offset).records)
    for pos, header in iter_batches(data):
        if header.is_control:
            found.append((header.base_offset, parse_control_record(decode_batch(data, pos).records[0])[0]))
    return found


def test_value_round_trips_in_kafkas_layout():
    txn = Transaction("tid", 7, 3, 60000, ONGOING, {("a", 0), ("a", 2), ("b", 1)}, 111, 222)
    raw = encode_value(txn)
    assert raw[:2] == b"\x00\x00" and raw[2:10] == (7).to_bytes(8, "big")
    assert decode_value("tid", raw) == txn


def test_commit_writes_markers_and_moves_the_last_stable_offset(tmp_path, clock):
    node = Node(tmp_path, clock)
    step = node.txns.init_producer("tid", 60000)
    pid, epoch = step.producer_id, step.epoch
    assert node.run(node.txns.add_partitions("tid", pid, epoch, [("t", 0)])).error == ErrorCode.none
    assert node.txns.check_produce(pid, epoch, "t", 0) == ErrorCode.none
    assert node.txns.check_produce(pid, epoch, "t", 1) == ErrorCode.invalid_txn_state
    node.produce(pid, epoch, 0, [b"a", b"b"])
    assert node.lso() == 0
    first = node.txns.end_txn("tid", pid, epoch, commit=True)
    assert node.txns.describe("tid").state == PREPARE_COMMIT and first.then is not None
    assert node.txns.end_txn("tid", pid, epoch, commit=True).error == ErrorCode.concurrent_transactions
    node.run(first)
    assert node.txns.describe("tid").state == COMPLETE_COMMIT
    assert markers(node.logs.get_log("t", 0)) == [(2, True)]
    assert node.lso() == 3
    assert node.txns.end_txn("tid", pid, epoch, commit=True).error == ErrorCode.none  # a retry
    assert node.txns.end_txn("tid", pid, epoch, commit=False).error == ErrorCode.invalid_txn_state


def test_abort_is_indexed_and_survives_a_restart(tmp_path, clock):
    node = Node(tmp_path, clock)
    step = node.txns.init_producer("tid", 60000)
    pid, epoch = step.producer_id, step.epoch
    node.run(node.txns.add_partitions("tid", pid, epoch, [("t", 0)]))
    node.produce(pid, epoch, 0, [b"x", b"y", b"z"])
    node.run(node.txns.end_txn("tid", pid, epoch, commit=False))
    node.flush()
    node.logs.shutdown()
    node.reopen()
    state = node.producers.partition("t", 0, node.logs.get_log("t", 0))
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in state.aborted.overlapping(0, 10)] == [(pid, 0, 3)]
    assert state.aborted.overlapping(4, 10) == []
    assert node.txns.describe("tid").state == COMPLETE_ABORT


def test_a_new_holder_fences_and_aborts_the_old_transaction(tmp_path, clock):
    node = Node(tmp_path, clock)
    old = node.txns.init_producer("tid", 60000)
    node.run(node.txns.add_partitions("tid", old.producer_id, old.epoch, [("t", 0)]))
    node.produce(old.producer_id, old.epoch, 0, [b"zombie"])
    new = node.run(node.txns.init_producer("tid", 60000))
    assert (new.producer_id, new.epoch) == (old.producer_id, old.epoch + 1)
    assert markers(node.logs.get_log("t", 0)) == [(1, False)]
    assert node.txns.end_txn("tid", old.producer_id, old.epoch, True).error == ErrorCode.producer_fenced
    assert node.txns.check_produce(old.producer_id, old.epoch, "t", 0) == ErrorCode.invalid_producer_epoch
    # The partition refuses the old epoch by itself too (the marker carried the new one).
    state = node.producers.partition("t", 0, node.logs.get_log("t", 0))
    assert state.check(decode_batch(encode_batch([(0, 1, None, b"late")], producer_id=old.producer_id,
                                                 producer_epoch=old.epoch, base_sequence=1))).error \
        == ErrorCode.invalid_producer_epoch


def test_timeout_aborts_with_an_epoch_bump(tmp_path, clock):
    node = Node(tmp_path, clock)
    step = node.txns.init_producer("tid", 5000)
    node.run(node.txns.add_partitions("tid", step.producer_id, step.epoch, [("t", 0)]))
    node.produce(step.producer_id, step.epoch, 0, [b"slow"])
    assert node.txns.expire() == []
    clock.advance(6)
    for expired in node.txns.expire():
        node.run(expired)
    assert node.txns.describe("tid").state == COMPLETE_ABORT and node.txns.describe("tid").epoch == step.epoch + 1
    assert node.lso() == 2


def test_a_decision_found_at_start_up_is_completed(tmp_path, clock):
    node = Node(tmp_path, clock)
    step = node.txns.init_producer("tid", 60000)
    node.run(node.txns.add_partitions("tid", step.producer_id, step.epoch, [("t", 0)]))
    node.produce(step.producer_id, step.epoch, 0, [b"v"])
    node.txns.end_txn("tid", step.producer_id, step.epoch, commit=True)  # phase one only: then the "crash"
    node.flush()
    node.logs.shutdown()
    node.reopen()
    assert len(node.load_steps) == 1
    assert node.txns.describe("tid").state == COMPLETE_COMMIT
    assert markers(node.logs.get_log("t", 0)) == [(1, True)]


def test_transactional_offsets_apply_on_commit_and_survive_replay(tmp_path, clock):
    node = Node(tmp_path, clock)
    step = node.txns.init_producer("tid", 60000)
    pid, epoch = step.producer_id, step.epoch
    node.run(node.txns.add_offsets("tid", pid, epoch, "g"))
    node.run(node.txns.commit_offsets("tid", "g", pid, epoch, {("t", 0): OffsetAndMetadata(5, -1, "", 0)}))
    assert node.offsets.fetch("g") == {} and node.offsets.has_pending("g")
    node.run(node.txns.end_txn("tid", pid, epoch, commit=True))
    assert node.offsets.fetch("g")[("t", 0)].offset == 5 and not node.offsets.has_pending("g")
    node.run(node.txns.add_offsets("tid", pid, epoch, "g"))
    node.run(node.txns.commit_offsets("tid", "g", pid, epoch, {("t", 0): OffsetAndMetadata(9, -1, "", 0)}))
    node.run(node.txns.end_txn("tid", pid, epoch, commit=False))
    assert node.offsets.fetch("g")[("t", 0)].offset == 5
    node.flush()
    node.logs.shutdown()
    node.reopen()
    assert node.offsets.fetch("g")[("t", 0)].offset == 5


def test_compaction_never_lets_an_aborted_value_shadow_a_committed_one(tmp_path, clock):
    node = Node(tmp_path, clock)
    node.offsets.load()
    node.offsets.commit("g", {("t", 0): OffsetAndMetadata(5, -1, "", 0)})
    step = node.txns.init_producer("tid", 60000)
    pid, epoch = step.producer_id, step.epoch
    node.run(node.txns.add_offsets("tid", pid, epoch, "g"))
    node.run(node.txns.commit_offsets("tid", "g", pid, epoch, {("t", 0): OffsetAndMetadata(9, -1, "", 0)}))
    node.run(node.txns.end_txn("tid", pid, epoch, commit=False))
    plog = node.logs.get_log(OFFSETS_TOPIC, 0)
    plog.roll()
    compact(plog)
    node.offsets.load()
    assert node.offsets.fetch("g")[("t", 0)].offset == 5


def test_cluster_mode_leaves_every_marker_to_the_marker_sender(tmp_path, clock):
    """In cluster mode every partition's marker is returned as remote, one led by the coordinator's
    own broker too (the gateway's sender writes those led here and asks again at a new leader
    until each is on the in-sync replicas: a marker written here inline was lost for good when
    the partition's leadership moved before its followers had it). Complete* waits for the next
    phase; a broker that does not coordinate the producer's id lets its batches through (the
    leader fences by epoch); a new leader of the transaction log finishes what was prepared."""
    node = Node(tmp_path, clock)
    node.logs.create_topic("u", 1)
    node.txns.coordinates_all = False
    step = node.txns.init_producer("tid", 60000)
    pid, epoch = step.producer_id, step.epoch
    node.run(node.txns.add_partitions("tid", pid, epoch, [("t", 0), ("u", 0)]))
    assert node.txns.check_produce(pid + 7, 0, "t", 0) == ErrorCode.none  # coordinated elsewhere
    node.produce(pid, epoch, 0, [b"a"])
    prepared = node.txns.end_txn("tid", pid, epoch, commit=True)
    second = prepared.then()
    assert second.remote is not None and second.remote.partitions == (("t", 0), ("u", 0)) and second.remote.commit
    assert markers(node.logs.get_log("t", 0)) == [] and markers(node.logs.get_log("u", 0)) == []
    assert node.txns.describe("tid").state == PREPARE_COMMIT  # until every leader answered
    # the coordinator dies here; the next leader of __transaction_state-0 reloads it and completes,
    # its markers again through the sender (here: written as the partitions' leaders would)
    steps = node.txns.load_partition(0)
    assert len(steps) == 1 and steps[0].remote.partitions == (("t", 0), ("u", 0))
    remote = steps[0].remote
    for topic in ("t", "u"):
        node.txns.write_marker(topic, 0, remote.producer_id, remote.epoch, remote.commit)
    node.run(steps[0])
    assert node.txns.describe("tid").state == COMPLETE_COMMIT
    assert [m[1] for m in markers(node.logs.get_log("t", 0))] == [True]
    assert [m[1] for m in markers(node.logs.get_log("u", 0))] == [True]
    node.run(second)  # the old step, if it ever goes on, finds the transaction finished
    assert node.txns.describe("tid").state == COMPLETE_COMMIT
