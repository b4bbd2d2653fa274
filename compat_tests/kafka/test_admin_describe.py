"""What Kafka 4.1's admin clients read back from the describing APIs, driven by kafka-python's
KafkaAdminClient and confluent-kafka's AdminClient over real sockets:

* DescribeConfigs: every entry's ``config_type`` and synonyms, for topics, the broker and
  groups, with the types a Kafka 4.1 broker gives those names; the cluster-level
  ``min.insync.replicas`` of KIP-966 (eligible leader replicas) behind every topic's value;
* ListConfigResources (Kafka 4.1), DescribeQuorum (KRaft's metadata partition);
* ListOffsets v8-v10 and Produce v13 (topics by id), which make kafka-python infer Kafka 4.1.

The expectations are what an Apache Kafka 4.1.1 single node (KRaft, broker and controller in
one process) answered to the same calls. Node ids are read from the cluster, not assumed, so
the module also runs against such a node (KAFKA_COMPAT_BOOTSTRAP).
"""
from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource as CkResource, ConfigSource, ResourceType
from kafka import KafkaAdminClient, TopicPartition
from kafka import errors as Errors
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.structs import OffsetAndMetadata
from kafka.protocol.consumer.offsets import OffsetSpec
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.errors import ErrorCode
from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v13.response import ProduceResponse
from kio.static.primitive import i16, i32

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.kio_call import kio_call


@pytest.fixture
def admin(bootstrap):
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def _create(admin, name, partitions=1, configs=None):
    admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    wait_until(lambda: name in admin.list_topics(), 15, f"topic {name}")


def _node_id(admin) -> int:
    return admin.describe_cluster()["brokers"][0]["broker_id"]


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def _described(admin, resource_type, name, synonyms=False) -> dict:
    found = admin.describe_configs([ConfigResource(resource_type, name)], include_synonyms=synonyms,
                                   config_filter="all")
    return found[resource_type.name.lower()][name]


# --- ApiVersions ------------------------------------------------------------------------------

@pytest.mark.gateway_only("checked against Kafka 4.1.1, whose APIs this broker serves; the test node runs 4.4, which differs: kafka-python infers 4.3 from it")
def test_kafka_python_infers_kafka_4_1(admin):
    # kafka-python's table: ListOffsets v10 is Kafka 4.0, Produce v13 is 4.1 (ListOffsets v11 would be 4.2)
    assert admin._client.check_version() == (4, 1)
    versions = admin._manager.broker_version_data.api_versions
    assert versions[0][1] == 13 and versions[2][1] == 10 and versions[1][1] == 18 and versions[18][1] == 4
    assert versions[3][1] == 13 and versions[11][1] == 9 and versions[13][1] == 5  # as Kafka 4.1 lists them
    assert versions[55] == (0, 2) and versions[74] == (0, 1)


# --- DescribeConfigs: config_type ---------------------------------------------------------------

TOPIC_TYPES = {"retention.bytes": "LONG", "retention.ms": "LONG", "cleanup.policy": "LIST",
               "unclean.leader.election.enable": "BOOLEAN", "preallocate": "BOOLEAN",
               "min.cleanable.dirty.ratio": "DOUBLE", "compression.type": "STRING", "segment.bytes": "INT",
               "max.message.bytes": "INT", "min.insync.replicas": "INT", "flush.messages": "LONG",
               "leader.replication.throttled.replicas": "LIST", "message.timestamp.type": "STRING"}
# advertised.listeners and listeners are STRINGs in Kafka 4.1 (SocketServerConfigs), not LISTs
BROKER_TYPES = {"advertised.listeners": "STRING", "listeners": "STRING", "auto.create.topics.enable": "BOOLEAN",
                "offsets.topic.replication.factor": "SHORT", "log.retention.ms": "LONG", "num.partitions": "INT",
                "broker.id": "INT", "offsets.retention.check.interval.ms": "LONG", "message.max.bytes": "INT",
                "group.consumer.session.timeout.ms": "INT", "min.insync.replicas": "INT"}
GROUP_TYPES = {"consumer.session.timeout.ms": "INT", "consumer.heartbeat.interval.ms": "INT",
               "share.auto.offset.reset": "STRING", "share.isolation.level": "STRING",
               "share.record.lock.duration.ms": "INT"}


@pytest.mark.gateway_only("checked against Kafka 4.1.1, whose APIs this broker serves; the test node runs 4.4, which differs: listeners and advertised.listeners are of type LIST")
def test_every_described_config_has_kafkas_type(admin, topic_name):
    _create(admin, topic_name)
    group = unique_name("cfg-types")
    topic = _described(admin, ConfigResourceType.TOPIC, topic_name)
    broker = _described(admin, ConfigResourceType.BROKER, str(_node_id(admin)))
    groups = _described(admin, ConfigResourceType.GROUP, group)
    for found, expected in ((topic, TOPIC_TYPES), (broker, BROKER_TYPES), (groups, GROUP_TYPES)):
        assert {name: found[name]["config_type"] for name in expected} == expected
        assert not [name for name, c in found.items() if c["config_type"] == "UNKNOWN"]


# --- KIP-966: the cluster-level min.insync.replicas ---------------------------------------------

def test_topic_min_insync_replicas_comes_from_the_cluster_default(bootstrap, admin, topic_name):
    _create(admin, topic_name)
    entry = _described(admin, ConfigResourceType.TOPIC, topic_name, synonyms=True)["min.insync.replicas"]
    assert entry["config_source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG" and entry["value"] == "1"
    assert [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]] == [
        ("min.insync.replicas", "1", "DYNAMIC_DEFAULT_BROKER_CONFIG"), ("min.insync.replicas", "1", "DEFAULT_CONFIG")]

    ck = AdminClient({"bootstrap.servers": bootstrap})
    res = CkResource(ResourceType.TOPIC, topic_name)
    isr = ck.describe_configs([res])[res].result(30)["min.insync.replicas"]
    assert isr.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert not isr.is_default and not isr.is_read_only
    # without synonyms asked for, none come back (Kafka sends them only on request)
    plain = _described(admin, ConfigResourceType.TOPIC, topic_name)["min.insync.replicas"]
    assert plain["synonyms"] == [] and plain["config_source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"


def test_topic_override_heads_the_min_insync_replicas_synonyms(admin, topic_name):
    _create(admin, topic_name, configs={"min.insync.replicas": "2", "retention.bytes": "5000"})
    found = _described(admin, ConfigResourceType.TOPIC, topic_name, synonyms=True)
    isr = found["min.insync.replicas"]
    assert isr["config_source"] == "DYNAMIC_TOPIC_CONFIG" and isr["value"] == "2"
    assert [(s["name"], s["value"], s["source"]) for s in isr["synonyms"]] == [
        ("min.insync.replicas", "2", "DYNAMIC_TOPIC_CONFIG"), ("min.insync.replicas", "1", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("min.insync.replicas", "1", "DEFAULT_CONFIG")]
    # other topic configs name their broker-level setting, as Kafka does
    assert [(s["name"], s["source"]) for s in found["retention.bytes"]["synonyms"]] == [
        ("retention.bytes", "DYNAMIC_TOPIC_CONFIG"), ("log.retention.bytes", "DEFAULT_CONFIG")]
    assert [s["name"] for s in found["cleanup.policy"]["synonyms"]] == ["log.cleanup.policy"]
    assert found["retention.ms"]["synonyms"] == []  # log.retention.ms has no default value in Kafka


def test_broker_lists_the_cluster_min_insync_replicas(admin):
    broker = _described(admin, ConfigResourceType.BROKER, str(_node_id(admin)), synonyms=True)
    isr = broker["min.insync.replicas"]
    assert isr["config_source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG" and isr["value"] == "1"
    assert [s["source"] for s in isr["synonyms"]] == ["DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG"]


def test_broker_resource_names(bootstrap, admin):
    """kafka-python refuses a broker name that is not a node id, so this is DescribeConfigs v4 as
    Kafka defines it, over a socket."""
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
    from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
    from kio.static.primitive import i8
    node = _node_id(admin)
    asked = DescribeConfigsRequest(resources=tuple(
        DescribeConfigsResource(resource_type=i8(4), resource_name=name, configuration_keys=None)
        for name in ("", str(node + 7), "x")), include_synonyms=True, include_documentation=False)
    cluster, other, garbage = kio_call(_address(bootstrap), 32, asked, DescribeConfigsResponse, api_version=4).results
    # the empty name: the cluster-level dynamic configs, KIP-966's min.insync.replicas the one here
    assert [(c.name, c.config_source, c.config_type, [(s.name, s.source) for s in c.synonyms])
            for c in cluster.configs] == [("min.insync.replicas", 3, 3, [("min.insync.replicas", 3)])]
    # another broker's id: INVALID_REQUEST from this one, as Kafka (clients ask the broker itself)
    assert other.error_code == garbage.error_code == ErrorCode.invalid_request
    assert other.error_message == f"Unexpected broker id, expected {node} or empty string, but received {node + 7}"
    assert garbage.error_message == "Broker id must be an integer, but it is: x"


def test_client_metrics_resource_has_kafkas_defaults(admin):
    found = _described(admin, ConfigResourceType.CLIENT_METRICS, unique_name("cm"))
    assert {n: (c["value"], c["config_type"], c["config_source"]) for n, c in found.items()} == {
        "interval.ms": ("300000", "INT", "DEFAULT_CONFIG"), "match": ("", "LIST", "DEFAULT_CONFIG"),
        "metrics": ("", "LIST", "DEFAULT_CONFIG")}


@pytest.mark.gateway_only("checked against Kafka 4.1.1, whose APIs this broker serves; the test node runs 4.4, which differs: a group config lists its default as one more synonym")
def test_group_config_synonyms_are_the_value_in_effect(admin):
    group = unique_name("cfg-syn")
    admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group,
                                        configs={"consumer.session.timeout.ms": "50000"})])
    found = _described(admin, ConfigResourceType.GROUP, group, synonyms=True)
    assert [(s["value"], s["source"]) for s in found["consumer.session.timeout.ms"]["synonyms"]] == [
        ("50000", "DYNAMIC_GROUP_CONFIG")]
    assert [(s["value"], s["source"]) for s in found["share.isolation.level"]["synonyms"]] == [
        ("read_uncommitted", "DEFAULT_CONFIG")]


# --- ListConfigResources -----------------------------------------------------------------------

def test_list_config_resources(admin, topic_name):
    _create(admin, topic_name)
    group, bare = unique_name("lcr-group"), unique_name("lcr-bare")
    admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group,
                                        configs={"share.auto.offset.reset": "earliest"})])
    node = str(_node_id(admin))
    # Apache Kafka's brokers see the group's new config a moment after the alter returned
    wait_until(lambda: group in admin.list_config_resources(["GROUP"]).get("group", []), 15, f"group {group} listed")
    listed = admin.list_config_resources(["TOPIC", "BROKER", "GROUP", "CLIENT_METRICS"])
    assert topic_name in listed["topic"] and listed["broker"] == [node]
    assert group in listed["group"] and bare not in listed["group"]  # only groups with a config override
    assert "client_metrics" not in listed  # no client metrics subscriptions
    assert list(admin.list_config_resources(["GROUP"])) == ["group"]
    assert topic_name in admin.list_config_resources()["topic"]  # no types: every type served
    with pytest.raises(Errors.UnsupportedVersionError):  # Kafka's answer to a type it does not list
        admin.list_config_resources(["UNKNOWN"])


# --- DescribeQuorum ----------------------------------------------------------------------------

def test_describe_metadata_quorum_names_this_node(bootstrap, admin):
    node = _node_id(admin)
    quorum = admin.describe_metadata_quorum()
    [topic] = quorum["topics"]
    [part] = topic["partitions"]
    assert topic["topic_name"] == "__cluster_metadata" and part["partition_index"] == 0 and part["error"] is None
    assert part["leader_id"] == node and part["leader_epoch"] >= 0
    assert [v["replica_id"] for v in part["current_voters"]] == [node] and part["observers"] == []
    assert part["current_voters"][0]["last_caught_up_timestamp"] > 0
    assert [n["node_id"] for n in quorum["nodes"]] == [node]
    assert quorum["nodes"][0]["listeners"]  # where the voter is reached


def test_describe_quorum_of_another_partition_is_unknown(admin):
    res = admin._manager.run(admin._async_describe_quorum, "__cluster_metadata", 1)
    [part] = res["topics"][0]["partitions"]
    assert "UnknownTopicOrPartition" in part["error"] and part["current_voters"] == []
    assert res["nodes"] == []


# --- ListOffsets v8-10, Produce v13 ------------------------------------------------------------

def test_tiered_storage_offset_specs(bootstrap, admin, topic_name):
    _create(admin, topic_name)
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(4):
        producer.send(topic_name, b"v%d" % i, partition=0)
    producer.flush(30)
    producer.close()
    tp = TopicPartition(topic_name, 0)
    found = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST_LOCAL})[tp]
    assert found.offset == 0  # all of the log is local here
    found = admin.list_partition_offsets({tp: OffsetSpec.LATEST_TIERED})[tp]
    assert found.offset == -1  # nothing is tiered (Kafka: -1 without remote storage)
    assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 4


def _batch(value: bytes) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=value, headers=[])
    builder.close()
    return bytes(builder.buffer())


def test_produce_v13_by_topic_id(bootstrap, admin, topic_name):
    _create(admin, topic_name)
    address = _address(bootstrap)
    meta = kio_call(address, 3, MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic_name),),
                                                allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False),
                    MetadataResponse, api_version=12)
    topic_id = meta.topics[0].topic_id
    stranger = uuid.uuid4()
    request = ProduceRequest(transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(milliseconds=5000), topic_data=(
        TopicProduceData(topic_id=topic_id, partition_data=(PartitionProduceData(index=i32(0), records=_batch(b"a")),)),
        TopicProduceData(topic_id=stranger, partition_data=(PartitionProduceData(index=i32(0), records=_batch(b"b")),))))
    answer = kio_call(address, 0, request, ProduceResponse, api_version=13)
    by_id = {t.topic_id: t.partition_responses[0] for t in answer.responses}
    assert by_id[topic_id].error_code == ErrorCode.none and by_id[topic_id].base_offset == 0
    assert by_id[stranger].error_code == ErrorCode.unknown_topic_id and by_id[stranger].base_offset == -1
    tp = TopicPartition(topic_name, 0)
    assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 1


# --- authorized operations, DescribeCluster v2 ---------------------------------------------------

# With no authorizer every supported operation is allowed: Kafka 4.1 answers these sets.
CLUSTER_OPS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
TOPIC_OPS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPS = {"READ", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def _names(operations) -> set[str]:
    return {op.name for op in operations}


def test_authorized_operations_when_asked(bootstrap, admin, topic_name):
    _create(admin, topic_name)
    cluster = admin.describe_cluster()  # kafka-python asks for them, through DescribeCluster v2
    assert set(cluster["authorized_operations"]) == CLUSTER_OPS
    assert [b["is_fenced"] for b in cluster["brokers"]] == [False]

    ck = AdminClient({"bootstrap.servers": bootstrap})
    assert _names(ck.describe_cluster(include_authorized_operations=True).result(30).authorized_operations) == \
        CLUSTER_OPS
    assert ck.describe_cluster().result(30).authorized_operations is None  # not asked: not given
    from confluent_kafka import TopicCollection
    [described] = ck.describe_topics(TopicCollection([topic_name]),
                                      include_authorized_operations=True).values()
    assert _names(described.result(30).authorized_operations) == TOPIC_OPS
    group = unique_name("ops-group")
    admin.alter_group_offsets(group, {TopicPartition(topic_name, 0): OffsetAndMetadata(0, "", -1)})
    [found] = ck.describe_consumer_groups([group], include_authorized_operations=True).values()
    assert _names(found.result(30).authorized_operations) == GROUP_OPS
    [plain] = ck.describe_consumer_groups([group]).values()
    assert plain.result(30).authorized_operations is None  # not asked for: -2^31 on the wire
    assert set(admin.describe_groups([group])[group]["authorized_operations"]) == GROUP_OPS  # kafka-python asks


# --- ListTransactions v2 -----------------------------------------------------------------------

def test_list_transactions_by_id_pattern(bootstrap, admin, topic_name):
    from confluent_kafka import Producer
    _create(admin, topic_name)
    txn_id = unique_name("lt-pattern")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"open")
    producer.flush(30)
    try:
        def ids(pattern):
            listed = admin.list_transactions(transactional_id_pattern=pattern)
            return {t.transactional_id for listing in listed.values() for t in listing}
        assert txn_id in ids(txn_id.split("-")[0] + "-.*")
        assert txn_id not in ids(txn_id[:4])  # the whole id must match, as Java's Matcher.matches()
        assert txn_id in ids("")  # empty: no filter
        with pytest.raises(Errors.KafkaError) as bad:  # kafka-python has no class for this code
            ids("[")
        assert bad.value.errno == 128  # INVALID_REGULAR_EXPRESSION, Kafka's answer
    finally:
        producer.abort_transaction(30)


# --- UpdateFeatures ----------------------------------------------------------------------------

def test_update_features_refuses_what_the_broker_does_not_finalize(admin):
    assert admin.update_features({}) == {}  # nothing asked: no error, as Kafka
    with pytest.raises(Errors.InvalidUpdateVersionError):
        admin.update_features({"gateway.test.version": 1}, validate_only=True)


# --- DescribeGroups v6 -------------------------------------------------------------------------

def test_describe_groups_v6_names_groups_it_does_not_describe(bootstrap, admin, topic_name):
    from confluent_kafka import Consumer
    _create(admin, topic_name)
    modern = unique_name("dg6-848")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": modern, "group.protocol": "consumer"})
    consumer.subscribe([topic_name])
    try:
        wait_until(lambda: consumer.poll(0.2) is None and consumer.assignment(), 30, "a KIP-848 assignment")
        missing = unique_name("dg6-none")
        found = admin.describe_groups([missing, modern])  # kafka-python sends v6
        assert found[missing]["group_state"] == "Dead" and "not found" in found[missing]["error"]
        assert found[modern]["group_state"] == "Dead" and "is not a classic group" in found[modern]["error"]
        assert "GroupIdNotFound" in found[modern]["error"]
    finally:
        consumer.close()
