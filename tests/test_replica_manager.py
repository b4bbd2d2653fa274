"""The leader's side of replication (core.replication.ReplicaManager): ISR growth and shrinking."""
from __future__ import annotations

from dataclasses import replace

from core.cluster.view import ClusterView, PartitionState, TopicAssignment
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from core.replication import FOLLOWER, LEADER, Replica, ReplicaManager
from tests.logutil import FakeClock
from wire.records import Record, encode_batch


def test_a_reassignments_old_replica_that_catches_up_with_the_new_leader_leaves_the_isr(tmp_path):
    """The new leader can see the old replica fetch before it sees the move end: it joins the ISR
    then, and once the replica set no longer holds it, the next shrink takes it out at once."""
    clock = FakeClock()
    logs = LogManager(tmp_path / "data", LocalMetadataStore(tmp_path / "data", clock=clock), clock=clock)
    logs.startup()
    logs.create_topic("moving", 1)
    written = []

    def write_isr(topic, partition, state, isr):
        written.append(tuple(isr))
        return replace(state, isr=tuple(isr), version=state.version + 1)
    manager = ReplicaManager(4, write_isr, lag_time_max_ms=3000, clock=clock)
    plog = logs.get_log("moving", 0)
    rep = Replica("moving", 0, plog, PartitionState(4, 1, (1, 2, 4), version=3), (4, 1, 2, 3), role=LEADER)
    manager.replicas[rep.key] = rep
    manager.record_fetch(rep, 3, plog.next_offset)  # the move's old replica, still fetching
    assert rep.state.isr == (1, 2, 4, 3)
    rep.replicas = (4, 1, 2)  # the move ended
    manager._forget_removed(rep)
    manager.shrink_isr()
    assert rep.state.isr == (1, 2, 4)
    manager.shrink_isr()  # nothing more to do
    assert written == [(1, 2, 4, 3), (1, 2, 4)]
    logs.shutdown()


def test_update_hw_of_moves_the_written_leaders_only_and_follows_role_changes(tmp_path):
    """The group commit names the logs it wrote: their leaders' high watermarks move, no other's,
    and a change of role (seen as the view changes) is followed by the lookup and the generation."""
    clock = FakeClock()
    logs = LogManager(tmp_path / "data", LocalMetadataStore(tmp_path / "data", clock=clock), clock=clock)
    logs.startup()
    logs.create_topic("led", 1)
    logs.create_topic("other", 1)
    manager = ReplicaManager(1, lambda *a: None, clock=clock)
    topics = {name: TopicAssignment(name, ((1,),)) for name in ("led", "other")}
    view = ClusterView(topics=topics, states={(name, 0): PartitionState(1, 1, (1,), version=1) for name in topics})
    assert len(manager.apply(view, logs.logs)) == 2
    generation = manager.generation
    led, other = logs.get_log("led", 0), logs.get_log("other", 0)
    for plog in (led, other):
        plog.append(encode_batch([Record(0, 0, None, b"m")]))
        plog.flush()
    assert manager.update_hw_of([led]) is True
    assert (led.high_watermark, other.high_watermark) == (1, 0)
    assert manager.apply(view, logs.logs) == [] and manager.generation == generation  # nothing changed
    moved = ClusterView(topics=topics, states={**view.states, ("other", 0): PartitionState(2, 2, (1, 2), version=2)})
    assert [c.role for c in manager.apply(moved, logs.logs)] == [FOLLOWER]
    assert manager.generation == generation + 1
    assert manager.update_hw_of([other]) is False  # a follower's high watermark is its leader's to move
    logs.shutdown()
