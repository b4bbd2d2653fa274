"""The Kafka admin APIs of issue 16 part 4, driven by real clients over real sockets:
OffsetDelete, DescribeLogDirs/AlterReplicaLogDirs, DescribeTopicPartitions, ElectLeaders,
DescribeClientQuotas/AlterClientQuotas with byte-rate throttling, the KIP-714 telemetry pair,
and the ApiVersions set kafka-python reads a broker version from.

kafka-python has no admin call for client quotas, so those requests are kafka-python's own
protocol classes sent through its client's connection manager; the telemetry pair, which
neither Python client exposes, goes over a plain socket encoded with ``kio``. The Java
kafka-clients Admin (3.9.1, compat_tests/java/AdminApis.java) runs the same APIs once per module;
its describeTopics pages through DescribeTopicPartitions (librdkafka's uses Metadata).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, ElectionType, KafkaError, Producer, TopicCollection,
                             TopicPartition as CkPartition)
from confluent_kafka.admin import AdminClient, NewTopic as CkNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as Errors
from kafka.admin import ACL, ACLOperation, ACLPermissionType, NewTopic, ResourcePattern, ResourceType
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.structs import OffsetAndMetadata
from kio.schema.get_telemetry_subscriptions.v0 import GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse
from kio.schema.push_telemetry.v0 import PushTelemetryRequest, PushTelemetryResponse

from compat_tests import tools
from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.kio_call import KioConnection
from tests.brokerproc import ROOT, start_broker

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000}


@pytest.fixture
def admin(bootstrap):
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def _produce(bootstrap, topic, values, partition=None, **conf):
    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    for v in values:
        producer.send(topic, v, partition=partition)
    producer.flush(30)
    producer.close()


def _create(admin, name, partitions):
    admin.create_topics([NewTopic(name, partitions, 1)])
    wait_until(lambda: name in admin.list_topics(), 15, f"topic {name}")


# --- ApiVersions ------------------------------------------------------------------------------

@pytest.mark.gateway_only("pins the API versions our broker advertises, as Kafka 4.1 lists them "
                            "(the newest whose APIs it serves); Kafka 4.4 advertises newer ones, e.g. DescribeLogDirs (API 35) v5")
def test_kafka_python_infers_kafka_4_1_and_consumes_by_topic_id(bootstrap, admin, topic_name):
    assert admin._client.check_version() >= (4, 1)  # Fetch v17 (3.9) asks for topics by id; 4.1: Produce v13
    versions = admin._manager.broker_version_data.api_versions
    for key, high in {1: 18, 34: 2, 35: 4, 43: 2, 47: 0, 48: 1, 49: 1, 71: 0, 72: 0, 75: 0}.items():
        assert versions[key][1] == high, (key, versions[key])
    _create(admin, topic_name, 2)
    _produce(bootstrap, topic_name, [f"v{i}".encode() for i in range(20)])
    consumer = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, api_version=None, auto_offset_reset="earliest",
                             group_id=unique_name("kp-v17"), enable_auto_commit=False)
    try:
        assert consumer.config["api_version"] >= (4, 1)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                got.extend(r.value for r in records)
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    finally:
        consumer.close()


# --- OffsetDelete -----------------------------------------------------------------------------

def test_offset_delete_follows_kafkas_group_rules(bootstrap, admin, topic_name, restart):
    other = unique_name("od-other")
    _create(admin, topic_name, 2)
    _create(admin, other, 1)
    _produce(bootstrap, topic_name, [b"x"] * 10)
    group = unique_name("od-group")
    # librdkafka's consumer as the active member: kafka-python's, polled in short steps, now and
    # then lost its assignment on a loaded machine (Kafka had sent it; assignment() stayed empty)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **COMMON})
    consumer.subscribe([topic_name])
    try:
        wait_until(lambda: consumer.poll(0.2) is not None or consumer.assignment(), 30, "an assignment")
        consumer.commit(offsets=[CkPartition(topic_name, 0, 3), CkPartition(topic_name, 1, 4),
                                 CkPartition(other, 0, 1)], asynchronous=False)
        # active and subscribed to topic_name: those offsets stay; the other topic's may go
        result = admin.delete_group_offsets(group, [TopicPartition(topic_name, 0), TopicPartition(other, 0),
                                                    TopicPartition(other, 7)])
        assert result == {TopicPartition(topic_name, 0): Errors.GroupSubscribedToTopicError,
                          TopicPartition(other, 0): Errors.NoError,
                          TopicPartition(other, 7): Errors.UnknownTopicOrPartitionError}
    finally:
        consumer.close()
    wait_until(lambda: admin.describe_groups([group])[group]["group_state"] == "Empty", 15, "the group to be empty")
    result = admin.delete_group_offsets(group, [TopicPartition(topic_name, 0)])
    assert result == {TopicPartition(topic_name, 0): Errors.NoError}
    assert admin.list_group_offsets({group: None})[group] == {
        TopicPartition(topic_name, 1): OffsetAndMetadata(4, "", -1)}
    with pytest.raises(Errors.GroupIdNotFoundError):
        admin.delete_group_offsets(unique_name("no-such-group"), [TopicPartition(topic_name, 0)])
    # the deletions are tombstones in __consumer_offsets: a restart replays them
    bootstrap = restart()
    after = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        # a restarted Kafka answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (retriable)
        # until it has loaded __consumer_offsets; kafka-python's admin does not retry them
        assert _retrying(lambda: after.list_group_offsets({group: None})[group]) == {
            TopicPartition(topic_name, 1): OffsetAndMetadata(4, "", -1)}
    finally:
        after.close()


def _retrying(call, timeout: float = 30):
    """``call()``, again while it raises a retriable Kafka error, for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except Errors.KafkaError as e:
            if not e.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# --- DescribeLogDirs / AlterReplicaLogDirs ----------------------------------------------------

def test_describe_log_dirs_tells_the_truth(bootstrap, admin, kafka_broker, topic_name):
    if kafka_broker.data_dir is None:
        pytest.skip("an external broker's data directory is not ours to read")
    _create(admin, topic_name, 2)
    _produce(bootstrap, topic_name, [os.urandom(300) for _ in range(25)], partition=1)
    (answer,) = admin.describe_log_dirs({topic_name: [0, 1, 5]})
    assert answer["broker"] == 0
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == os.path.realpath(kafka_broker.data_dir)
    assert log_dir["total_bytes"] > log_dir["usable_bytes"] > 0
    (topic,) = log_dir["topics"]
    parts = {p["partition_index"]: p for p in topic["partitions"]}
    assert topic["name"] == topic_name and sorted(parts) == [0, 1]  # partition 5 does not exist: left out
    for index, p in parts.items():
        on_disk = sum(f.stat().st_size for f in (kafka_broker.data_dir / f"{topic_name}-{index}").glob("*.log"))
        assert p["partition_size"] == on_disk and p["offset_lag"] == 0 and p["is_future_key"] is False
    assert parts[0]["partition_size"] == 0 and parts[1]["partition_size"] > 25 * 300
    everything = admin.describe_log_dirs()[0]["log_dirs"][0]["topics"]
    assert {t["name"] for t in everything} >= {topic_name, "__consumer_offsets"}


def test_alter_replica_log_dirs_with_one_data_dir(bootstrap, admin, kafka_broker, topic_name):
    if kafka_broker.data_dir is None:
        pytest.skip("an external broker's data directory is not ours to read")
    _create(admin, topic_name, 1)
    here = os.path.realpath(kafka_broker.data_dir)
    result = admin.alter_replica_log_dirs({(topic_name, 0, 0): here, (unique_name("none"), 0, 0): here})
    assert sorted(result.values(), key=str) == [Errors.NoError, Errors.UnknownTopicOrPartitionError]
    result = admin.alter_replica_log_dirs({(topic_name, 0, 0): "/elsewhere/kafka-logs"})
    assert list(result.values()) == [Errors.LogDirNotFoundError]


# --- DescribeTopicPartitions ------------------------------------------------------------------

def test_describe_topic_partitions_pages_with_a_cursor(bootstrap, admin):
    base = unique_name("dtp")
    a, b, missing = f"{base}-a", f"{base}-b", f"{base}-c"
    _create(admin, a, 3)
    _create(admin, b, 2)

    def page(limit, cursor=None, topics=(a, b, missing)):
        out = admin.describe_topic_partitions(list(topics), response_partition_limit=limit, cursor=cursor)
        return [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                for t in out["topics"]], out["next_cursor"]

    assert page(2) == ([(a, 0, [0, 1])], {"topic_name": a, "partition_index": 2})
    assert page(2, {"topic_name": a, "partition_index": 2}) == ([(a, 0, [2]), (b, 0, [0])],
                                                                {"topic_name": b, "partition_index": 1})
    assert page(2, {"topic_name": b, "partition_index": 1}) == ([(b, 0, [1]), (missing, 3, [])], None)
    # the limit running out at a topic's end: the next page starts at the next topic's partition 0
    assert page(3) == ([(a, 0, [0, 1, 2])], {"topic_name": b, "partition_index": 0})
    # a cursor must name a listed topic
    topics, cursor = page(5, {"topic_name": missing + "x", "partition_index": 0}, topics=(a, b))
    assert cursor is None and {(n, e) for n, e, _ in topics} == {(a, 42), (b, 42)}  # INVALID_REQUEST
    full = admin.describe_topic_partitions([a])["topics"][0]
    assert [p["leader_id"] for p in full["partitions"]] == [0, 0, 0]
    assert full["partitions"][0]["isr_nodes"] == [0] and full["partitions"][0]["replica_nodes"] == [0]
    assert isinstance(full["topic_id"], uuid.UUID) and full["topic_id"].int != 0


def test_describe_topics_with_confluent_kafka(bootstrap, admin, topic_name):
    _create(admin, topic_name, 3)
    ck = AdminClient({"bootstrap.servers": bootstrap, **COMMON})
    desc = ck.describe_topics(TopicCollection([topic_name]))[topic_name].result(30)
    assert [(p.id, p.leader.id, [r.id for r in p.isr]) for p in desc.partitions] == [(i, 0, [0]) for i in range(3)]
    dtp = admin.describe_topic_partitions([topic_name])["topics"][0]
    assert str(desc.topic_id) == _base64_uuid(dtp["topic_id"])


def _base64_uuid(u: uuid.UUID) -> str:
    """librdkafka's printed form of a topic id: base64 without padding (Java's is URL-safe base64)."""
    return base64.b64encode(u.bytes).decode().rstrip("=")


# --- ElectLeaders -----------------------------------------------------------------------------

def test_elect_leaders_on_a_single_node(bootstrap, topic_name):
    ck = AdminClient({"bootstrap.servers": bootstrap, **COMMON})
    ck.create_topics([CkNewTopic(topic_name, 2)])[topic_name].result(30)
    wait_until(lambda: len(ck.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 2, 15, "metadata")
    unknown = unique_name("no-topic")
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        asked = [CkPartition(topic_name, 0), CkPartition(topic_name, 1), CkPartition(topic_name, 9),
                 CkPartition(unknown, 0)]
        result = ck.elect_leaders(election, asked).result(30)
        codes = {(tp.topic, tp.partition): err.code() if err is not None else None for tp, err in result.items()}
        assert codes == {(topic_name, 0): KafkaError.ELECTION_NOT_NEEDED, (topic_name, 1): KafkaError.ELECTION_NOT_NEEDED,
                         (topic_name, 9): KafkaError.UNKNOWN_TOPIC_OR_PART, (unknown, 0): KafkaError.UNKNOWN_TOPIC_OR_PART}
    # every partition: those not needing an election are left out, so nothing is listed
    assert ck.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}


# --- client quotas ----------------------------------------------------------------------------

def _kp_call(admin, request):
    async def call():
        return await admin._manager.send(request)
    return admin._manager.run(call)


def _alter_response(admin, entries, validate_only):
    E = AlterClientQuotasRequest.EntryData
    return _kp_call(admin, AlterClientQuotasRequest(entries=[
        E(entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity],
          ops=[E.OpData(key=k, value=float(v) if v is not None else 0.0, remove=v is None) for k, v in ops.items()])
        for entity, ops in entries], validate_only=validate_only))


def _alter(admin, entries, validate_only=False):
    return [(e.error_code, e.error_message) for e in _alter_response(admin, entries, validate_only).entries]


def _alter_each(admin, entries, validate_only=False):
    """{entity (sorted components): (error code, message)}: answers are per entity, unordered."""
    response = _alter_response(admin, entries, validate_only)
    answers = {tuple(sorted(((c.entity_type, c.entity_name) for c in e.entity), key=repr)): (e.error_code,
                                                                                         e.error_message)
               for e in response.entries}
    assert len(answers) == len(response.entries), "an entity answered twice"
    return answers


def _describe(admin, components, strict=False):
    C = DescribeClientQuotasRequest.ComponentData
    response = _kp_call(admin, DescribeClientQuotasRequest(
        components=[C(entity_type=t, match_type=m, match=v) for t, m, v in components], strict=strict))
    if response.error_code:
        return response.error_code, response.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in (response.entries or ())}


EXACT, DEFAULT, ANY = 0, 1, 2


def _described(admin, components, expected, strict=False):
    """Kafka applies AlterClientQuotas through its controller: a describe sent right after the
    answer may not see the change yet, so wait for it as a Kafka user must."""
    found = []
    try:
        wait_until(lambda: found.append(_describe(admin, components, strict)) or found[-1] == expected, 10,
                   "the altered quotas to be described")
    except AssertionError:
        assert found[-1] == expected


def test_client_quotas_are_stored_validated_and_kept(bootstrap, admin, restart):
    user, client = unique_name("alice"), unique_name("app")
    assert _alter(admin, [([("user", user)], {"producer_byte_rate": 1024})], validate_only=True) == [(0, None)]
    assert _describe(admin, [("user", EXACT, user)]) == {}  # validate_only changed nothing
    # one answer per entity, in no particular order (Kafka's controller keeps them in a hash map);
    # an entity named twice is answered "Ignoring duplicate entity" (its first alteration failed)
    assert _alter_each(admin, [
        ([("user", user)], {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
        ([("user", user), ("client-id", client)], {"request_percentage": 12.5}),
        ([("user", None)], {"consumer_byte_rate": 4096}),
        ([("client-id", client)], {"producer_byte_rate": 1.5}),          # rates are whole bytes
        ([("client-id", client)], {"bogus_rate": 1}),
        ([("ip", "10.0.0.1"), ("user", user)], {"producer_byte_rate": 1}),
        ([("user", "")], {"producer_byte_rate": 1}),
    ]) == {(("user", user),): (0, None), (("client-id", client), ("user", user)): (0, None), (("user", None),): (0, None),
           (("client-id", client),): (42, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=%s})" % client),
           (("ip", "10.0.0.1"), ("user", user)): (
               42, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
           (("user", ""),): (42, "Empty user not supported")}
    assert _alter(admin, [([("client-id", client)], {"producer_byte_rate": 1.5})]) == [
        (42, "producer_byte_rate cannot be a fractional value.")]
    assert _alter_each(admin, [([("user", user)], {"consumer_byte_rate": 0}), ([("ip", None)], {"producer_byte_rate": 5}),
                               ([("client-id", client)], {"consumer_byte_rate": float("inf")})], validate_only=True) == {
        (("user", user),): (42, "Quota consumer_byte_rate must be greater than 0"),
        (("ip", None),): (42, "Invalid configuration key producer_byte_rate"),
        (("client-id", client),): (42, "Quota consumer_byte_rate must be a finite number")}
    mine = {(("user", user),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
            (("client-id", client), ("user", user)): {"request_percentage": 12.5}}
    _described(admin, [("user", EXACT, user)], mine)
    assert _describe(admin, [("user", EXACT, user)], strict=True) == {(("user", user),): mine[(("user", user),)]}
    assert _describe(admin, [("user", DEFAULT, None)]) == {(("user", None),): {"consumer_byte_rate": 4096.0}}
    assert _describe(admin, [("user", EXACT, user), ("client-id", ANY, None)]) == {
        (("client-id", client), ("user", user)): {"request_percentage": 12.5}}
    assert _describe(admin, [("group", EXACT, "g")]) == (35, "Unsupported entity type group")
    assert _describe(admin, [("user", EXACT, None)])[0] == 42
    assert _alter(admin, [([("user", user)], {"consumer_byte_rate": None})]) == [(0, None)]  # remove one key
    bootstrap = restart()  # kept in the data directory
    after = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        assert _describe(after, [("user", EXACT, user), ("client-id", ANY, None)], strict=False) == {
            (("client-id", client), ("user", user)): {"request_percentage": 12.5}}
        assert _describe(after, [("user", EXACT, user)], strict=True) == {(("user", user),): {"producer_byte_rate": 1024.0}}
        assert _alter(after, [([("user", user)], {"producer_byte_rate": None}),
                              ([("user", user), ("client-id", client)], {"request_percentage": None}),
                              ([("user", None)], {"consumer_byte_rate": None})]) == [(0, None)] * 3
        _described(after, [("user", EXACT, user)], {})
    finally:
        after.close()


def test_producer_over_its_byte_rate_is_throttled(bootstrap, admin, topic_name):
    client = unique_name("slow-producer")
    assert _alter(admin, [([("client-id", client)], {"producer_byte_rate": 5000})]) == [(0, None)]
    try:
        throttles = []
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": client, "linger.ms": 20,
                             "throttle_cb": lambda event: throttles.append(event.throttle_time), **COMMON})
        started = time.monotonic()
        for _ in range(60):  # 60 KB at 5 KB/s, counted over a 10 s window: 6 KB/s, 2 s too much
            producer.produce(topic_name, os.urandom(1000))
        assert producer.flush(60) == 0
        wait_until(lambda: producer.poll(0.1) is not None and throttles, 30, "a throttle callback")
        elapsed = time.monotonic() - started
        # Kafka (KIP-219) answers at once with the throttle time and then mutes the connection,
        # so the flush need not have lasted the throttle; that a throttle was reported is the rule
        assert max(throttles) > 0.5, (throttles, elapsed)
        # another client id has no quota: not throttled
        others = []
        free = Producer({"bootstrap.servers": bootstrap, "client.id": unique_name("free"), "linger.ms": 20,
                         "throttle_cb": lambda event: others.append(event.throttle_time), **COMMON})
        for _ in range(60):
            free.produce(topic_name, os.urandom(1000))
        assert free.flush(30) == 0 and free.poll(0.5) == 0 and others == []
    finally:
        _alter(admin, [([("client-id", client)], {"producer_byte_rate": None})])


def test_consumer_over_its_byte_rate_is_throttled(bootstrap, admin, topic_name):
    """consumer_byte_rate as Kafka enforces it: a fetch over the rate is answered empty with
    throttle_time_ms (librdkafka's throttle_cb) and the connection muted for that long. Kafka
    lets a new client's first fetch through whole (36 KB here), so the topic keeps growing at
    12 KB/s against 3000 B/s for 12 s: a throttle is reported and the consumer stays within the
    rate (plus a window's burst), far from everything produced."""
    client = unique_name("slow-consumer")
    _create(admin, topic_name, 1)
    assert _alter(admin, [([("client-id", client)], {"consumer_byte_rate": 3000})]) == [(0, None)]
    try:
        throttles, got = [], []
        consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client, "group.id": unique_name("q"),
                             "enable.auto.commit": False, "fetch.max.bytes": 10_000_000,
                             "throttle_cb": lambda event: throttles.append(event.throttle_time), **COMMON})
        consumer.assign([CkPartition(topic_name, 0, OFFSET_BEGINNING)])
        started, produced = time.monotonic(), 0
        for _ in range(4):
            _produce(bootstrap, topic_name, [os.urandom(1000) for _ in range(36)], batch_size=2000, linger_ms=0)
            produced += 36_000
            until = time.monotonic() + 3
            while time.monotonic() < until:
                for m in consumer.consume(100, 0.2):
                    assert m.error() is None
                    got.append(len(m.value()))
        elapsed = time.monotonic() - started
        consumer.close()
        assert throttles and max(throttles) > 0, throttles
        assert 0 < sum(got) <= 3000 * elapsed + 40_000 < produced, (sum(got), elapsed, produced)
    finally:
        _alter(admin, [([("client-id", client)], {"consumer_byte_rate": None})])


def test_a_client_over_its_request_percentage_is_throttled(bootstrap, admin, topic_name):
    """request_percentage: time the broker spends on the client's requests, as a share of its one
    event-loop thread. 0.01 % is 0.1 ms a second: a few produce requests use that up, and the
    answers carry throttle_time_ms (librdkafka's throttle_cb), while another client id is free."""
    client = unique_name("greedy")
    _create(admin, topic_name, 1)
    assert _alter(admin, [([("client-id", client)], {"request_percentage": 0.01})]) == [(0, None)]
    try:
        throttles = []
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": client, "linger.ms": 0,
                             "throttle_cb": lambda event: throttles.append(event.throttle_time), **COMMON})
        for _ in range(20):
            producer.produce(topic_name, b"x" * 100)
            producer.flush(30)
        wait_until(lambda: producer.poll(0.1) is not None and throttles, 60, "a throttle callback")
        assert max(throttles) > 0, throttles
        others = []
        free = Producer({"bootstrap.servers": bootstrap, "client.id": unique_name("free"), "linger.ms": 0,
                         "throttle_cb": lambda event: others.append(event.throttle_time), **COMMON})
        for _ in range(20):
            free.produce(topic_name, b"x" * 100)
            free.flush(30)
        assert free.poll(0.5) == 0 and others == []
    finally:
        _alter(admin, [([("client-id", client)], {"request_percentage": None})])


# --- telemetry (KIP-714) ----------------------------------------------------------------------

def test_telemetry_subscriptions_ask_for_nothing(kafka_broker):
    """Kafka's pacing (KIP-714), on one connection: the client instance lives with it."""
    with KioConnection(kafka_broker.address) as connection:
        def get(instance):
            return connection.call(71, GetTelemetrySubscriptionsRequest(client_instance_id=instance),
                                   GetTelemetrySubscriptionsResponse)

        def push(instance, subscription, terminating=False, compression=0):
            return connection.call(72, PushTelemetryRequest(
                client_instance_id=instance, subscription_id=subscription, terminating=terminating,
                compression_type=compression, metrics=b""), PushTelemetryResponse).error_code

        first = get(uuid.UUID(int=0))
        assert first.error_code == 0 and first.client_instance_id.int != 0
        assert first.requested_metrics == () and first.push_interval.total_seconds() == 300
        assert first.telemetry_max_bytes == 1024 * 1024 and first.accepted_compression_types == (4, 3, 1, 2)
        instance, subscription = first.client_instance_id, first.subscription_id
        assert get(instance).error_code == 89  # THROTTLING_QUOTA_EXCEEDED: again within the push interval
        assert push(instance, subscription + 1) == 117  # UNKNOWN_SUBSCRIPTION_ID (the push after a get is taken)
        assert push(instance, subscription) == 89  # a second push within the interval
        assert push(instance, subscription, compression=9) == 89  # paced before anything else is looked at
        assert push(instance, subscription, terminating=True) == 0  # the last push is never throttled
        assert push(instance, subscription, terminating=True) == 42  # INVALID_REQUEST: nothing after the last
        assert push(uuid.UUID(int=0), subscription) == 42  # INVALID_REQUEST


@pytest.mark.gateway_only("librdkafka starts no KIP-714 handshake with the Kafka node, which has no "
                            "ClientTelemetry metrics reporter configured")
def test_confluent_kafka_telemetry_handshake_is_clean(bootstrap, topic_name):
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logger = logging.getLogger(unique_name("rdkafka"))
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())
    producer = Producer({"bootstrap.servers": bootstrap, "enable.metrics.push": True, "debug": "telemetry",
                         "logger": logger, **COMMON})
    producer.produce(topic_name, b"hello")
    assert producer.flush(30) == 0
    wait_until(lambda: producer.poll(0.1) is not None and any("Handled GetTelemetrySubscriptions" in l for l in lines),
               20, "the telemetry handshake")
    handled = [l for l in lines if "Handled GetTelemetrySubscriptions" in l]
    assert "err = Success" in handled[0] and "metrics = 0" in handled[0], handled
    assert any("Telemetry client instance id changed" in l for l in lines), lines
    assert not [l for l in lines if "elemetry" in l and ("rror" in l or "fail" in l.lower())], lines


# --- authorization ---------------------------------------------------------------------------

@pytest.mark.gateway_only("starts a broker of its own with our --authorizer acl and our users command")
def test_the_new_apis_need_kafkas_acls(tmp_path):
    """With --authorizer acl, a user without ACLs gets Kafka's answers: CLUSTER_AUTHORIZATION_FAILED
    for the cluster-level APIs, GROUP_/TOPIC_AUTHORIZATION_FAILED for OffsetDelete and
    DescribeTopicPartitions; Fetch v17 (topics by id) is checked against READ on the topic."""
    data_dir = tmp_path / "data"
    for user in ("admin", "alice"):
        subprocess.run([sys.executable, "-m", "gateway", "users", "--data-dir", str(data_dir), "add", user,
                        "--password", f"{user}-pw"], cwd=ROOT, check=True, capture_output=True, timeout=60)
    broker = start_broker(data_dir, "--authorizer", "acl", "--super-users", "User:admin")

    def client(user, cls=KafkaAdminClient, **extra):
        return cls(bootstrap_servers=broker.addresses["kafka"], security_protocol="SASL_PLAINTEXT",
                   sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=f"{user}-pw",
                   **extra)
    try:
        root, alice = client("admin"), client("alice")
        _create(root, "secret", 1)
        _produce(broker.addresses["kafka"], "secret", [b"s"], security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="admin", sasl_plain_password="admin-pw")
        with pytest.raises(Errors.ClusterAuthorizationFailedError):
            alice.elect_leaders(0, {"secret": [0]})
        assert alice.describe_log_dirs() == [{"broker": 0, "log_dirs": []}]
        assert list(alice.alter_replica_log_dirs({("secret", 0, 0): "/x"}).values()) == [
            Errors.ClusterAuthorizationFailedError]
        with pytest.raises(Errors.GroupAuthorizationFailedError):
            alice.delete_group_offsets("g", [TopicPartition("secret", 0)])
        assert [(t["name"], t["error_code"]) for t in alice.describe_topic_partitions(["secret"])["topics"]] == [
            ("secret", 29)]
        assert alice.describe_topic_partitions([])["topics"] == []  # unauthorized topics are left out
        assert _alter(alice, [([("user", "alice")], {"producer_byte_rate": 1})]) == [(31, "Cluster authorization failed.")]
        assert _describe(alice, []) == (31, "Cluster authorization failed.")
        assert root.describe_topic_partitions(["secret"])["topics"][0]["error_code"] == 0
        root.create_acls([ACL("User:alice", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                              ResourcePattern(ResourceType.TOPIC, "secret"))])
        consumer = client("alice", KafkaConsumer, auto_offset_reset="earliest", consumer_timeout_ms=3000)
        consumer.assign([TopicPartition("secret", 0)])
        with pytest.raises(Errors.TopicAuthorizationFailedError):
            list(consumer)
        consumer.close()
        root.create_acls([ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                              ResourcePattern(ResourceType.TOPIC, "secret"))])
        consumer = client("alice", KafkaConsumer, auto_offset_reset="earliest", consumer_timeout_ms=5000)
        consumer.assign([TopicPartition("secret", 0)])
        assert [m.value for m in consumer] == [b"s"]
        consumer.close()
        root.close()
        alice.close()
    finally:
        broker.stop(signal.SIGTERM)


# --- the Java Admin client ---------------------------------------------------------------------

def _request_counts(kafka_broker) -> dict[str, float]:
    """Requests served per API so far, from the broker's /metrics (which API a client used)."""
    text = urllib.request.urlopen(f"http://{kafka_broker.process.addresses['http']}/metrics", timeout=10).read()
    return {m[1]: float(m[2]) for m in re.finditer(r'gateway_kafka_request_seconds_count\{api="(\w+)"\} ([0-9.e+]+)',
                                                   text.decode())}


@pytest.fixture(scope="module")
def java_admin(kafka_broker):
    # which APIs the client used is read from our /metrics; Apache Kafka has no such endpoint, so
    # on the kafka target ``served`` is None and only the client's own observations are checked
    metrics = kafka_broker.process is not None
    argv, main = tools.compile_java("AdminApis.java")
    prefix = unique_name("java-admin")
    before = _request_counts(kafka_broker) if metrics else {}
    proc = subprocess.run(argv + [main, kafka_broker.bootstrap, prefix], capture_output=True, text=True, timeout=240)
    after = _request_counts(kafka_broker) if metrics else {}
    steps = {}
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        steps[event["step"]] = event
    assert "done" in steps, f"exit {proc.returncode}: {steps.get('error')}\n{proc.stderr[-4000:]}"
    served = {api: after.get(api, 0) - before.get(api, 0) for api in after} if metrics else None
    return dict(prefix=prefix, steps=steps, served=served, data_dir=kafka_broker.data_dir)


def test_java_admin_describe_topics_pages_through_describe_topic_partitions(java_admin):
    prefix, step = java_admin["prefix"], java_admin["steps"]["describe"]
    assert step["topics"][f"{prefix}-a"]["partitions"] == [[0, 0, 1], [1, 0, 1], [2, 0, 1]]
    assert step["topics"][f"{prefix}-b"]["partitions"] == [[0, 0, 1], [1, 0, 1]]
    if java_admin["served"] is not None:
        assert java_admin["served"]["DescribeTopicPartitions"] == 3  # 5 partitions, 2 per page


def test_java_admin_log_dirs_elections_quotas_offsets(java_admin):
    prefix, steps = java_admin["prefix"], java_admin["steps"]
    ((path, logdir),) = steps["logdirs"]["dirs"].items()
    assert logdir["error"] is None
    if java_admin["data_dir"] is not None:  # an external broker's is not known here
        assert path == os.path.realpath(java_admin["data_dir"])
    assert logdir["total"] > logdir["usable"] > 0
    assert logdir["replicas"][f"{prefix}-a-2"] == [0, 0, False]
    assert steps["elect"]["results"] == {f"{prefix}-a-0": "ElectionNotNeededException",
                                         f"{prefix}-a-none-0": "UnknownTopicOrPartitionException"}
    found = {(e["user"], e["client"]): e["values"] for e in steps["quotas"]["found"]}
    assert found == {(f"{prefix}-user", "-"): {"producer_byte_rate": 1024.0},
                     (f"{prefix}-user", "null"): {"request_percentage": 50.0}}
    assert steps["quotas"]["invalid"] == "InvalidRequestException" and steps["quotas"]["left"] == 0
    assert steps["offset_delete"] == {"step": "offset_delete", "error": None, "left": [f"{prefix}-b-0"],
                                      "unknown_group": "GroupIdNotFoundException"}
    if java_admin["served"] is not None:
        assert java_admin["served"]["OffsetDelete"] == 2


def test_java_producer_reports_the_quota_throttle(java_admin):
    step = java_admin["steps"]["throttle"]
    # Kafka (KIP-219) answers at once with the throttle time and then mutes the connection, so
    # the elapsed time need not cover the throttle; that the client saw one is the rule
    assert step["max_ms"] > 500, step
    if java_admin["served"] is not None:
        assert java_admin["served"].get("GetTelemetrySubscriptions", 0) >= 1  # the Java client asks too
