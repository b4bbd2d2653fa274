"""Exactly-once across a 3-broker cluster (RF=3): transactions whose coordinator, data
partitions and group coordinator are on different brokers, and kill -9 of each in turn.

The transaction coordinator of an id is the leader of its ``__transaction_state`` partition
(FindCoordinator key type 1); other brokers answer NOT_COORDINATOR. A consume-transform-produce
loop (confluent-kafka, read_committed input, output plus input offsets in one transaction) runs
while the transaction coordinator, the leader of an output partition and the group coordinator
are killed with SIGKILL one after the other (``TXN_CLUSTER_ROUNDS`` rounds, default 1 for the
KIP-848 loop and the transaction coordinator only for the classic one;
``TXN_CLUSTER_RECORDS`` input records, default 450): the committed output holds each input
exactly once and the committed input offsets are the input's ends.
"""
from __future__ import annotations

import os
import random
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from kio.schema.errors import ErrorCode

from compat_tests.cluster.cluster import create_topic, make_cluster, metadata
from compat_tests.conftest import unique_name
from compat_tests.kafka.eos_loop import EosLoop, committed_offsets, read_values, transform
from compat_tests.kafka.kio_call import kio_call
from wire.kafka import build, request_class, response_class

ROUNDS = int(os.environ.get("TXN_CLUSTER_ROUNDS", "1"))
RECORDS = int(os.environ.get("TXN_CLUSTER_RECORDS", "450"))
PARTITIONS = 3
INTERNAL = ("__transaction_state", "__consumer_offsets")


def call(address: str, api_key: int, version: int, data: dict):
    host, _, port = address.rpartition(":")
    request = build(request_class(api_key, version), data)
    return kio_call((host, int(port)), api_key, request, response_class(api_key, version), api_version=version)


def coordinator(cluster, key: str, key_type: int, timeout: float = 30) -> int:
    """The node FindCoordinator names for a group (0) or a transactional id (1), asked of a live broker."""
    deadline = time.monotonic() + timeout
    while True:
        for b in cluster.live():
            try:
                found = call(b.bootstrap, 10, 4, {"key_type": key_type, "coordinator_keys": [key]}).coordinators[0]
            except (OSError, AssertionError):
                continue
            if found.error_code == ErrorCode.none:
                return found.node_id
        assert time.monotonic() < deadline, f"no coordinator for {key!r} within {timeout} s"
        time.sleep(0.3)


def leader_of(cluster, topic: str, partition: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while True:
        md = metadata(cluster.bootstrap(), timeout=3)
        if md is not None and topic in md.topics:
            leader = md.topics[topic].partitions[partition].leader
            if leader in {b.node_id for b in cluster.live()}:
                return leader
        assert time.monotonic() < deadline, f"no live leader for {topic}-{partition}"
        time.sleep(0.3)


TXN_STATE_PARTITIONS = 3  # coordinators spread over the brokers: each leads one partition


@pytest.fixture
def cluster(zk_connect, tmp_path, request):
    """The suite's three brokers, with __transaction_state in TXN_STATE_PARTITIONS partitions."""
    c = make_cluster(tmp_path, zk_connect, n=3,
                     extra_args=("--transaction-state-partitions", str(TXN_STATE_PARTITIONS)))
    request.node.cluster = c  # for the report hook (conftest)
    try:
        c.start()
        yield c
    finally:
        c.close()


def test_transactions_are_served_by_their_coordinator(cluster):
    topic, tid = unique_name("txn"), unique_name("tid")
    create_topic(cluster.bootstrap(), topic, PARTITIONS, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": tid})
    producer.init_transactions(30)  # timed out before: FindCoordinator answered INVALID_REQUEST
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
    producer.commit_transaction(30)
    assert sorted(read_values(cluster.bootstrap(), topic, PARTITIONS, "read_committed", 30)) == \
        sorted(b"v%d" % i for i in range(30))

    # the ids' coordinators are the leaders of their __transaction_state partitions: spread
    leaders = {leader_of(cluster, "__transaction_state", p) for p in range(TXN_STATE_PARTITIONS)}
    coordinators = {coordinator(cluster, f"{tid}-{i}", 1) for i in range(12)}
    assert len(leaders) >= 2 and coordinators <= leaders and len(coordinators) >= 2, (leaders, coordinators)

    node = coordinator(cluster, tid, 1)
    others = [b for b in cluster.brokers if b.node_id != node]
    # operators' views, as on Kafka: the coordinator describes the id, each broker lists its own ids
    described = call(cluster.by_id(node).bootstrap, 65, 0, {"transactional_ids": [tid]}).transaction_states[0]
    assert (described.error_code, described.transaction_state) == (ErrorCode.none, "CompleteCommit")
    for b in cluster.brokers:
        listed = {t.transactional_id for t in call(b.bootstrap, 66, 0, {"state_filters": [], "producer_id_filters": []}
                                                   ).transaction_states}
        assert (tid in listed) == (b.node_id == node), (b.node_id, node, listed)
        if b.node_id != node:
            elsewhere = call(b.bootstrap, 65, 0, {"transactional_ids": [tid]}).transaction_states[0]
            assert elsewhere.error_code == ErrorCode.not_coordinator
    for other in others:  # bad input: a transaction request to a broker that is not the coordinator
        init = call(other.bootstrap, 22, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                             "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == ErrorCode.not_coordinator
        end = call(other.bootstrap, 26, 3, {"transactional_id": tid, "producer_id": 1, "producer_epoch": 0,
                                            "committed": True})
        assert end.error_code == ErrorCode.not_coordinator
        add = call(other.bootstrap, 25, 3, {"transactional_id": tid, "producer_id": 1, "producer_epoch": 0,
                                            "group_id": "g"})
        assert add.error_code == ErrorCode.not_coordinator
    # at the coordinator the id is re-initialised: the epoch moves on and the first producer is a zombie
    again = call(cluster.by_id(node).bootstrap, 22, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                        "producer_id": -1, "producer_epoch": -1})
    assert again.error_code == ErrorCode.none
    producer.begin_transaction()
    producer.produce(topic, value=b"zombie", partition=0)
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert b"zombie" not in read_values(cluster.bootstrap(), topic, PARTITIONS, "read_committed", 30)


def _wait_whole(cluster, topics) -> None:
    cluster.wait_registered(60)
    for topic in topics:
        cluster.wait_isr_full(topic, 60)


# CI: the KIP-848 loop loses all three in turn, the classic one its transaction coordinator
# (TXN_CLUSTER_ROUNDS set: both lose all three, that many times)
@pytest.mark.parametrize("protocol,kills", [("consumer", 3), ("classic", 3 if "TXN_CLUSTER_ROUNDS" in os.environ else 1)])
def test_consume_transform_produce_survives_kill_9(cluster, protocol, kills):
    source, sink, group, tid = unique_name("in"), unique_name("out"), unique_name("eos"), unique_name("tid")
    bootstrap = cluster.bootstrap()
    for name in (source, sink):
        create_topic(bootstrap, name, PARTITIONS, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    values = [f"in-{i}".encode() for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce(source, key=str(i).encode(), value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    loop = EosLoop(bootstrap, source, sink, group, tid, protocol)
    victims = [lambda: coordinator(cluster, tid, 1), lambda: leader_of(cluster, sink, 0),
               lambda: coordinator(cluster, group, 0)][:kills] * ROUNDS
    kill_at = [RECORDS * (i + 1) // (len(victims) + 1) for i in range(len(victims))]
    progress = {"done": 0, "killed": [], "failed": None}
    finished = threading.Event()

    def nemesis():  # its own thread, so a kill lands wherever the loop is: mid-transaction too
        try:
            for victim, at in zip(victims, kill_at):
                while progress["done"] < at and not finished.is_set():
                    time.sleep(0.05)
                if finished.is_set():
                    return
                broker = cluster.by_id(victim())
                time.sleep(random.uniform(0, 0.3))
                broker.kill()
                progress["killed"].append(broker.node_id)
                time.sleep(1.0)  # the loop carries on while it is down
                broker.start()
                _wait_whole(cluster, (source, sink) + INTERNAL)
        except Exception as exc:  # reported by the main thread
            progress["failed"] = exc
    killer = threading.Thread(target=nemesis, daemon=True)
    killer.start()
    deadline = time.monotonic() + 60 + 60 * len(victims)
    try:
        while progress["done"] < RECORDS:
            if time.monotonic() > deadline:  # the group's offsets tell a commit the client was told had failed
                committed = committed_offsets(cluster.bootstrap(), group, source, PARTITIONS)
                raise AssertionError(f"only {progress} of {RECORDS} records through; {loop.committed} transactions "
                                     f"committed, {loop.aborted} aborted, {len(loop.abandoned)} producers stuck in "
                                     f"the client; the group's committed offsets: {committed}")
            progress["done"] += loop.step()
    finally:
        finished.set()
        killer.join(120)
        loop.close()
    assert progress["failed"] is None, progress["failed"]
    assert len(progress["killed"]) == kills * ROUNDS, progress

    output = read_values(cluster.bootstrap(), sink, PARTITIONS, "read_committed", RECORDS)
    assert sorted(output) == sorted(transform(v) for v in values), "output is not each input exactly once"
    per_partition = {p: len(values[p::PARTITIONS]) for p in range(PARTITIONS)}
    assert committed_offsets(cluster.bootstrap(), group, source, PARTITIONS) == per_partition


def test_a_hung_transaction_is_aborted_by_its_timeout(cluster):
    """An abandoned transaction holds back read_committed on every partition it wrote to, led by
    any broker, until its coordinator's timeout aborts it there with markers."""
    topic = unique_name("hung")
    create_topic(cluster.bootstrap(), topic, PARTITIONS, 3)
    hung = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": unique_name("hung"),
                     "transaction.timeout.ms": 3000})
    hung.init_transactions(30)
    hung.begin_transaction()
    for p in range(PARTITIONS):
        hung.produce(topic, value=b"hung", partition=p)
    hung.flush(30)  # written, never ended
    later = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": unique_name("later")})
    later.init_transactions(30)
    later.begin_transaction()
    for p in range(PARTITIONS):
        later.produce(topic, value=b"later", partition=p)
    later.commit_transaction(30)
    values = read_values(cluster.bootstrap(), topic, PARTITIONS, "read_committed", PARTITIONS, timeout=40)
    assert sorted(values) == [b"later"] * PARTITIONS
