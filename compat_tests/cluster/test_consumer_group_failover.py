"""A KIP-848 consumer group survives the kill -9 of its coordinator without a rebalance.

The coordinator keeps the group's members, epochs and assignments in ``__consumer_offsets``
(replicated), as Kafka does; the broker that takes over its partition rebuilds the group from its
replica, so members heartbeating to it go on with their member ids, epochs and partitions: no
partition is revoked or lost, and consumption goes on. Without that state the new coordinator
would answer UNKNOWN_MEMBER_ID and every member would lose its partitions and join again.

Groups are listed by their coordinator only (an admin client asks every broker with ListGroups
and merges the answers): after a failover the new coordinator lists the classic groups that only
have committed offsets, as Empty, and once the old coordinator leads the partition again the
interim one lists nothing of it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.cluster.cluster import create_topic
from compat_tests.cluster.test_transactions_cluster import call, coordinator
from compat_tests.kafka.helpers import wait_until
from tests.brokerproc import ROOT

PARTITIONS = 4


def test_a_consumer_group_keeps_its_members_across_the_kill_of_its_coordinator(cluster):
    topic, group = "kip848-failover", "kip848-failover-group"
    create_topic(cluster.bootstrap(), topic, PARTITIONS, 3)
    cluster.wait_isr_full(topic)
    cluster.wait_isr_full("__consumer_offsets", 60)
    events: list[tuple[str, list]] = []
    consumers = []
    for i in range(2):
        c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "socket.timeout.ms": 15000,
                      "topic.metadata.refresh.interval.ms": 1000})
        c.subscribe([topic], on_assign=lambda _c, ps, i=i: events.append((f"assign{i}", [p.partition for p in ps])),
                    on_revoke=lambda _c, ps, i=i: events.append((f"revoke{i}", [p.partition for p in ps])),
                    on_lost=lambda _c, ps, i=i: events.append((f"lost{i}", [p.partition for p in ps])))
        consumers.append(c)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    got: list[bytes] = []

    def poll_all(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for c in consumers:
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    got.append(m.value())

    try:
        def settled():  # both members hold partitions, all of them between them
            poll_all(0.5)
            return all(c.assignment() for c in consumers) and sum(len(c.assignment()) for c in consumers) == PARTITIONS
        wait_until(settled, 60, "both members assigned")
        members = [c.memberid() for c in consumers]
        for i in range(40):
            producer.produce(topic, value=b"before-%d" % i, partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        wait_until(lambda: (poll_all(0.3), len(got) >= 40)[1], 60, "the first records")
        time.sleep(2)  # the group's state after the last heartbeats is in __consumer_offsets
        before = list(events)

        victim = cluster.by_id(coordinator(cluster, group, 0))
        victim.kill()
        wait_until(lambda: coordinator(cluster, group, 0) != victim.node_id, 60, "a new group coordinator")
        for i in range(40):
            producer.produce(topic, value=b"after-%d" % i, partition=i % PARTITIONS)
        assert producer.flush(60) == 0
        wait_until(lambda: (poll_all(0.3), len(got) >= 80)[1], 90, "the records produced after the kill")
        poll_all(8)  # heartbeats to the new coordinator (every few seconds) would be fenced now
        after = events[len(before):]
        assert [c.memberid() for c in consumers] == members
        assert not after, f"the members were rebalanced after the coordinator's kill: {after}"
        assert sorted(got) == sorted([b"before-%d" % i for i in range(40)] + [b"after-%d" % i for i in range(40)])
    finally:
        for c in consumers:
            c.close()


def _listed(cluster) -> dict[int, dict[str, str]]:
    """Each live broker's ListGroups answer: group id -> state."""
    return {b.node_id: {g.group_id: g.group_state for g in call(b.bootstrap, 16, 4, {"states_filter": []}).groups}
            for b in cluster.live()}


def test_groups_are_listed_by_their_coordinator_only(cluster):
    topic = "listed-groups"
    create_topic(cluster.bootstrap(), topic, 1, 3)
    cluster.wait_isr_full("__consumer_offsets", 60)
    producer = Producer({"bootstrap.servers": cluster.bootstrap()})
    for i in range(5):  # the lag the management API shows: 5 records, offset 1 committed
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    classic = [f"offsets-only-{i}" for i in range(3)]
    for group in classic:  # no member left: only committed offsets make these groups
        c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group})
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        c.close()
    live = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "listed-kip848", "group.protocol": "consumer",
                     "topic.metadata.refresh.interval.ms": 1000})
    live.subscribe([topic])
    expected = {**{g: "Empty" for g in classic}, "listed-kip848": "Stable"}

    def listed_only_by(node: int):
        live.poll(0.2)
        listed = _listed(cluster)
        return listed.get(node) == expected and not any(v for n, v in listed.items() if n != node)

    try:
        home = coordinator(cluster, "listed-kip848", 0)
        assert {coordinator(cluster, g, 0) for g in classic} == {home}  # one offsets partition here
        wait_until(lambda: listed_only_by(home), 30, f"the groups listed by broker {home} alone")
        victim = cluster.by_id(home)
        victim.kill()
        interim = wait_until(lambda: (lambda n: n if n != home else None)(coordinator(cluster, "listed-kip848", 0)),
                             60, "a new group coordinator")
        wait_until(lambda: listed_only_by(interim), 30, f"the groups listed by the new coordinator {interim} alone")
        victim.start()
        wait_until(lambda: (live.poll(0.2), coordinator(cluster, "listed-kip848", 0) == home)[1], 90,
                   f"broker {home} leading the offsets partition again")
        wait_until(lambda: listed_only_by(home), 30, f"the groups listed by broker {home} alone again")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        result = admin.list_consumer_groups().result(30)
        assert not result.errors, result.errors
        assert sorted(g.group_id for g in result.valid) == sorted(expected)
        other = next(b for b in cluster.live() if b.node_id != home)  # the CLI asks every broker too
        cli = subprocess.run([sys.executable, "-m", "gateway", "groups", "list", "--json", "--bootstrap",
                              other.bootstrap], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        assert {g["group"]: g["state"] for g in json.loads(cli.stdout)} == expected
        # the management API of a broker that coordinates none of them shows them all, with lag
        api = f"http://{other.ip}:{other.ports['http']}/api"
        listed = requests.get(f"{api}/groups", auth=("guest", "guest"), timeout=30)
        assert listed.status_code == 200, listed.text
        assert {g["group_id"]: g["state"] for g in listed.json()} == expected
        one = requests.get(f"{api}/groups/{classic[0]}", auth=("guest", "guest"), timeout=30).json()
        assert [(o["topic"], o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"])
                for o in one["offsets"]] == [(topic, 0, 1, 5, 4)] and one["lag"] == 4, one
        assert one["state"] == "Empty" and one["type"] == "classic"
        kip848 = requests.get(f"{api}/groups/listed-kip848", auth=("guest", "guest"), timeout=30).json()
        assert kip848["type"] == "consumer" and len(kip848["members"]) == 1, kip848
        assert requests.get(f"{api}/groups/no-such-group", auth=("guest", "guest"), timeout=30).status_code == 404
    finally:
        live.close()
