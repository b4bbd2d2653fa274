"""KIP-848 groups kept in __consumer_offsets (core.groups.consumer_state): a restarted or new
coordinator rebuilds each group with its members, epochs and assignments."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.groups.consumer_group import HeartbeatRequest
from core.groups.coordinator import GroupCoordinator
from tests.test_groups import FakeClock, open_logs


def _hb(gc, member, epoch, owned=None, **kw):
    return gc.consumer.heartbeat(HeartbeatRequest("g", member, epoch, owned=owned, **kw))


def test_members_epochs_and_assignments_come_back_after_a_restart(tmp_path):
    clock = FakeClock()
    logs = open_logs(tmp_path / "data", clock)
    logs.create_topic("t", 4)
    gc = GroupCoordinator(logs, clock)
    gc.load()
    a = _hb(gc, "a", 0, owned={}, subscribed_topic_names=["t"], rebalance_timeout_ms=30000)
    b = _hb(gc, "b", 0, owned={}, subscribed_topic_names=["t"], rebalance_timeout_ms=30000)
    a2 = _hb(gc, "a", a.member_epoch)  # a is told to give two partitions away
    kept = a2.assignment["t"]
    a3 = _hb(gc, "a", a.member_epoch, owned={"t": set(kept)})
    b2 = _hb(gc, "b", b.member_epoch, owned={})
    assert a3.member_epoch == b2.member_epoch == 2 and b2.assignment["t"] == {0, 1, 2, 3} - kept
    logs.shutdown()

    logs = open_logs(tmp_path / "data", clock)
    gc = GroupCoordinator(logs, clock)
    gc.load()
    group = gc.consumer.groups["g"]
    assert group.group_epoch == 2 and set(group.members) == {"a", "b"}
    assert group.members["a"].assigned == {"t": kept} and group.members["b"].assigned == {"t": {0, 1, 2, 3} - kept}
    again = _hb(gc, "b", 2, owned={"t": {0, 1, 2, 3} - kept})  # no rejoin: the same member, the same epoch
    assert again.error == ErrorCode.none and again.member_epoch == 2
    assert "g" not in gc._groups  # not also an empty classic group
    # a member that leaves is gone after the next restart too; an empty group deleted leaves a tombstone
    _hb(gc, "a", -1)
    _hb(gc, "b", -1)
    assert gc.consumer.delete("g") == ErrorCode.none
    logs.shutdown()
    logs = open_logs(tmp_path / "data", clock)
    gc = GroupCoordinator(logs, clock)
    gc.load()
    assert "g" not in gc.consumer.groups
    logs.shutdown()
