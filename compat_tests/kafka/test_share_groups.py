"""KIP-932 share groups with confluent-kafka's ShareConsumer (librdkafka) over real sockets.

A plain share group (no AMQP queue of its name) reads a topic with Kafka's semantics: records
are acquired by one member at a time, accepted ones are done, released ones come back with a
higher delivery count, rejected ones never do, and after ``group.share.delivery.count.limit``
deliveries (5 here, Kafka's default) a record is archived. The groups start at the earliest
offset through the group config ``share.auto.offset.reset`` (Kafka's default is latest).
"""
from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
)
from kafka.admin import KafkaAdminClient
from kio.schema.alter_share_group_offsets.v0 import request as alter_rq, response as alter_rs
from kio.schema.describe_share_group_offsets.v1 import request as describe_rq, response as describe_rs

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.kio_call import kio_call

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000}
TIMEOUT = 30.0


def admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **COMMON})


def topic_with(bootstrap, partitions: int, count: int) -> str:
    name = unique_name("share")
    a = admin(bootstrap)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    wait_until(lambda: len(a.list_topics(name, timeout=10).topics[name].partitions) == partitions, 15, name)
    p = Producer({"bootstrap.servers": bootstrap, **COMMON})
    for i in range(count):
        p.produce(name, value=b"r-%05d" % i, partition=i % partitions)
    assert p.flush(30) == 0
    return name


def set_group_configs(bootstrap, group: str, **configs: str) -> None:
    """SET the group's configs (keys with ``_`` for ``.``) and wait until DescribeConfigs shows them:
    Apache Kafka applies an alter through its controller, and its brokers, whose share coordinator
    reads the config, see it a moment after the alter returned."""
    configs = {name.replace("_", "."): value for name, value in configs.items()}
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    client = admin(bootstrap)  # kept referenced until its futures are done
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)
    described = ConfigResource(ResourceType.GROUP, group)
    wait_until(lambda: all(client.describe_configs([described])[described].result(30)[name].value == value
                           for name, value in configs.items()), 15, f"group {group}'s configs {configs}")


def earliest(bootstrap, group: str) -> None:
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")


def share_consumer(bootstrap, group: str, topic: str, explicit: bool = False, **conf) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **COMMON,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit", **conf})
    c.subscribe([topic])
    return c


def poll_some(consumer: ShareConsumer, want: int, timeout: float = TIMEOUT) -> list:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m)
    return got


def test_two_members_share_every_record_once(bootstrap):
    topic = topic_with(bootstrap, 3, 900)
    group = unique_name("g")
    earliest(bootstrap, group)
    seen: list[list[bytes]] = [[], []]
    stop = threading.Event()

    def member(i: int) -> None:
        c = share_consumer(bootstrap, group, topic, **{"client.id": f"m{i}"})
        try:
            while not stop.is_set():
                for m in c.poll(0.5):
                    assert m.error() is None, m.error()
                    seen[i].append(m.value())
            c.commit_sync(30)
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    wait_until(lambda: len(seen[0]) + len(seen[1]) >= 900, 60, "900 records")
    stop.set()
    for t in threads:
        t.join(60)
    every = Counter(seen[0] + seen[1])
    assert set(every) == {b"r-%05d" % i for i in range(900)}
    assert max(every.values()) == 1, "a record was delivered to two members"


def test_release_redelivers_and_reject_never(bootstrap):
    topic = topic_with(bootstrap, 1, 6)
    group = unique_name("g")
    earliest(bootstrap, group)
    c = share_consumer(bootstrap, group, topic, explicit=True)
    try:
        first = poll_some(c, 6)
        assert [m.value() for m in first] == [b"r-%05d" % i for i in range(6)]
        assert {m.delivery_count() for m in first} == {1}
        kinds = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.REJECT}
        for m in first:
            c.acknowledge(m, kinds[m.offset() % 3])
        c.commit_sync(30)
        again = poll_some(c, 2)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(1, 2), (4, 2)]
        for m in again:
            c.acknowledge(m)
        c.commit_sync(30)
        assert poll_some(c, 1, timeout=3) == []  # accepted and rejected ones are done
    finally:
        c.close()


def test_the_delivery_count_limit_archives_a_record(bootstrap):
    topic = topic_with(bootstrap, 1, 2)
    group = unique_name("g")
    earliest(bootstrap, group)
    c = share_consumer(bootstrap, group, topic, explicit=True)
    counts = []
    try:
        while len(counts) < 6:
            # the first poll waits for the member's assignment (Kafka's heartbeat is 5 s); after
            # the fifth delivery, 5 s without offset 0 coming back is the answer
            got = poll_some(c, 1, timeout=TIMEOUT if not counts else 5)
            if not got:
                break
            for m in got:  # release offset 0 every time, accept the other record
                if m.offset() == 0:
                    counts.append(m.delivery_count())
                c.acknowledge(m, AcknowledgeType.RELEASE if m.offset() == 0 else AcknowledgeType.ACCEPT)
            c.commit_sync(30)
    finally:
        c.close()
    assert counts == [1, 2, 3, 4, 5]


def test_a_member_that_leaves_gives_its_records_to_the_others(bootstrap):
    topic = topic_with(bootstrap, 1, 4)
    group = unique_name("g")
    earliest(bootstrap, group)
    a = share_consumer(bootstrap, group, topic, explicit=True)
    got = poll_some(a, 4)
    assert len(got) == 4
    for m in got:  # explicit mode wants every record acknowledged before close
        a.acknowledge(m, AcknowledgeType.RELEASE)
    a.close()
    b = share_consumer(bootstrap, group, topic)
    try:
        again = poll_some(b, 4)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == [(i, 2) for i in range(4)]
    finally:
        b.close()


def test_start_offsets_survive_a_restart(bootstrap, restart):
    topic = topic_with(bootstrap, 1, 10)
    group = unique_name("g")
    earliest(bootstrap, group)
    c = share_consumer(bootstrap, group, topic)
    assert len(poll_some(c, 10)) == 10
    c.commit_sync(30)
    c.close()
    bootstrap = restart()
    p = Producer({"bootstrap.servers": bootstrap, **COMMON})
    p.produce(topic, value=b"after")
    assert p.flush(30) == 0
    c = share_consumer(bootstrap, group, topic)
    try:
        got = poll_some(c, 1)
        assert [m.value() for m in got] == [b"after"]  # the ten accepted ones stay done
    finally:
        c.close()


def test_the_group_is_listed_as_a_share_group(bootstrap):
    topic = topic_with(bootstrap, 2, 4)
    group = unique_name("g")
    earliest(bootstrap, group)
    c = share_consumer(bootstrap, group, topic)
    try:
        assert len(poll_some(c, 4)) == 4
        c.commit_sync(30)
        kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            listed = kadmin.list_groups(types_filter=["share"])  # ListGroups v5: the group's type
        finally:
            kadmin.close()
        assert group in {g["group_id"] if isinstance(g, dict) else g[0] for g in listed}, listed
        # a consumer-group listing (types consumer and classic) leaves share groups out, as Kafka's does
        client = admin(bootstrap)  # kept referenced until its future is done: a dropped client may leave it unanswered
        assert group not in {g.group_id for g in client.list_consumer_groups().result(30).valid}
    finally:
        c.close()


@pytest.mark.gateway_only("reads the group from our broker's HTTP management API")
def test_the_group_is_described_as_a_share_group_over_http(kafka_broker, bootstrap):
    topic = topic_with(bootstrap, 2, 4)
    group = unique_name("g")
    earliest(bootstrap, group)
    c = share_consumer(bootstrap, group, topic)
    try:
        assert len(poll_some(c, 4)) == 4
        c.commit_sync(30)
        with urllib.request.urlopen(urllib.request.Request(
                f"{kafka_broker.process.http_url}/api/groups/{group}",
                headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}), timeout=10) as r:
            described = json.load(r)
        assert (described["type"], described["state"], described["protocol_type"]) == ("share", "Stable", "share")
        assert len(described["members"]) == 1
        assert sorted((o["partition"], o["committed_offset"]) for o in described["offsets"]) == [(0, 2), (1, 2)]
    finally:
        c.close()


def _describe_offsets(bootstrap, group: str, topic: str) -> list[tuple[int, int, int]]:
    rq, rs = describe_rq, describe_rs
    host, port = bootstrap.rsplit(":", 1)
    answer = kio_call((host, int(port)), 90, rq.DescribeShareGroupOffsetsRequest(groups=(
        rq.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(
            rq.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),)),)),
        rs.DescribeShareGroupOffsetsResponse, api_version=1)
    [g] = answer.groups
    assert g.error_code == 0
    return [(p.partition_index, p.start_offset, p.lag) for t in g.topics for p in t.partitions]


def _alter_offset(bootstrap, group: str, topic: str, offset: int) -> tuple[int, int]:
    rq, rs = alter_rq, alter_rs
    host, port = bootstrap.rsplit(":", 1)
    answer = kio_call((host, int(port)), 91, rq.AlterShareGroupOffsetsRequest(group_id=group, topics=(
        rq.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(
            rq.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=offset),)),)),
        rs.AlterShareGroupOffsetsResponse)
    return answer.error_code, (answer.responses[0].partitions[0].error_code if answer.responses else 0)


def test_share_group_offsets_are_described_altered_and_deleted(bootstrap):
    """DescribeShareGroupOffsets reports what Kafka's share coordinator holds: every state write
    (a request's acknowledgements) carries the start offset as it stood before that write moved
    it, so the start offset trails by one write; the lag is the log's end minus that start minus
    the records settled above it (so it is current)."""
    topic = topic_with(bootstrap, 1, 10)
    group = unique_name("g")
    earliest(bootstrap, group)
    c = share_consumer(bootstrap, group, topic, explicit=True)
    got = poll_some(c, 10)
    assert [m.offset() for m in got] == list(range(10))
    assert _describe_offsets(bootstrap, group, topic) == [(0, -1, -1)]  # acquired only: nothing written yet
    for m in got[:6]:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    c.commit_sync(30)
    assert _describe_offsets(bootstrap, group, topic) == [(0, 0, 4)]  # written with the start it had: 0
    for m in got[6:]:
        c.acknowledge(m, AcknowledgeType.RELEASE)
    c.commit_sync(30)
    assert _describe_offsets(bootstrap, group, topic) == [(0, 6, 4)]  # the start the first write made
    assert _alter_offset(bootstrap, group, topic, 0)[0] == 68  # NON_EMPTY_GROUP while a member is in
    c.close()
    assert _alter_offset(bootstrap, group, topic, 3) == (0, 0)  # empty group: allowed
    assert _describe_offsets(bootstrap, group, topic) == [(0, 3, 7)]
    c = share_consumer(bootstrap, group, topic)
    try:
        again = poll_some(c, 7)
        assert [m.offset() for m in again] == list(range(3, 10))
    finally:
        c.close()
