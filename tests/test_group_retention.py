"""Kafka's group.initial.rebalance.delay.ms and offsets.retention.minutes (KIP-211), with a fake clock."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from core.groups import GroupCoordinator
from core.groups.consumer_group import HeartbeatRequest
from core.groups.retention import KEEP
from core.offsets import OFFSETS_TOPIC, OffsetAndMetadata, decode_key
from gateway.config import ConfigError, load_settings
from tests.logutil import FakeClock
from tests.test_groups import advance, join, open_logs, stable_group

E = ErrorCode
RETENTION_S, CHECK_S = 60, 1  # --offsets-retention-minutes 1, --offsets-retention-check-interval-ms 1000
NONE = (-1, -1, "")  # what OffsetFetch answers for a partition without a committed offset


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def data(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def logs(data, clock):
    manager = open_logs(data, clock)
    manager.create_topic("t", 3)
    yield manager
    manager.shutdown()


def coordinator(logs, clock, **kw) -> GroupCoordinator:
    kw.setdefault("offsets_retention_ms", RETENTION_S * 1000)
    kw.setdefault("offsets_retention_check_interval_ms", CHECK_S * 1000)
    gc = GroupCoordinator(logs, clock, **kw)
    gc.load()
    return gc


@pytest.fixture
def gc(logs, clock):
    return coordinator(logs, clock)


def wait(gc, clock, seconds: float, *, heartbeat=None) -> None:
    """Move the clock a second at a time, ticking (and heartbeating: ``heartbeat()``)."""
    for _ in range(int(seconds)):
        clock.advance(1)
        if heartbeat is not None:
            heartbeat()
        gc.tick()


def commit(gc, group, offsets, generation=-1, member=""):
    info = gc.commit_offsets(group, generation, member, None, {tp: (o, -1, None) for tp, o in offsets.items()})
    assert set(info.errors.values()) == {E.none}, info.errors


def tombstoned(logs, group) -> set[tuple[str, int]]:
    """(topic, partition) keys of ``group`` whose newest record in __consumer_offsets is a tombstone."""
    newest = {}
    for batch in logs.get_log(OFFSETS_TOPIC, 0).replay():
        for record in batch.records:
            key = decode_key(record.key)
            if key is not None and key[0] == group:
                newest[key[1:]] = record.value
    return {tp for tp, value in newest.items() if value is None}


# --- offsets.retention.minutes -----------------------------------------------------------

def test_offsets_of_a_group_empty_longer_than_the_retention_are_tombstoned(gc, clock, logs, data):
    a, = stable_group(gc, clock, 1)
    commit(gc, "g", {("t", 0): 5, ("t", 1): 7}, 1, a.member_id)
    assert gc.leave("g", [(a.member_id, None)])[0] == E.none
    wait(gc, clock, RETENTION_S - 1)
    assert gc.fetch_offsets("g", [("t", 0), ("t", 1)]) == {("t", 0): (5, -1, ""), ("t", 1): (7, -1, "")}
    wait(gc, clock, 2)
    assert gc.fetch_offsets("g", [("t", 0), ("t", 1)]) == {("t", 0): NONE, ("t", 1): NONE}
    assert tombstoned(logs, "g") == {("t", 0), ("t", 1)}
    # an Empty group left without offsets is removed, as Kafka does (Dead)
    assert gc.describe_group("g").state == "Dead" and "g" not in [g.group_id for g in gc.list_groups()]
    logs.shutdown()
    logs = open_logs(data, clock)
    reloaded = coordinator(logs, clock)
    assert reloaded.fetch_offsets("g", [("t", 0), ("t", 1)]) == {("t", 0): NONE, ("t", 1): NONE}
    assert reloaded.describe_group("g").state == "Dead"
    logs.shutdown()


def test_a_group_with_a_member_keeps_its_offsets_however_old(gc, clock):
    a, = stable_group(gc, clock, 1)
    commit(gc, "g", {("t", 0): 5}, 1, a.member_id)
    wait(gc, clock, 10 * RETENTION_S, heartbeat=lambda: gc.heartbeat("g", 1, a.member_id, None))
    assert gc.describe_group("g").state == "Stable"
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): (5, -1, "")}


def test_a_group_that_became_empty_recently_keeps_its_offsets(gc, clock):
    a, = stable_group(gc, clock, 1)
    commit(gc, "g", {("t", 0): 5}, 1, a.member_id)
    wait(gc, clock, 2 * RETENTION_S, heartbeat=lambda: gc.heartbeat("g", 1, a.member_id, None))
    gc.leave("g", [(a.member_id, None)])  # the commit is two retentions old; the group empty since now
    wait(gc, clock, RETENTION_S - 1)
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): (5, -1, "")}
    assert gc.describe_group("g").state == "Empty"
    wait(gc, clock, 2)
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): NONE}


def test_a_member_that_times_out_empties_the_group_too(gc, clock):
    a, = stable_group(gc, clock, 1)
    commit(gc, "g", {("t", 0): 5}, 1, a.member_id)
    wait(gc, clock, 10)  # no heartbeats: the session (10 s) ends and the group is Empty
    assert gc.describe_group("g").state == "Empty"
    wait(gc, clock, RETENTION_S - 2)
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): (5, -1, "")}
    wait(gc, clock, 2)
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): NONE}


def test_standalone_commits_expire_from_their_commit_time(gc, clock, logs, data):
    commit(gc, "solo", {("t", 0): 1})
    wait(gc, clock, 30)
    commit(gc, "solo", {("t", 1): 2})
    wait(gc, clock, RETENTION_S - 30)
    assert gc.fetch_offsets("solo", None) == {("t", 1): (2, -1, "")}  # the first commit has expired
    assert tombstoned(logs, "solo") == {("t", 0)}
    assert gc.describe_group("solo").state == "Empty"
    # after a restart the second one still counts from its commit (membership is not persisted)
    logs.shutdown()
    logs = open_logs(data, clock)
    reloaded = coordinator(logs, clock)
    assert reloaded.fetch_offsets("solo", None) == {("t", 1): (2, -1, "")}
    wait(reloaded, clock, 29)
    assert reloaded.fetch_offsets("solo", None) == {("t", 1): (2, -1, "")}
    wait(reloaded, clock, 2)
    assert reloaded.fetch_offsets("solo", None) == {}
    assert reloaded.describe_group("solo").state == "Dead"
    logs.shutdown()


def test_offsets_stored_without_a_commit_time_count_from_their_record(gc, clock):
    # a commit straight to the store, with no commit time of its own
    gc.offsets.commit("stream-app", {("t", 0): OffsetAndMetadata(9)})
    assert gc.offsets.fetch("stream-app")[("t", 0)].commit_timestamp == int(clock() * 1000)
    wait(gc, clock, RETENTION_S - 1)
    assert gc.fetch_offsets("stream-app", [("t", 0)]) == {("t", 0): (9, -1, "")}
    wait(gc, clock, 1)
    assert gc.fetch_offsets("stream-app", [("t", 0)]) == {("t", 0): NONE}


def test_a_rabbitmq_stream_consumers_stored_offset_never_expires(gc, clock):
    gc.offsets.commit("stream-ref", {("s", 0): OffsetAndMetadata(5, metadata=KEEP)})
    wait(gc, clock, RETENTION_S * 10)
    assert gc.fetch_offsets("stream-ref", [("s", 0)]) == {("s", 0): (5, -1, KEEP)}


def test_offsets_an_open_transaction_holds_are_kept(gc, clock):
    commit(gc, "txn-app", {("t", 0): 1})
    gc.offsets.commit_in_txn("txn-app", 7, 0, {("t", 0): OffsetAndMetadata(2)})
    wait(gc, clock, RETENTION_S + 5)
    assert gc.fetch_offsets("txn-app", [("t", 0)]) == {("t", 0): (1, -1, "")}
    gc.offsets.end_txn(7, False, gc.group_partition("txn-app"))  # aborted: nothing holds it now
    wait(gc, clock, CHECK_S)
    assert gc.fetch_offsets("txn-app", [("t", 0)]) == {("t", 0): NONE}


def test_consumer_protocol_groups_keep_offsets_while_they_have_members(gc, clock):
    def heartbeat(epoch, **kw):
        return gc.consumer.heartbeat(HeartbeatRequest("cg", "m1", epoch, **kw))
    joined = heartbeat(0, owned={}, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"])
    assert joined.error == E.none
    commit(gc, "cg", {("t", 0): 3}, joined.member_epoch, "m1")
    wait(gc, clock, 3 * RETENTION_S, heartbeat=lambda: heartbeat(joined.member_epoch))
    assert gc.fetch_offsets("cg", [("t", 0)]) == {("t", 0): (3, -1, "")}
    assert heartbeat(-1).error == E.none  # leaves: the group is Empty from now
    wait(gc, clock, RETENTION_S - 1)
    assert gc.fetch_offsets("cg", [("t", 0)]) == {("t", 0): (3, -1, "")}
    wait(gc, clock, 2)
    assert gc.fetch_offsets("cg", [("t", 0)]) == {("t", 0): NONE}
    assert gc.group_type("cg") is None  # removed once it had no offsets left


def test_an_empty_group_without_offsets_is_removed_at_the_next_check(gc, clock):
    a, = stable_group(gc, clock, 1)
    gc.leave("g", [(a.member_id, None)])
    pending = join(gc, group="p", require_known=True)  # an id handed out, its rejoin still to come
    assert pending.one.error == E.member_id_required
    wait(gc, clock, CHECK_S)
    assert gc.describe_group("g").state == "Dead"
    assert gc.describe_group("p").state == "Empty"  # kept: its member is on the way back
    rejoined = join(gc, pending.one.member_id, group="p")
    advance(gc, clock, 3.0)
    assert rejoined.one.error == E.none


# --- group.initial.rebalance.delay.ms ------------------------------------------------------

def test_the_first_join_waits_for_the_configured_delay(logs, clock):
    gc = coordinator(logs, clock, initial_rebalance_delay_ms=500)
    box = join(gc)
    advance(gc, clock, 0.375)
    assert box == []
    advance(gc, clock, 0.125)
    assert box.one.error == E.none and box.one.generation_id == 1


def test_new_members_extend_the_delay_up_to_the_rebalance_timeout(logs, clock):
    gc = coordinator(logs, clock, initial_rebalance_delay_ms=1000)
    boxes = []
    for i in range(5):  # a member every half second, for longer than the rebalance timeout
        boxes.append(join(gc, client_id=f"c{i}", rebalance=2500))
        advance(gc, clock, 0.5)
        if i < 4:
            assert all(b == [] for b in boxes), i
    # t=2.5: three delays (1 s, then 1 s, then the 0.5 s left of the 2.5 s rebalance timeout)
    assert {b.one.generation_id for b in boxes} == {1} and len(boxes[0].one.members) == 5


def test_a_zero_delay_completes_the_join_at_once(logs, clock):
    gc = coordinator(logs, clock, initial_rebalance_delay_ms=0)
    box = join(gc)
    result = box.one  # answered inside the call, without a tick
    assert result.error == E.none and result.generation_id == 1 and result.leader == result.member_id
    # JoinGroup v4+: the rejoin with the handed-out member id completes at once too
    first = join(gc, group="h", require_known=True)
    assert first.one.error == E.member_id_required
    second = join(gc, first.one.member_id, group="h")
    assert second.one.error == E.none and second.one.generation_id == 1


def test_default_delay_is_kafkas():
    assert GroupCoordinator.__init__.__kwdefaults__["initial_rebalance_delay_ms"] == 3000


# --- settings -------------------------------------------------------------------------------

def test_settings():
    s = load_settings({}, {})
    assert (s.group_initial_rebalance_delay_ms, s.offsets_retention_minutes,
            s.offsets_retention_check_interval_ms) == (3000, 10080, 600000)
    s = load_settings({"offsets_retention_minutes": "1"}, {"GATEWAY_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
                                                            "GATEWAY_OFFSETS_RETENTION_CHECK_INTERVAL_MS": "1000"})
    assert (s.group_initial_rebalance_delay_ms, s.offsets_retention_minutes,
            s.offsets_retention_check_interval_ms) == (0, 1, 1000)
    with pytest.raises(ConfigError, match="offsets-retention-minutes"):
        load_settings({"offsets_retention_minutes": "0"}, {})
    with pytest.raises(ConfigError, match="GATEWAY_GROUP_INITIAL_REBALANCE_DELAY_MS"):
        load_settings({}, {"GATEWAY_GROUP_INITIAL_REBALANCE_DELAY_MS": "-1"})
