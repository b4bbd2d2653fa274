"""The controller's pure decisions: replica placement and leader election (core.cluster.view)."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from core.cluster.view import NO_LEADER, BrokerInfo, NotEnoughBrokersError, PartitionState, assign_replicas, elect


def test_replicas_and_leaders_spread_evenly():
    brokers = {1: None, 2: None, 3: None}
    plan = assign_replicas(brokers, 6, 3)
    assert all(len(set(r)) == 3 for r in plan)
    assert Counter(r[0] for r in plan) == {1: 2, 2: 2, 3: 2}  # leaders
    assert Counter(b for r in plan for b in r) == {1: 6, 2: 6, 3: 6}  # every replica


def test_followers_spread_too_with_more_brokers_than_replicas():
    brokers = {b: None for b in range(1, 7)}
    plan = assign_replicas(brokers, 12, 2)
    assert Counter(r[0] for r in plan) == {b: 2 for b in brokers}
    assert len({r for r in plan}) == 12  # no two partitions on the same pair in the same order


def test_rack_aware_placement_puts_replicas_on_different_racks():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for replicas in assign_replicas(racks, 12, 3):
        assert len({racks[b] for b in replicas}) == 3, replicas


def test_more_replicas_than_brokers_is_refused():
    with pytest.raises(NotEnoughBrokersError, match="larger than the 2 live"):
        assign_replicas({1: None, 2: None}, 1, 3)


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 3, 2), version=7)
    new = elect(state, (1, 2, 3), live={2, 3}, unclean=False, controller_epoch=9)
    assert (new.leader, new.leader_epoch, new.isr, new.controller_epoch) == (2, 5, (3, 2), 9)
    assert new.version == 7  # the znode version it was read at: the write is conditional on it


def test_a_dead_follower_only_leaves_the_isr():
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2, 3))
    new = elect(state, (1, 2, 3), live={1, 2}, unclean=False, controller_epoch=1)
    assert (new.leader, new.leader_epoch, new.isr) == (1, 4, (1, 2))


def test_no_live_isr_member_leaves_the_partition_offline_unless_unclean_election_is_on():
    state = PartitionState(leader=1, leader_epoch=4, isr=(1,))
    offline = elect(state, (1, 2, 3), live={2, 3}, unclean=False, controller_epoch=1)
    assert (offline.leader, offline.isr) == (NO_LEADER, (1,))  # only broker 1 may lead next
    assert elect(offline, (1, 2, 3), live={2, 3}, unclean=False, controller_epoch=1) is None
    back = elect(offline, (1, 2, 3), live={1, 2, 3}, unclean=False, controller_epoch=1)
    assert back.leader == 1 and back.leader_epoch == offline.leader_epoch + 1
    unclean = elect(state, (1, 2, 3), live={2, 3}, unclean=True, controller_epoch=1)
    assert (unclean.leader, unclean.isr) == (2, (2,))


def test_preferred_leader_is_chosen_only_when_in_sync():
    state = PartitionState(leader=2, leader_epoch=3, isr=(2, 3))
    assert elect(state, (1, 2, 3), live={1, 2, 3}, unclean=False, controller_epoch=1, prefer=1) is None
    synced = PartitionState(leader=2, leader_epoch=3, isr=(2, 3, 1))
    moved = elect(synced, (1, 2, 3), live={1, 2, 3}, unclean=False, controller_epoch=1, prefer=1)
    assert (moved.leader, moved.leader_epoch) == (1, 4)


def test_nothing_to_do_gives_none():
    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3))
    assert elect(state, (1, 2, 3), live={1, 2, 3}, unclean=False, controller_epoch=1) is None


def test_a_brokers_registration_carries_its_amqp_cluster_mode():
    me = BrokerInfo(2, "h", 9093, "h", 5673, None, amqp_mode="spread")
    assert BrokerInfo.from_json(2, json.loads(json.dumps(me.to_json()))) == me
    older = {k: v for k, v in me.to_json().items() if k != "amqp_cluster_mode"}  # a broker that does not say
    assert BrokerInfo.from_json(2, older).amqp_mode == ""
