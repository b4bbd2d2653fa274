"""The classic consumer-group coordinator: join/sync/heartbeat/leave, timers, offsets, admin."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from core.groups import GroupCoordinator, JoinResult, SyncResult
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from core.offsets import OFFSETS_TOPIC
from tests.logutil import FakeClock

E = ErrorCode
RANGE = [("range", b"meta-range")]
SESSION_MS, REBALANCE_MS = 10_000, 30_000


class Box(list):
    """A respond callback that keeps what it was given."""

    def __call__(self, result) -> None:
        self.append(result)

    @property
    def one(self):
        assert len(self) == 1, f"expected one answer, got {list(self)}"
        return self[0]


def open_logs(data_dir, clock) -> LogManager:
    logs = LogManager(data_dir, LocalMetadataStore(data_dir, clock=clock), clock=clock)
    logs.startup()
    return logs


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def logs(tmp_path, clock):
    manager = open_logs(tmp_path / "data", clock)
    manager.create_topic("t", 3)
    yield manager
    manager.shutdown()


@pytest.fixture
def gc(logs, clock):
    coordinator = GroupCoordinator(logs, clock)
    coordinator.load()
    return coordinator


def join(gc, member_id="", *, group="g", instance=None, protocols=RANGE, session=SESSION_MS,
         rebalance=REBALANCE_MS, require_known=False, protocol_type="consumer", client_id="c") -> Box:
    box = Box()
    gc.join(group, member_id, instance, client_id, "/127.0.0.1", protocol_type, protocols, session, rebalance,
            require_known, box)
    return box


def sync(gc, result: JoinResult, assignments=None, *, group="g", instance=None) -> Box:
    box = Box()
    gc.sync(group, result.generation_id, result.member_id, instance, "consumer", result.protocol_name,
            assignments or {}, box)
    return box


def advance(gc, clock, seconds: float, step: float = 0.125) -> None:
    """Move the clock in tick-sized steps (binary-exact, so deadlines land on whole seconds), ticking."""
    end = clock.now + seconds
    while clock.now < end - 1e-9:
        clock.advance(min(step, end - clock.now))
        gc.tick()


def stable_group(gc, clock, n: int, *, instances=None, protocols=RANGE) -> list[JoinResult]:
    """n members joined and synced (the first is the leader); their join results."""
    boxes = [join(gc, instance=(instances[i] if instances else None), client_id=f"c{i}", protocols=protocols)
             for i in range(n)]
    advance(gc, clock, 3.0 if n == 1 else 6.0)  # members after the first extend the initial delay once
    results = [b.one for b in boxes]
    leader = next(r for r in results if r.leader == r.member_id)
    assignments = {r.member_id: f"assignment-{i}".encode() for i, r in enumerate(results)}
    syncs = [sync(gc, r, assignments if r is leader else None, instance=(instances[i] if instances else None))
             for i, r in enumerate(results)]
    assert all(s.one.error == E.none for s in syncs)
    assert gc.describe_group("g").state == "Stable"
    return results


# --- joining ----------------------------------------------------------------------------

def test_single_member_join_waits_for_the_initial_delay(gc, clock):
    box = join(gc)
    assert box == []
    assert gc.describe_group("g").state == "PreparingRebalance"
    advance(gc, clock, 2.9)
    assert box == []
    advance(gc, clock, 0.1)
    result = box.one
    assert result.error == E.none
    assert result.generation_id == 1
    assert result.leader == result.member_id and result.member_id.startswith("c-")
    assert result.protocol_type == "consumer" and result.protocol_name == "range"
    assert result.members == [(result.member_id, None, b"meta-range")]
    assert gc.describe_group("g").state == "CompletingRebalance"


def test_three_members_arriving_extend_the_initial_delay_and_share_a_generation(gc, clock):
    boxes = [join(gc, client_id="c0")]
    advance(gc, clock, 1.0)
    boxes.append(join(gc, client_id="c1"))
    advance(gc, clock, 1.0)
    boxes.append(join(gc, client_id="c2"))
    advance(gc, clock, 1.0)  # t=3: new members arrived during the delay, so it is extended
    assert all(b == [] for b in boxes)
    advance(gc, clock, 3.0)  # t=6: nobody new since t=3
    results = [b.one for b in boxes]
    assert {r.generation_id for r in results} == {1}
    leader_id = results[0].member_id
    assert all(r.leader == leader_id for r in results)
    assert len(results[0].members) == 3 and results[1].members == [] and results[2].members == []
    assert {m for m, _, _ in results[0].members} == {r.member_id for r in results}


def test_initial_delay_never_exceeds_the_rebalance_timeout(gc, clock):
    boxes = []
    for i in range(10):  # a member every second keeps extending the delay...
        boxes.append(join(gc, client_id=f"c{i}", rebalance=7_000))
        advance(gc, clock, 1.0)
    # ...but the join phase ends at the rebalance timeout: 3 s + 3 s + the 1 s left, at t=7.
    assert [len(b) for b in boxes] == [1] * 7 + [0] * 3
    assert {b.one.generation_id for b in boxes[:7]} == {1}


def test_member_id_required_round(gc, clock):
    first = join(gc, require_known=True, client_id="consumer-1").one
    assert first.error == E.member_id_required
    assert first.member_id.startswith("consumer-1-")
    assert first.generation_id == -1
    assert gc.heartbeat("g", 0, first.member_id, None) == E.unknown_member_id
    box = join(gc, first.member_id, require_known=True, client_id="consumer-1")
    advance(gc, clock, 3.0)
    result = box.one
    assert result.error == E.none and result.member_id == first.member_id and result.generation_id == 1


def test_pending_member_id_expires_after_the_session_timeout(gc, clock):
    first = join(gc, require_known=True).one
    advance(gc, clock, SESSION_MS / 1000 + 0.1)
    late = join(gc, first.member_id, require_known=True).one
    assert late.error == E.unknown_member_id


def test_join_errors(gc, clock):
    assert join(gc, session=1000).one.error == E.invalid_session_timeout
    assert join(gc, session=2_000_000).one.error == E.invalid_session_timeout
    assert join(gc, "nobody", group="other").one.error == E.unknown_member_id
    assert join(gc, group="").one.error == E.invalid_group_id
    assert join(gc, protocol_type="").one.error == E.inconsistent_group_protocol
    assert join(gc, protocols=[]).one.error == E.inconsistent_group_protocol


def test_inconsistent_protocol(gc, clock):
    first = join(gc, protocols=[("range", b"")])
    assert join(gc, protocols=[("sticky", b"")]).one.error == E.inconsistent_group_protocol
    assert join(gc, protocol_type="connect").one.error == E.inconsistent_group_protocol
    advance(gc, clock, 3.0)
    assert first.one.error == E.none
    assert len(first.one.members) == 1


def test_protocol_is_chosen_by_vote_among_common_protocols(gc, clock):
    a = join(gc, protocols=[("range", b"a1"), ("roundrobin", b"a2"), ("sticky", b"a3")])
    b = join(gc, protocols=[("roundrobin", b"b2"), ("range", b"b1")])
    c = join(gc, protocols=[("sticky", b"c3"), ("roundrobin", b"c2")])
    advance(gc, clock, 6.0)
    # range is not supported by c; of range/roundrobin/sticky only roundrobin is common to all.
    assert {x.one.protocol_name for x in (a, b, c)} == {"roundrobin"}
    assert sorted(md for _, _, md in a.one.members) == [b"a2", b"b2", b"c2"]


# --- syncing ----------------------------------------------------------------------------

def test_sync_delivers_the_leaders_assignments(gc, clock):
    boxes = [join(gc, client_id=f"c{i}") for i in range(2)]
    advance(gc, clock, 6.0)
    leader, follower = boxes[0].one, boxes[1].one
    assert leader.leader == leader.member_id
    s1 = sync(gc, leader, {leader.member_id: b"L", follower.member_id: b"F"})
    assert s1.one == SyncResult(E.none, "consumer", "range", b"L")
    assert gc.describe_group("g").state == "Stable"
    s2 = sync(gc, follower)
    assert s2.one == SyncResult(E.none, "consumer", "range", b"F")
    described = gc.describe_group("g")
    assert described.protocol == "range" and described.protocol_type == "consumer"
    assert {(m.member_id, m.metadata, m.assignment) for m in described.members} == {
        (leader.member_id, b"meta-range", b"L"), (follower.member_id, b"meta-range", b"F")}


def test_follower_sync_before_leader_waits(gc, clock):
    boxes = [join(gc, client_id=f"c{i}") for i in range(3)]
    advance(gc, clock, 6.0)
    leader, f1, f2 = (b.one for b in boxes)
    w1, w2 = sync(gc, f1), sync(gc, f2)
    assert w1 == [] and w2 == []
    advance(gc, clock, 5.0)  # followers waiting for the leader are not expired
    assert w1 == [] and w2 == []
    sl = sync(gc, leader, {f1.member_id: b"one"})  # f2 gets no assignment: empty bytes
    assert sl.one.assignment == b""
    assert w1.one.assignment == b"one" and w1.one.error == E.none
    assert w2.one.assignment == b"" and w2.one.error == E.none


def test_sync_errors(gc, clock):
    results = stable_group(gc, clock, 2)
    leader, follower = results
    bad_gen = Box()
    gc.sync("g", 99, follower.member_id, None, None, None, {}, bad_gen)
    assert bad_gen.one.error == E.illegal_generation
    unknown = Box()
    gc.sync("g", 1, "nobody", None, None, None, {}, unknown)
    assert unknown.one.error == E.unknown_member_id
    wrong = Box()
    gc.sync("g", 1, follower.member_id, None, "consumer", "sticky", {}, wrong)
    assert wrong.one.error == E.inconsistent_group_protocol
    join(gc, leader.member_id)  # the leader rejoins: rebalance
    during = Box()
    gc.sync("g", 1, follower.member_id, None, None, None, {}, during)
    assert during.one.error == E.rebalance_in_progress
    nogroup = Box()
    gc.sync("nope", 1, "x", None, None, None, {}, nogroup)
    assert nogroup.one.error == E.unknown_member_id


def test_join_during_completing_rebalance_cancels_pending_syncs(gc, clock):
    boxes = [join(gc, client_id=f"c{i}") for i in range(2)]
    advance(gc, clock, 6.0)
    leader, follower = boxes[0].one, boxes[1].one
    waiting = sync(gc, follower)
    newcomer = join(gc, client_id="late")
    assert waiting.one.error == E.rebalance_in_progress
    assert gc.describe_group("g").state == "PreparingRebalance"
    assert gc.heartbeat("g", 1, leader.member_id, None) == E.rebalance_in_progress
    again = [join(gc, leader.member_id), join(gc, follower.member_id)]
    results = [b.one for b in again + [newcomer]]  # everyone rejoined: completes at once
    assert {r.generation_id for r in results} == {2}
    assert results[0].leader == leader.member_id and len(results[0].members) == 3


def test_rejoin_in_completing_rebalance_with_same_metadata_repeats_the_answer(gc, clock):
    boxes = [join(gc, client_id=f"c{i}") for i in range(2)]
    advance(gc, clock, 6.0)
    leader, follower = boxes[0].one, boxes[1].one
    again = join(gc, follower.member_id).one
    assert again == follower
    assert gc.describe_group("g").state == "CompletingRebalance"


# --- heartbeats, expiry, leaving -------------------------------------------------------

def test_heartbeat_signals_a_rebalance(gc, clock):
    leader, follower = stable_group(gc, clock, 2)
    assert gc.heartbeat("g", 1, follower.member_id, None) == E.none
    assert gc.heartbeat("g", 0, follower.member_id, None) == E.illegal_generation
    assert gc.heartbeat("g", 1, "nobody", None) == E.unknown_member_id
    assert gc.heartbeat("nope", 1, "x", None) == E.unknown_member_id
    newcomer = join(gc, client_id="new")
    assert gc.heartbeat("g", 1, follower.member_id, None) == E.rebalance_in_progress
    assert gc.heartbeat("g", 1, leader.member_id, None) == E.rebalance_in_progress
    rejoined = [join(gc, leader.member_id), join(gc, follower.member_id)]
    results = [b.one for b in rejoined + [newcomer]]
    assert {r.generation_id for r in results} == {2}
    assert gc.heartbeat("g", 2, follower.member_id, None) == E.none  # CompletingRebalance: fine


def test_session_expiry_triggers_a_rebalance(gc, clock):
    leader, follower = stable_group(gc, clock, 2)
    for _ in range(12):  # 12 s: the follower stays silent past its 10 s session
        advance(gc, clock, 1.0)
        if gc.describe_group("g").state == "Stable":
            assert gc.heartbeat("g", 1, leader.member_id, None) == E.none
    assert gc.heartbeat("g", 1, follower.member_id, None) == E.unknown_member_id
    assert gc.describe_group("g").state == "PreparingRebalance"
    assert gc.heartbeat("g", 1, leader.member_id, None) == E.rebalance_in_progress
    result = join(gc, leader.member_id).one  # the only member left rejoined: done
    assert result.generation_id == 2 and [m for m, _, _ in result.members] == [leader.member_id]


def test_all_sessions_expire_and_the_group_becomes_empty(gc, clock):
    stable_group(gc, clock, 2)
    advance(gc, clock, SESSION_MS / 1000 + 0.5)
    described = gc.describe_group("g")
    assert described.state == "Empty" and described.members == []
    listing = gc.list_groups()
    assert [(g.group_id, g.protocol_type, g.state) for g in listing] == [("g", "consumer", "Empty")]


def test_rebalance_timeout_removes_a_member_that_does_not_rejoin(gc, clock):
    leader, slow = stable_group(gc, clock, 2)
    box = join(gc, leader.member_id)  # the leader's join starts a rebalance
    for _ in range(29):
        advance(gc, clock, 1.0)
        assert gc.heartbeat("g", 1, slow.member_id, None) == E.rebalance_in_progress  # alive, not rejoining
    assert box == []
    advance(gc, clock, 1.1)
    result = box.one
    assert result.generation_id == 2 and [m for m, _, _ in result.members] == [leader.member_id]
    assert gc.heartbeat("g", 1, slow.member_id, None) == E.unknown_member_id
    assert join(gc, slow.member_id).one.error == E.unknown_member_id


def test_rebalance_elects_a_new_leader_if_the_leader_does_not_rejoin(gc, clock):
    leader, follower = stable_group(gc, clock, 2)
    box = join(gc, follower.member_id, protocols=[("range", b"changed")])
    advance(gc, clock, REBALANCE_MS / 1000 + 0.2)
    result = box.one
    assert result.leader == follower.member_id and result.members == [(follower.member_id, None, b"changed")]


def test_members_that_do_not_sync_in_time_are_removed(gc, clock):
    boxes = [join(gc, client_id=f"c{i}") for i in range(2)]
    advance(gc, clock, 6.0)
    leader, follower = boxes[0].one, boxes[1].one
    waiting = sync(gc, follower)
    advance(gc, clock, REBALANCE_MS / 1000 + 0.2)  # the leader never syncs
    assert waiting.one.error == E.rebalance_in_progress
    assert gc.heartbeat("g", 1, leader.member_id, None) == E.unknown_member_id


def test_leave(gc, clock):
    a, b = stable_group(gc, clock, 2)
    assert gc.leave("g", [(b.member_id, None)]) == (E.none, [(b.member_id, None, E.none)])
    assert gc.describe_group("g").state == "PreparingRebalance"
    result = join(gc, a.member_id).one
    assert result.generation_id == 2 and len(result.members) == 1
    assert gc.leave("g", [("ghost", None)]) == (E.none, [("ghost", None, E.unknown_member_id)])
    assert gc.leave("nope", [("x", None)]) == (E.none, [("x", None, E.unknown_member_id)])
    assert gc.leave("g", [(a.member_id, None)])[1][0][2] == E.none
    described = gc.describe_group("g")
    assert described.state == "Empty" and described.members == []


def test_leave_while_rebalancing_completes_the_join(gc, clock):
    a, b = stable_group(gc, clock, 2)
    box = join(gc, a.member_id)
    assert box == []
    gc.leave("g", [(b.member_id, None)])  # the only member that had not rejoined leaves
    assert box.one.generation_id == 2


def test_leave_answers_a_parked_join(gc, clock):
    box = join(gc)
    member_id = gc.describe_group("g").members[0].member_id
    gc.leave("g", [(member_id, None)])
    assert box.one.error == E.unknown_member_id


# --- static members ---------------------------------------------------------------------

def test_static_member_rejoin_replaces_its_id_without_a_rebalance(gc, clock):
    a, b = stable_group(gc, clock, 2, instances=["i-a", "i-b"])
    rejoined = join(gc, instance="i-b", client_id="c1").one  # b restarted: no member id
    assert rejoined.error == E.none
    assert rejoined.member_id != b.member_id and rejoined.member_id.startswith("i-b-")
    assert rejoined.generation_id == 1 and rejoined.leader == a.member_id and rejoined.members == []
    assert gc.describe_group("g").state == "Stable"
    assert gc.heartbeat("g", 1, b.member_id, "i-b") == E.fenced_instance_id
    assert gc.heartbeat("g", 1, rejoined.member_id, "i-b") == E.none
    got = sync(gc, rejoined, instance="i-b").one
    assert got.error == E.none and got.assignment == b"assignment-1"
    assert gc.heartbeat("g", 1, a.member_id, "i-a") == E.none


def test_static_leader_rejoin_gets_skip_assignment(gc, clock):
    a, b = stable_group(gc, clock, 2, instances=["i-a", "i-b"])
    rejoined = join(gc, instance="i-a", client_id="c0").one
    assert rejoined.leader == rejoined.member_id and rejoined.skip_assignment
    assert {m for m, _, _ in rejoined.members} == {rejoined.member_id, b.member_id}
    assert gc.describe_group("g").state == "Stable"


def test_static_member_rejoin_with_other_protocols_rebalances(gc, clock):
    both = [("range", b""), ("roundrobin", b"")]
    a, b = stable_group(gc, clock, 2, instances=["i-a", "i-b"], protocols=both)
    assert a.protocol_name == "range"
    same_choice = join(gc, instance="i-b", protocols=[("roundrobin", b""), ("range", b"")]).one
    assert same_choice.generation_id == 1  # the vote is a tie the leader's preference breaks: range
    box = join(gc, instance="i-b", protocols=[("roundrobin", b"")])  # range is no longer common
    assert box == []
    assert gc.describe_group("g").state == "PreparingRebalance"
    join(gc, a.member_id, instance="i-a", protocols=both)
    assert box.one.generation_id == 2 and box.one.protocol_name == "roundrobin"


def test_static_member_fenced_while_waiting_in_a_join(gc, clock):
    box = join(gc, instance="i-a")
    again = join(gc, instance="i-a")
    assert box.one.error == E.fenced_instance_id
    advance(gc, clock, 3.0)
    assert again.one.error == E.none and again.one.generation_id == 1


def test_static_member_removed_by_instance_id(gc, clock):
    a, b = stable_group(gc, clock, 2, instances=["i-a", "i-b"])
    assert gc.leave("g", [("", "i-b")]) == (E.none, [("", "i-b", E.none)])
    assert gc.leave("g", [("", "i-zz")])[1][0][2] == E.unknown_member_id
    assert gc.leave("g", [(b.member_id, "i-a")])[1][0][2] == E.fenced_instance_id


# --- offsets ----------------------------------------------------------------------------

def test_commit_and_fetch(gc, clock, logs):
    a, b = stable_group(gc, clock, 2)
    info = gc.commit_offsets("g", 1, a.member_id, None, {("t", 0): (10, 3, "meta"), ("t", 1): (20, -1, None),
                                                         ("nope", 0): (5, -1, None), ("t", 9): (1, -1, None)})
    assert info.errors == {("t", 0): E.none, ("t", 1): E.none, ("nope", 0): E.unknown_topic_or_partition,
                           ("t", 9): E.unknown_topic_or_partition}
    topic, partition, last = info.durable_at
    assert (topic, partition) == (OFFSETS_TOPIC, gc.group_partition("g"))
    assert last == logs.get_log(OFFSETS_TOPIC, partition).next_offset - 1
    assert gc.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == {
        ("t", 0): (10, 3, "meta"), ("t", 1): (20, -1, ""), ("t", 2): (-1, -1, "")}
    assert gc.fetch_offsets("g", None) == {("t", 0): (10, 3, "meta"), ("t", 1): (20, -1, "")}
    gc.commit_offsets("g", 1, b.member_id, None, {("t", 0): (11, 3, "")})
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): (11, 3, "")}
    assert gc.fetch_offsets("unknown", None) == {}


def test_commit_rules_of_a_managed_group(gc, clock):
    a, b = stable_group(gc, clock, 2)
    tp = {("t", 0): (1, -1, None)}
    assert gc.commit_offsets("g", 0, a.member_id, None, tp).errors == {("t", 0): E.illegal_generation}
    assert gc.commit_offsets("g", 1, "ghost", None, tp).errors == {("t", 0): E.unknown_member_id}
    assert gc.commit_offsets("g", -1, "", None, tp).errors == {("t", 0): E.unknown_member_id}  # not Empty
    assert gc.commit_offsets("g", 1, a.member_id, None, {("t", 0): (1, -1, "x" * 5000)}).errors == {
        ("t", 0): E.offset_metadata_too_large}
    newcomer = join(gc, client_id="new")  # PreparingRebalance: commits of the old generation still count
    info = gc.commit_offsets("g", 1, a.member_id, None, tp)
    assert info.errors == {("t", 0): E.none} and info.durable_at is not None
    join(gc, a.member_id), join(gc, b.member_id)
    assert newcomer.one.generation_id == 2
    info = gc.commit_offsets("g", 2, a.member_id, None, tp)  # CompletingRebalance
    assert info.errors == {("t", 0): E.rebalance_in_progress} and info.durable_at is None


def test_simple_commit_outside_any_group(gc, clock):
    info = gc.commit_offsets("spark-app", -1, "", None, {("t", 2): (42, -1, None)})
    assert info.errors == {("t", 2): E.none} and info.durable_at is not None
    assert gc.fetch_offsets("spark-app", [("t", 2)]) == {("t", 2): (42, -1, "")}
    assert gc.describe_group("spark-app").state == "Empty"
    assert gc.commit_offsets("other", 5, "m", None, {("t", 0): (1, -1, None)}).errors == {
        ("t", 0): E.illegal_generation}
    # A group that emptied out accepts simple commits too.
    a, = stable_group(gc, clock, 1)
    gc.leave("g", [(a.member_id, None)])
    assert gc.commit_offsets("g", -1, "", None, {("t", 0): (7, -1, None)}).errors == {("t", 0): E.none}
    assert gc.commit_offsets("g", 1, a.member_id, None, {("t", 0): (7, -1, None)}).errors == {
        ("t", 0): E.unknown_member_id}


def test_offsets_survive_a_restart(tmp_path, clock):
    data = tmp_path / "data"
    logs = open_logs(data, clock)
    logs.create_topic("t", 2)
    gc = GroupCoordinator(logs, clock, offsets_partitions=3)
    gc.load()
    for i in range(5):
        gc.commit_offsets("app", -1, "", None, {("t", 0): (i, 1, f"m{i}"), ("t", 1): (100 + i, -1, None)})
    gc.commit_offsets("doomed", -1, "", None, {("t", 0): (9, -1, None)})
    gc.commit_offsets("kept", -1, "", None, {("t", 1): (3, -1, None)})
    assert gc.delete_groups(["doomed"]) == {"doomed": E.none}
    logs.shutdown()

    logs = open_logs(data, clock)
    gc = GroupCoordinator(logs, clock, offsets_partitions=3)
    gc.load()
    assert gc.fetch_offsets("app", None) == {("t", 0): (4, 1, "m4"), ("t", 1): (104, -1, "")}
    assert gc.fetch_offsets("kept", None) == {("t", 1): (3, -1, "")}
    assert gc.fetch_offsets("doomed", None) == {}
    assert sorted((g.group_id, g.state) for g in gc.list_groups()) == [("app", "Empty"), ("kept", "Empty")]
    assert logs.store.get_topic(OFFSETS_TOPIC).configs["cleanup.policy"] == "compact"
    assert logs.store.get_topic(OFFSETS_TOPIC).partitions == 3
    # A group that comes back after the restart starts a fresh generation and keeps its offsets.
    box = join(gc, group="app")
    advance(gc, clock, 3.0)
    assert box.one.generation_id == 1
    assert gc.fetch_offsets("app", [("t", 0)]) == {("t", 0): (4, 1, "m4")}
    logs.shutdown()


def test_offsets_survive_a_crash(tmp_path, clock):
    data = tmp_path / "data"
    logs = open_logs(data, clock)
    logs.create_topic("t", 1)
    gc = GroupCoordinator(logs, clock)
    info = gc.commit_offsets("app", -1, "", None, {("t", 0): (5, -1, None)})  # load() happens by itself
    logs.get_log(*info.durable_at[:2]).flush()  # what the gateway waits for before it answers
    # no shutdown: the process died
    logs = open_logs(data, clock)
    gc = GroupCoordinator(logs, clock)
    gc.load()
    assert gc.fetch_offsets("app", None) == {("t", 0): (5, -1, "")}
    logs.shutdown()


def test_load_replays_after_compaction(tmp_path, clock):
    data = tmp_path / "data"
    logs = open_logs(data, clock)
    logs.create_topic("t", 1)
    gc = GroupCoordinator(logs, clock)
    gc.load()
    for i in range(50):
        gc.commit_offsets("app", -1, "", None, {("t", 0): (i, -1, None)})
        gc.commit_offsets("gone", -1, "", None, {("t", 0): (i, -1, None)})
    gc.delete_groups(["gone"])
    plog = logs.get_log(OFFSETS_TOPIC, 0)
    plog.roll()
    before = plog.size_bytes
    logs.maintenance()
    assert plog.size_bytes < before
    logs.shutdown()
    logs = open_logs(data, clock)
    gc = GroupCoordinator(logs, clock)
    gc.load()
    assert gc.fetch_offsets("app", None) == {("t", 0): (49, -1, "")}
    assert gc.fetch_offsets("gone", None) == {}
    logs.shutdown()


def test_an_offsets_partition_led_elsewhere_unloads_its_groups_and_comes_back_on_reload(gc, clock):
    """Cluster mode: a broker that stops leading a group's offsets partition drops the group
    (parked joins answered NOT_COORDINATOR); when it leads it again, the group comes back from
    the partition, Empty with its offsets."""
    a, b = stable_group(gc, clock, 2)
    gc.commit_offsets("g", 1, a.member_id, None, {("t", 0): (7, -1, None)})
    gc.commit_offsets("other", -1, "", None, {("t", 1): (3, -1, None)})
    parked = join(gc, a.member_id, protocols=[("range", b"new-meta")])  # a rebalance: a's rejoin waits
    assert parked == []
    partition = gc.group_partition("g")
    assert gc.unload(partition + 1) == 0  # another partition: nothing of these groups
    assert gc.unload(partition) == (2 if gc.group_partition("other") == partition else 1)
    assert parked.one.error == E.not_coordinator
    assert "g" not in {x.group_id for x in gc.list_groups()}
    advance(gc, clock, SESSION_MS / 1000 + 1)  # nothing left to time out
    gc.reload(partition)
    assert ("g", "Empty") in {(x.group_id, x.state) for x in gc.list_groups()}
    assert gc.describe_group("g").state == "Empty"
    assert gc.fetch_offsets("g", None) == {("t", 0): (7, -1, "")}


# --- admin ------------------------------------------------------------------------------

def test_delete_groups(gc, clock):
    stable_group(gc, clock, 1)
    gc.commit_offsets("idle", -1, "", None, {("t", 0): (1, -1, None)})
    assert gc.delete_groups(["g", "idle", "nope"]) == {
        "g": E.non_empty_group, "idle": E.none, "nope": E.group_id_not_found}
    assert gc.fetch_offsets("idle", None) == {}
    assert gc.describe_group("idle").state == "Dead"
    assert gc.delete_groups(["idle"]) == {"idle": E.group_id_not_found}
    assert [g.group_id for g in gc.list_groups()] == ["g"]


def test_list_and_describe(gc, clock):
    stable_group(gc, clock, 2)
    join(gc, group="h", client_id="x")
    gc.commit_offsets("offsets-only", -1, "", None, {("t", 0): (1, -1, None)})
    everything = {(g.group_id, g.protocol_type, g.state) for g in gc.list_groups()}
    assert everything == {("g", "consumer", "Stable"), ("h", "consumer", "PreparingRebalance"),
                          ("offsets-only", "", "Empty")}
    assert [g.group_id for g in gc.list_groups(["Stable"])] == ["g"]
    assert sorted(g.group_id for g in gc.list_groups(["Stable", "Empty"])) == ["g", "offsets-only"]
    preparing = gc.describe_group("h")
    assert preparing.error == E.none and preparing.protocol == "" and len(preparing.members) == 1
    m = preparing.members[0]
    assert (m.client_id, m.client_host, m.metadata, m.assignment) == ("x", "/127.0.0.1", b"", b"")
    unknown = gc.describe_group("unknown")
    assert (unknown.error, unknown.state, unknown.members) == (E.none, "Dead", [])


def test_group_partition_hashes_like_kafka(logs, clock):
    gc = GroupCoordinator(logs, clock, offsets_partitions=50)
    gc.load()
    assert gc.group_partition("my-group") == 12  # abs("my-group".hashCode()) % 50, as the JVM computes it
    assert all(0 <= gc.group_partition(f"g{i}") < 50 for i in range(100))


def test_callbacks_may_call_back_in(gc, clock):
    answers = []

    def on_join(result):
        answers.append(result)
        gc.sync("g", result.generation_id, result.member_id, None, None, None,
                {result.member_id: b"mine"}, answers.append)

    gc.join("g", "", None, "c", "h", "consumer", RANGE, SESSION_MS, REBALANCE_MS, False, on_join)
    advance(gc, clock, 3.0)
    assert [type(a).__name__ for a in answers] == ["JoinResult", "SyncResult"]
    assert answers[1].assignment == b"mine"
