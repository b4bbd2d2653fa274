"""Cluster mode as Kafka clients see it: three brokers on one ZooKeeper (issue 6).

Registration and one controller in every broker's Metadata; leaders spread over the brokers;
controller failover after kill -9; ISR shrink after ``--replica-lag-time-max-ms`` (3000 here)
while a follower is frozen (SIGSTOP, our loopback stand-in for a network cut) and growth
after it thaws; ``min.insync.replicas`` refusals (NOT_ENOUGH_REPLICAS for acks=all, acks=1
still served); an idempotent acks=all producer and a consumer riding out the death of a leader.

Run: ``.venv/bin/python -m pytest compat_tests/cluster/test_cluster.py -q`` (needs Debian's
``zookeeper`` package; .ci/run installs it). The long fault run is test_faults.py.
"""
from __future__ import annotations

import datetime
import time
import uuid
from collections import Counter

from confluent_kafka import Consumer, KafkaError

from compat_tests.cluster.clients import AckedProducer, produce_one
from compat_tests.cluster.cluster import LAG_MS, ClusterBroker, brokers_of, create_topic, metadata, partition_view
from compat_tests.support import wait_until
from tests.brokerproc import spawn


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def settle(cluster, topic, partitions, rf=3, config=None):
    create_topic(cluster.bootstrap(), topic, partitions, rf, config)
    return partition_view(cluster.wait_isr_full(topic), topic)


def test_three_brokers_register_and_agree_on_one_controller(cluster):
    want = cluster.expected_brokers()
    controllers = {}
    for b in cluster.brokers:
        md = metadata(b.bootstrap)
        assert md is not None, f"broker {b.node_id} did not answer Metadata"
        assert brokers_of(md) == want, f"broker {b.node_id} lists {brokers_of(md)}, want {want}"
        controllers[b.node_id] = md.controller_id
    assert len(set(controllers.values())) == 1, f"brokers disagree on the controller: {controllers}"
    assert set(controllers.values()) <= set(want), f"controller is not a live broker: {controllers}"


def test_replicas_and_leaders_spread_evenly(cluster):
    topic = topic_name()
    view = settle(cluster, topic, 6)
    assert sorted(view) == list(range(6))
    for p, (leader, replicas, isr) in view.items():
        assert sorted(replicas) == [1, 2, 3], f"partition {p}: replicas {replicas}"
        assert leader == replicas[0], f"partition {p}: leader {leader} is not the preferred replica {replicas}"
    leaders = Counter(leader for leader, _, _ in view.values())
    assert leaders == {1: 2, 2: 2, 3: 2}, f"leaders per broker: {dict(leaders)} ({view})"
    # every broker serves the same partition state
    for b in cluster.brokers:
        wait_until(lambda: (md := metadata(b.bootstrap)) is not None and topic in md.topics
                   and partition_view(md, topic) == view, timeout=10,
                   what=f"broker {b.node_id} to serve the same leaders and ISRs as the others")


def test_controller_failover_after_kill_9(cluster):
    topic = topic_name()
    settle(cluster, topic, 6)
    dead = metadata(cluster.bootstrap()).controller_id
    victim = cluster.by_id(dead)
    began = time.monotonic()
    victim.kill()
    survivors = set(cluster.expected_brokers(cluster.live()))

    def failed_over():
        views = [metadata(b.bootstrap, timeout=2) for b in cluster.live()]
        if any(md is None or topic not in md.topics for md in views):
            return False
        if {md.controller_id for md in views} - survivors or len({md.controller_id for md in views}) != 1:
            return False
        for md in views:
            if dead in brokers_of(md):
                return False
            for leader, _, isr in partition_view(md, topic).values():
                if leader not in survivors or dead in isr:
                    return False
        return True
    cluster._wait(failed_over, 15, f"a new controller and leaders off broker {dead} after kill -9")
    took = time.monotonic() - began
    assert took < 12, f"controller failover took {took:.1f}s"
    # the broker comes back on its data directory and rejoins every ISR
    victim.start()
    cluster.wait_registered()
    cluster.wait_isr_full(topic)


def test_isr_shrinks_on_a_frozen_follower_and_grows_when_it_thaws(cluster):
    topic = topic_name()
    view = settle(cluster, topic, 3)
    controller = metadata(cluster.bootstrap()).controller_id
    # a partition led by a non-controller, and its follower that is not the controller either:
    # freezing it then touches neither the leader's nor the controller's work
    p, (leader, replicas, _) = next((p, v) for p, v in view.items() if v[0] != controller)
    follower = cluster.by_id(next(r for r in replicas if r not in (leader, controller)))
    lead = cluster.by_id(leader)
    follower.pause()
    began = time.monotonic()

    def shrunk():
        assert produce_one(lead.bootstrap, topic, p, b"while frozen", acks="1") is None
        md = metadata(lead.bootstrap, timeout=2)
        return md if md is not None and follower.node_id not in partition_view(md, topic)[p][2] else None
    md = cluster._wait(shrunk, LAG_MS / 1000 + 6, f"broker {follower.node_id} to leave the ISR of {topic}-{p}")
    took = time.monotonic() - began
    assert took >= LAG_MS / 1000 / 2, f"the ISR shrank after {took:.1f}s, before replica.lag.time.max.ms"
    # still registered: it left the ISR for lagging, not because its ZooKeeper session expired
    assert follower.node_id in brokers_of(md), \
        f"broker {follower.node_id} was deregistered ({took:.1f}s frozen) before the ISR shrank"
    follower.resume()

    def grown():
        md = metadata(lead.bootstrap, timeout=2)
        return md is not None and sorted(partition_view(md, topic)[p][2]) == sorted(replicas)
    cluster._wait(grown, 20, f"broker {follower.node_id} to rejoin the ISR of {topic}-{p}")
    cluster.wait_isr_full(topic)


def test_min_insync_replicas_refuses_acks_all_but_serves_acks_1(cluster):
    topic = topic_name()
    view = settle(cluster, topic, 1, config={"min.insync.replicas": "2"})
    leader, replicas, _ = view[0]
    lead = cluster.by_id(leader)
    strict = {"acks": "all", "enable.idempotence": False, "retries": 0}
    assert produce_one(lead.bootstrap, topic, 0, b"before", **strict) is None
    followers = [cluster.by_id(r) for r in replicas if r != leader]
    for f in followers:
        assert f.stop() == 0, f"broker {f.node_id} did not stop cleanly:\n{f.output()}"

    def alone():
        md = metadata(lead.bootstrap, timeout=2)
        return md is not None and partition_view(md, topic)[0][2] == [leader]
    cluster._wait(alone, LAG_MS / 1000 + 15, f"the ISR of {topic}-0 to shrink to its leader {leader}")
    err = produce_one(lead.bootstrap, topic, 0, b"refused", **strict)
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, \
        f"acks=all with ISR [{leader}] < min.insync.replicas=2 gave {err!r}, want NOT_ENOUGH_REPLICAS"
    assert produce_one(lead.bootstrap, topic, 0, b"acks=1", acks="1") is None
    for f in followers:
        f.start()
    cluster.wait_isr_full(topic)
    assert produce_one(lead.bootstrap, topic, 0, b"after", **strict) is None


def test_producer_and_consumer_ride_out_a_leader_kill(cluster):
    topic = topic_name()
    view = settle(cluster, topic, 3, config={"min.insync.replicas": "2"})
    producer = AckedProducer(cluster.bootstrap(), topic, 3, "p", rate=200)
    consumed = Counter()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([topic])

    def poll_for(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                consumed[msg.value().decode()] += 1
    producer.start()
    try:
        poll_for(3)
        at_kill = producer.acked_count()
        assert at_kill > 0, "nothing acknowledged before the kill"
        victim = cluster.by_id(view[0][0])
        victim.kill()
        deadline = time.monotonic() + 30
        while producer.acked_count() < at_kill + 500 and time.monotonic() < deadline:
            poll_for(0.5)
        assert producer.acked_count() >= at_kill + 500, \
            f"producing stalled after broker {victim.node_id} died: {producer.acked_count() - at_kill} acked since"
        producer.stop()
        acked = set(producer.acked)
        deadline = time.monotonic() + 30
        while acked - set(consumed) and time.monotonic() < deadline:
            poll_for(0.5)
        missing = acked - set(consumed)
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged ids never consumed, e.g. {sorted(missing)[:5]}"
    finally:
        producer.stopping.set()
        consumer.close()
    victim.start()
    cluster.wait_registered()
    cluster.wait_isr_full(topic)


def test_no_kraft_quorum_to_describe_on_zookeeper(cluster):
    """Cluster mode keeps its metadata in ZooKeeper: like a ZooKeeper-mode Kafka broker, no broker
    lists DescribeQuorum, and one sent anyway is answered UNSUPPORTED_VERSION, not a made-up quorum."""
    from kafka import KafkaAdminClient
    from kafka import errors as Errors
    from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
    from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
    from kio.schema.errors import ErrorCode

    from compat_tests.kafka.kio_call import kio_call
    bootstrap = cluster.bootstrap()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        assert 55 not in admin._manager.broker_version_data.api_versions
        assert 74 in admin._manager.broker_version_data.api_versions  # ListConfigResources still is
        try:
            admin.describe_metadata_quorum()
            raise AssertionError("describe_metadata_quorum answered on a ZooKeeper cluster")
        except Errors.IncompatibleBrokerVersion:
            pass
    finally:
        admin.close()
    host, port = cluster.brokers[0].bootstrap.split(",")[0].rsplit(":", 1)
    answer = kio_call((host, int(port)), 55, DescribeQuorumRequest(topics=(TopicData(
        topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=0),)),)),
        DescribeQuorumResponse, api_version=2)
    assert answer.error_code == ErrorCode.unsupported_version and answer.topics == ()


def test_reassignment_may_forbid_a_replication_factor_change(cluster):
    """AlterPartitionReassignments v1 (KIP-860): with allow_replication_factor_change false, a
    target with another number of replicas is refused, as Kafka refuses it."""
    from kio.schema.alter_partition_reassignments.v1.request import (AlterPartitionReassignmentsRequest,
                                                                     ReassignablePartition, ReassignableTopic)
    from kio.schema.alter_partition_reassignments.v1.response import AlterPartitionReassignmentsResponse
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i32

    from compat_tests.kafka.kio_call import kio_call
    topic = topic_name()
    settle(cluster, topic, 1)
    host, port = cluster.brokers[0].bootstrap.rsplit(":", 1)

    def ask():  # again while the new topic's state has not reached the asked broker (a retriable error)
        answer = kio_call((host, int(port)), 45, AlterPartitionReassignmentsRequest(
            timeout=datetime.timedelta(seconds=10), allow_replication_factor_change=False,
            topics=(ReassignableTopic(name=topic, partitions=(
                ReassignablePartition(partition_index=i32(0), replicas=(i32(1), i32(2))),)),)),
            AlterPartitionReassignmentsResponse, api_version=1)
        [result] = answer.responses[0].partitions
        return result.error_code != ErrorCode.unknown_topic_or_partition and result
    result = wait_until(ask, 15, f"broker 1 to know {topic}")
    assert result.error_code == ErrorCode.invalid_replication_factor, result
    assert result.error_message == "The replication factor is changed from 3 to 2"


def test_a_broker_in_the_other_amqp_cluster_mode_is_refused(cluster, tmp_path):
    """Every broker of a cluster runs the same --amqp-cluster-mode ('spread' by default): one
    started with 'home' next to them exits at once, saying which mode to give it, and leaves the
    cluster as it was."""
    newcomer = ClusterBroker(4, tmp_path / "broker4", cluster.zk_connect,
                             extra_args=("--amqp-cluster-mode", "home"))
    newcomer.data_dir.mkdir(parents=True)
    proc, log_path = spawn(newcomer.data_dir, *newcomer.argv())
    try:
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log_path.read_text(errors="replace")
    assert code != 0, output[-2000:]
    assert "every broker of a cluster must run the same mode" in output, output[-2000:]
    assert "--amqp-cluster-mode spread" in output, output[-2000:]
    def three() -> bool:
        md = metadata(cluster.bootstrap(), timeout=3)
        return md is not None and sorted(brokers_of(md)) == [1, 2, 3]
    wait_until(three, timeout=30, what="the three brokers, and only them, in Metadata")
