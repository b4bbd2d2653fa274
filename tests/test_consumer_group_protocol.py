"""KIP-848 consumer groups without sockets: the assignors and the reconciliation state machine."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.groups.assignors import range_, uniform
from core.groups.consumer_group import ConsumerGroups, HeartbeatRequest
from core.groups.group import Group


def test_uniform_balances_and_is_sticky():
    first = uniform({"a": {"t"}, "b": {"t"}}, {"t": 6})
    assert sorted(len(first[m]["t"]) for m in "ab") == [3, 3]
    second = uniform({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 6}, first)
    assert sorted(len(second[m]["t"]) for m in "abc") == [2, 2, 2]
    for m in "ab":  # nothing moves between a and b: each only gives one to c
        assert second[m]["t"] <= first[m]["t"]
    assert set().union(*(second[m]["t"] for m in "abc")) == set(range(6))


def test_uniform_respects_subscriptions():
    out = uniform({"a": {"x"}, "b": {"x", "y"}}, {"x": 2, "y": 2})
    assert out["a"] == {"x": {0, 1}} and out["b"] == {"y": {0, 1}}


def test_range_gives_consecutive_ranges_per_topic():
    out = range_({"b": {"t", "u"}, "a": {"t", "u"}}, {"t": 5, "u": 4})
    assert out["a"] == {"t": {0, 1, 2}, "u": {0, 1}} and out["b"] == {"t": {3, 4}, "u": {2, 3}}


class World:
    def __init__(self):
        self.now = 1000.0
        self.topics = {"t": 4}
        self.classic: dict = {}
        self.groups = ConsumerGroups(lambda: self.topics, self.classic, lambda: self.now, session_timeout_ms=45000)

    def hb(self, member, epoch, owned=None, **kw):
        return self.groups.heartbeat(HeartbeatRequest("g", member, epoch, owned=owned, **kw))

    def join(self, member, **kw):
        kw.setdefault("subscribed_topic_names", ["t"])
        return self.hb(member, 0, owned={}, rebalance_timeout_ms=30000, **kw)


def test_join_reconcile_revoke_then_release():
    w = World()
    a = w.join("a")
    assert a.error == ErrorCode.none and a.member_epoch == 1 and a.assignment == {"t": {0, 1, 2, 3}}
    b = w.join("b")
    assert b.member_epoch == 2 and b.assignment == {}  # all four still held by a
    # a learns it must give two away; it stays at epoch 1 until it has
    a2 = w.hb("a", 1)
    assert a2.member_epoch == 1 and len(a2.assignment["t"]) == 2
    kept = a2.assignment["t"]
    # b asks again before a revoked: still nothing
    assert w.hb("b", 2).assignment is None
    # a reports the revocation and moves to epoch 2; b then gets the released partitions
    a3 = w.hb("a", 1, owned={"t": set(kept)})
    assert a3.member_epoch == 2
    b2 = w.hb("b", 2)
    assert b2.member_epoch == 2 and b2.assignment == {"t": {0, 1, 2, 3} - kept}
    assert w.groups.groups["g"].state == "Stable"


def test_leave_gives_partitions_to_the_others_and_errors():
    w = World()
    w.join("a")
    w.join("b")
    kept = w.hb("a", 1).assignment["t"]
    w.hb("a", 1, owned={"t": kept})
    w.hb("b", 2)
    assert w.hb("b", 2, owned={"t": {0, 1, 2, 3} - kept}).assignment is None
    left = w.hb("b", -1)
    assert left.member_epoch == -1
    assert w.hb("a", 2, owned={"t": kept}).assignment == {"t": {0, 1, 2, 3}}
    assert w.hb("b", 2).error == ErrorCode.unknown_member_id
    assert w.hb("a", 9).error == ErrorCode.fenced_member_epoch
    assert w.join("c", server_assignor="sticky").error == ErrorCode.unsupported_assignor
    assert w.join("c", subscribed_topic_names=None, subscribed_topic_regex="(").error == \
        ErrorCode.invalid_regular_expression


def test_session_timeout_and_commit_validation():
    w = World()
    w.join("a")
    assert w.groups.commit_error("g", "a", 1) is None
    assert w.groups.commit_error("g", "a", 0) == ErrorCode.stale_member_epoch
    assert w.groups.commit_error("g", "zz", 1) == ErrorCode.unknown_member_id
    assert w.groups.fetch_error("g", "", -1) is None
    w.now += 46
    w.groups.tick()
    assert not w.groups.groups["g"].members and w.groups.groups["g"].state == "Empty"
    assert w.groups.commit_error("g", "", -1) is None  # admin commits to an empty group


def test_regex_and_new_partitions_are_picked_up():
    w = World()
    w.topics = {"orders-eu": 1}
    r = w.join("a", subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    assert r.assignment == {"orders-eu": {0}}
    w.topics = {"orders-eu": 2, "orders-us": 1, "other": 1}
    r = w.hb("a", r.member_epoch)
    assert r.assignment == {"orders-eu": {0, 1}, "orders-us": {0}}


def test_static_member_leaves_and_comes_back_with_its_partitions():
    w = World()
    a = w.join("a1", instance_id="i")
    assert w.hb("a1", -2, instance_id="i").member_epoch == -2
    assert w.join("x", instance_id="i").error == ErrorCode.none  # takes the place of a1
    assert w.groups.groups["g"].members["x"].assigned == a.assignment
    assert w.join("y", instance_id="i").error == ErrorCode.unreleased_instance_id


def test_classic_and_consumer_groups_exclude_each_other():
    w = World()
    live = Group("g")
    live.members["m"] = object()
    live.state = live.state.STABLE
    w.classic["g"] = live
    assert w.join("a").error == ErrorCode.group_id_not_found
    w.classic["g"] = Group("g")  # empty: becomes a consumer group
    assert w.join("a").error == ErrorCode.none and "g" not in w.classic
    assert not w.groups.take_over_for_classic("g")
    w.hb("a", -1)
    assert w.groups.take_over_for_classic("g") and "g" not in w.groups.groups


def test_per_group_session_timeout_and_heartbeat_interval():
    """The group configs consumer.session.timeout.ms / consumer.heartbeat.interval.ms (looked up
    per group) win over the broker's settings."""
    w = World()
    w.groups.heartbeat_interval_for = lambda group_id: 1234 if group_id == "g" else 5000
    w.groups.session_timeout_for = lambda group_id: 2000 if group_id == "g" else 45000
    assert w.join("a").heartbeat_interval_ms == 1234
    w.now += 1.5
    w.groups.tick()
    assert "a" in w.groups.groups["g"].members
    w.now += 1.0  # 2.5 s without a heartbeat: past this group's 2 s session
    w.groups.tick()
    assert "a" not in w.groups.groups["g"].members
