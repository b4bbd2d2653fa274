"""The leader's side of replication (core.replication.ReplicaManager): ISR growth and shrinking."""
from __future__ import annotations

from dataclasses import replace

from core.cluster.view import PartitionState
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from core.replication import LEADER, Replica, ReplicaManager
from tests.logutil import FakeClock


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
