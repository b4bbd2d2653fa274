"""KIP-1071 streams groups in the coordinator (core.groups.streams_group, streams_topology,
streams_assignor, streams_state), over a real log directory: internal topics, revocation before
hand-over, standby tasks on other processes, session time-outs, the offset commit check, and the
group rebuilt from __consumer_offsets by a restarted coordinator."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.groups.consumer_group import HeartbeatRequest
from core.groups.coordinator import GroupCoordinator
from core.groups.streams_group import StreamsHeartbeat
from core.groups.streams_topology import (INCORRECTLY_PARTITIONED_TOPICS, MISSING_SOURCE_TOPICS, Subtopology,
                                          TopicInfo, Topology, configure)
from tests.test_groups import FakeClock, open_logs

ALL = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}


def _topology(source="src", epoch=0) -> Topology:
    return Topology(epoch, [
        Subtopology("0", source_topics=[source], repartition_sinks=["app-rep"]),
        Subtopology("1", repartition_sources=[TopicInfo("app-rep", configs={"cleanup.policy": "delete"})],
                    changelogs=[TopicInfo("app-store-changelog", configs={"cleanup.policy": "compact"})])])


def _join(gc, member, process, group="app", source="src"):
    return gc.streams.heartbeat(StreamsHeartbeat(group, member, 0, rebalance_timeout_ms=30000,
                                                 topology=_topology(source), active={}, standby={}, warmup={},
                                                 process_id=process))


def _hb(gc, member, epoch, active=None, group="app"):
    return gc.streams.heartbeat(StreamsHeartbeat(group, member, epoch, active=active))


def _flat(tasks):
    return {(s, p) for s, ps in tasks.items() for p in ps}


def _coordinator(tmp_path, clock, **kw):
    logs = open_logs(tmp_path / "data", clock)
    gc = GroupCoordinator(logs, clock, **kw)
    gc.load()
    return logs, gc


def test_internal_topics_revocation_and_a_restart_keeps_the_group(tmp_path):
    clock = FakeClock()
    logs, gc = _coordinator(tmp_path, clock)
    logs.create_topic("src", 4)
    a = _join(gc, "a", "p1")
    assert a.error == ErrorCode.none and a.status == [] and a.active == ALL
    assert logs.store.get_topic("app-rep").partitions == logs.store.get_topic("app-store-changelog").partitions == 4
    b = _join(gc, "b", "p2")
    assert b.active == {}  # everything is still a's
    a2 = _hb(gc, "a", a.member_epoch, active=a.active)  # a is told to give half away, at its old epoch
    assert a2.member_epoch == a.member_epoch and len(_flat(a2.active)) == 4
    assert _flat(_hb(gc, "b", b.member_epoch, active={}).active or {}) == set()  # not released yet
    a3 = _hb(gc, "a", a2.member_epoch, active=a2.active)  # released: a moves to the new epoch
    b3 = _hb(gc, "b", b.member_epoch, active={})
    assert a3.member_epoch == b3.member_epoch == gc.streams.groups["app"].assignment_epoch
    assert _flat(a3.active or a2.active) | _flat(b3.active) == _flat(ALL)
    assert not _flat(a2.active) & _flat(b3.active)
    assert gc.commit_offsets("app", b3.member_epoch, "b", None, {("src", 0): (5, -1, "")}).errors == \
        {("src", 0): ErrorCode.none}
    assert gc.commit_offsets("app", b3.member_epoch - 1, "b", None, {("src", 0): (6, -1, "")}).errors == \
        {("src", 0): ErrorCode.stale_member_epoch}
    assert [g.group_type for g in gc.list_groups() if g.group_id == "app"] == ["streams"]
    logs.shutdown()

    logs, gc = _coordinator(tmp_path, clock)  # a new coordinator: the group, not an empty classic one
    group = gc.streams.groups["app"]
    assert set(group.members) == {"a", "b"} and "app" not in gc._groups and "app" not in gc.consumer.groups
    again = _hb(gc, "b", b3.member_epoch, active=b3.active)
    assert again.error == ErrorCode.none and again.member_epoch == b3.member_epoch
    assert gc.fetch_offsets("app", [("src", 0)]) == {("src", 0): (5, -1, "")}
    # b leaves, a's session ends: the empty group can be deleted, and stays deleted
    assert _hb(gc, "b", -1).member_epoch == -1
    clock.advance(46)
    gc.tick()
    assert gc.streams.groups["app"].members == {}
    assert gc.delete_groups(["app"]) == {"app": ErrorCode.none}
    logs.shutdown()
    logs, gc = _coordinator(tmp_path, clock)
    assert "app" not in gc.streams.groups
    logs.shutdown()


def test_standby_tasks_go_to_another_process(tmp_path):
    clock = FakeClock()
    logs, gc = _coordinator(tmp_path, clock, streams_num_standby_replicas=1)
    logs.create_topic("src", 4)
    assert _join(gc, "a", "p1").standby == {}  # one process: nowhere to put a standby
    _join(gc, "a2", "p1")  # a second thread of the same process
    _join(gc, "b", "p2")
    for _ in range(3):
        for m in ("a", "a2", "b"):
            r2 = _hb(gc, m, gc.streams.groups["app"].members[m].member_epoch,
                     active=gc.streams.groups["app"].members[m].active)
            assert r2.error == ErrorCode.none
    members = gc.streams.groups["app"].members
    for sub, ps in ALL.items():
        for p in ps:
            runner = next(m for m in members.values() if p in m.active.get(sub, ()))
            standbys = [m for m in members.values() if p in m.standby.get(sub, ())]
            assert len(standbys) == 1 and standbys[0].process_id != runner.process_id
    logs.shutdown()


def test_topology_status():
    topology = _topology()
    assert configure(topology, {}).status[0][0] == MISSING_SOURCE_TOPICS
    done = configure(topology, {"src": 4, "app-rep": 4, "app-store-changelog": 4})
    assert done.ready and done.tasks == {"0": 4, "1": 4} and not done.to_create
    wrong = configure(topology, {"src": 4, "app-rep": 2, "app-store-changelog": 4})
    assert [code for code, _ in wrong.status] == [INCORRECTLY_PARTITIONED_TOPICS] and wrong.tasks == {}
    joined = Topology(0, [Subtopology("0", source_topics=["l", "r"], copartition_groups=[["l", "r"]])])
    assert configure(joined, {"l": 2, "r": 3}).status[0][0] == INCORRECTLY_PARTITIONED_TOPICS


def test_other_group_types_keep_their_ids(tmp_path):
    clock = FakeClock()
    logs, gc = _coordinator(tmp_path, clock)
    logs.create_topic("src", 2)
    assert _join(gc, "a", "p1").error == ErrorCode.none
    r = gc.consumer.heartbeat(HeartbeatRequest("app", "c", 0, owned={}, subscribed_topic_names=["src"],
                                               rebalance_timeout_ms=30000))
    assert r.error == ErrorCode.group_id_not_found
    assert "app" in gc.streams.groups and gc.offsets.group_states.get("app")  # its kept state untouched
    missing = _join(gc, "m", "p9", group="other", source="absent")
    assert [code for code, _ in missing.status] == [MISSING_SOURCE_TOPICS] and missing.active == {}
    logs.shutdown()
