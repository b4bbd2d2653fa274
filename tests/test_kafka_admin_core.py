"""The pure parts behind the issue-16 admin APIs: the client quota store (core.quotas), Kafka's
sampled rate and throttle time (gateway.kafka.quotas), OffsetDelete's group rules
(core.groups.subscriptions) and ElectLeaders' choices (core.cluster.view)."""
from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from core.cluster.view import (ELECTED, NOT_AVAILABLE, NOT_NEEDED, NO_LEADER, PartitionState,
                               elect_on_request)
from core.groups.group import Group, GroupState, Member
from core.groups.subscriptions import decode_topics, offset_delete_errors
from core.quotas import ClientQuotaStore, QuotaError
from gateway.kafka.quotas import MAX_THROTTLE_MS, Quotas


# --- quota store ---------------------------------------------------------------------------------

def test_quota_resolution_follows_kafkas_order_and_buckets(tmp_path):
    store = ClientQuotaStore(tmp_path)
    assert store.alter([([("user", None)], [("producer_byte_rate", 100.0, False)]),
                        ([("client-id", None)], [("producer_byte_rate", 200.0, False)]),
                        ([("user", "bob")], [("producer_byte_rate", 300.0, False)]),
                        ([("user", "bob"), ("client-id", "app")], [("producer_byte_rate", 400.0, False)])],
                       False) == [(c, None) for c in ([("user", None)], [("client-id", None)], [("user", "bob")],
                                                       [("user", "bob"), ("client-id", "app")])]
    assert store.byte_rate("producer_byte_rate", "bob", "app") == (400.0, ("bob", "app"))
    assert store.byte_rate("producer_byte_rate", "bob", "other") == (300.0, ("bob", ""))  # shared by bob's clients
    assert store.byte_rate("producer_byte_rate", "eve", "app") == (100.0, ("eve", ""))  # one bucket per user
    assert store.byte_rate("consumer_byte_rate", "eve", "app") is None
    store.alter([([("user", None)], [("producer_byte_rate", 0.0, True)])], False)
    assert store.byte_rate("producer_byte_rate", "eve", "app") == (200.0, ("", "app"))
    assert ClientQuotaStore(tmp_path).entries() == store.entries()  # kept in the data directory


def test_quota_alterations_are_validated_per_entity(tmp_path):
    store = ClientQuotaStore(tmp_path)
    results = [m for _c, m in store.alter([
        ([("user", "a")], [("producer_byte_rate", 10.0, False)]),
        ([("user", "b")], [("producer_byte_rate", 10.0, False), ("request_percentage", 1.0, False),
                           ("producer_byte_rate", 5.0, False)]),
        ([("ip", "10.0.0.1")], [("connection_creation_rate", 3.0, False)]),
        ([("ip", "10.0.0.2")], [("producer_byte_rate", 3.0, False)]),
        ([("topic", "x")], [("producer_byte_rate", 3.0, False)]),
        ([], [("producer_byte_rate", 3.0, False)]),
        ([("user", "a"), ("ip", None)], [("producer_byte_rate", 3.0, False)]),
        ([("client-id", "c"), ("user", None)], [("producer_byte_rate", 3.0, False)]),
        ([("user", None), ("client-id", "c")], [("producer_byte_rate", 4.0, False)]),  # the same entity again
    ], validate_only=True)]
    assert results[0] is None and results[2] is None
    # a key named twice: Kafka's controller answers the entity as if named twice
    assert results[1] == "Ignoring duplicate entity ClientQuotaEntity(entries={user=b})"
    assert results[3] == "Invalid configuration key producer_byte_rate"
    assert results[4] == "Unhandled client quota entity type: topic"
    assert results[5] == "Invalid empty client quota entity"
    assert results[6] == "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
    # one answer per entity: the second naming replaces the first's (which was fine)
    assert results[7:] == ["Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=null})"]
    assert store.entries() == {}  # validate_only


def test_describe_filters(tmp_path):
    store = ClientQuotaStore(tmp_path)
    store.alter([([("user", "a")], [("consumer_byte_rate", 1.0, False)]),
                 ([("user", "a"), ("client-id", "c")], [("consumer_byte_rate", 2.0, False)]),
                 ([("user", None), ("client-id", "c")], [("consumer_byte_rate", 3.0, False)]),
                 ([("ip", None)], [("connection_creation_rate", 4.0, False)])], False)

    def found(components, strict=False):
        return sorted(v["consumer_byte_rate"] if "consumer_byte_rate" in v else v["connection_creation_rate"]
                      for _e, v in store.describe(components, strict))
    assert found([("user", 0, "a")]) == [1.0, 2.0]
    assert found([("user", 0, "a")], strict=True) == [1.0]
    assert found([("user", 2, None)]) == [1.0, 2.0]  # any named user, not the default
    assert found([("user", 1, None)]) == [3.0]
    assert found([("client-id", 0, "c"), ("user", 2, None)], strict=True) == [2.0]
    assert found([]) == [1.0, 2.0, 3.0, 4.0] and found([], strict=True) == []
    with pytest.raises(QuotaError, match="IP filter component should not be used"):
        store.describe([("ip", 2, None), ("user", 2, None)], False)
    with pytest.raises(QuotaError) as info:
        store.describe([("group", 0, "x")], False)
    assert info.value.unsupported


# --- rates and throttle times --------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_throttle_time_is_kafkas_over_a_ten_second_minimum_window(tmp_path):
    store = ClientQuotaStore(tmp_path)
    store.alter([([("client-id", "p")], [("producer_byte_rate", 5000.0, False)])], False)
    clock = Clock()
    quotas = Quotas(store, clock)
    assert quotas.record("producer_byte_rate", "ANONYMOUS", "p", 50_000) == 0  # 5000 B/s over 10 s: at the quota
    assert quotas.record("producer_byte_rate", "ANONYMOUS", "p", 10_000) == 2000  # (6000-5000)/5000 * 10 s
    assert quotas.record("producer_byte_rate", "ANONYMOUS", "other", 10**6) == 0  # no quota for that client
    clock.now += 11  # the samples age out of the 11-window span
    assert quotas.record("producer_byte_rate", "ANONYMOUS", "p", 1000) == 0
    assert quotas.record("producer_byte_rate", "ANONYMOUS", "p", 10**9) == MAX_THROTTLE_MS


def test_a_throttled_fetch_is_not_counted(tmp_path):
    store = ClientQuotaStore(tmp_path)
    store.alter([([("user", None)], [("consumer_byte_rate", 1000.0, False)])], False)
    quotas = Quotas(store, Clock())
    assert quotas.record("consumer_byte_rate", "u", "c", 10_000) == 0
    assert quotas.record("consumer_byte_rate", "u", "c", 5_000, take_back=True) == 5000
    assert quotas.record("consumer_byte_rate", "u", "c", 0) == 0  # the 5000 bytes were taken back


# --- OffsetDelete --------------------------------------------------------------------------------

def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t.encode())) + t.encode()
    return out + struct.pack(">i", -1) + struct.pack(">i", 0)  # user data null, no owned partitions


def _group(protocol_type="consumer", metadata=None, state=GroupState.STABLE) -> Group:
    g = Group("g", state=state, protocol_type=protocol_type, protocol_name="range")
    g.members["m"] = Member("m", None, "c", "h", protocol_type, [("range", metadata or _subscription("t1"))],
                            10000, 10000, 0.0)
    return g


def test_consumer_subscriptions_decode():
    assert decode_topics(_subscription("a", "bé")) == ["a", "bé"]
    with pytest.raises(ValueError):
        decode_topics(b"\x00\x01\x00")


def test_offset_delete_rules():
    asked = [("t1", 0), ("t2", 0)]
    assert offset_delete_errors("g", None, asked) == (ErrorCode.group_id_not_found, {})
    assert offset_delete_errors("", None, asked) == (ErrorCode.invalid_group_id, {})
    assert offset_delete_errors("g", _group(state=GroupState.EMPTY), asked) == (
        ErrorCode.none, {("t1", 0): ErrorCode.none, ("t2", 0): ErrorCode.none})
    assert offset_delete_errors("g", _group(), asked) == (
        ErrorCode.none, {("t1", 0): ErrorCode.group_subscribed_to_topic, ("t2", 0): ErrorCode.none})
    assert offset_delete_errors("g", _group(protocol_type="connect"), asked) == (ErrorCode.non_empty_group, {})
    unreadable = offset_delete_errors("g", _group(metadata=b"\x00"), asked)[1]
    assert set(unreadable.values()) == {ErrorCode.group_subscribed_to_topic}  # cannot tell: keep them


# --- ElectLeaders ---------------------------------------------------------------------------------

def test_preferred_and_unclean_elections_on_request():
    moved = PartitionState(leader=2, leader_epoch=3, isr=(1, 2, 3))
    outcome, new = elect_on_request(moved, (1, 2, 3), {1, 2, 3}, True, 7)
    assert outcome == ELECTED and (new.leader, new.leader_epoch, new.controller_epoch) == (1, 4, 7)
    assert elect_on_request(moved, (2, 1, 3), {1, 2, 3}, True, 7) == (NOT_NEEDED, None)
    assert elect_on_request(PartitionState(2, 3, (2, 3)), (1, 2, 3), {1, 2, 3}, True, 7) == (NOT_AVAILABLE, None)
    assert elect_on_request(moved, (1, 2, 3), {1, 2, 3}, False, 7) == (NOT_NEEDED, None)
    offline = PartitionState(leader=NO_LEADER, leader_epoch=5, isr=(1,))
    outcome, new = elect_on_request(offline, (1, 2, 3), {3}, False, 7)
    assert outcome == ELECTED and new.leader == 3 and new.isr == (3,)  # unclean: out of sync, but live
    assert elect_on_request(offline, (1, 2), {3}, False, 7) == (NOT_AVAILABLE, None)
