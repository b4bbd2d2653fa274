"""Kafka ACLs with real clients: CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's
AdminClient, and what each kind of rule allows and refuses (topic, group, cluster,
transactional id; literal and prefixed; allow and deny; super users; ANONYMOUS; the
allow-everyone-if-no-acl-found switch). Every rule is checked both ways."""
from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
    ResourceType,
)

from tests.brokerproc import start_broker

from .conftest import users_cli

TIMEOUT = 15
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("acl") / "data"
    for name, password in PASSWORDS.items():
        assert users_cli(data_dir, "add", name, "--password", password).returncode == 0
    process = start_broker(data_dir, "--authorizer", "acl", "--super-users", "User:admin")
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.stop(signal.SIGTERM)


def config(broker, user: str | None, **extra) -> dict:
    c = {"bootstrap.servers": broker.addresses["kafka"], "socket.timeout.ms": 5000, **extra}
    if user is not None:
        c.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                  "sasl.username": user, "sasl.password": PASSWORDS[user]})
    return c


def admin(broker) -> AdminClient:
    return AdminClient(config(broker, "admin"))


def allow(broker, principal: str, resource_type, name: str, operation, pattern=ResourcePatternType.LITERAL,
          permission=AclPermissionType.ALLOW) -> AclBinding:
    binding = AclBinding(resource_type, name, pattern, principal, "*", operation, permission)
    client = admin(broker)
    for future in client.create_acls([binding]).values():
        future.result(TIMEOUT)
    return binding


def produce(broker, user: str | None, topic: str, **extra) -> KafkaError | None:
    """The delivery error of one record (None: it was written)."""
    errors = []
    producer = Producer(config(broker, user, **extra))
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT)
    assert errors, "no delivery report"
    return errors[0]


def consume(broker, user: str, topic: str, group: str) -> KafkaError | bytes:
    """The first record's value, or the first error, of a group consumer."""
    consumer = Consumer(config(broker, user, **{"group.id": group, "auto.offset.reset": "earliest",
                                                 "enable.auto.commit": False}))
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            return msg.error() if msg.error() else msg.value()
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _make_topic(broker, name: str) -> None:
    assert produce(broker, "admin", name) is None  # super user: auto-creates and writes one record


def test_without_acls_everyone_but_super_users_is_denied(acl_broker):
    topic = _name("t-")
    _make_topic(acl_broker, topic)
    assert produce(acl_broker, "alice", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(acl_broker, None, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # User:ANONYMOUS
    assert "principal=User:ANONYMOUS" in acl_broker.output()


def test_literal_topic_write(acl_broker):
    topic, other = _name("lit-"), _name("lit-")
    allow(acl_broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    _make_topic(acl_broker, topic)
    _make_topic(acl_broker, other)
    assert produce(acl_broker, "alice", topic) is None
    assert produce(acl_broker, "alice", other).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(acl_broker, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_auto_creation_needs_create(acl_broker):
    topic = _name("auto-")
    allow(acl_broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    error = produce(acl_broker, "alice", topic, **{"message.timeout.ms": 3000})
    assert error is not None and error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT,
                                                  KafkaError._UNKNOWN_TOPIC), error
    assert topic not in admin(acl_broker).list_topics(timeout=TIMEOUT).topics
    allow(acl_broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.CREATE)
    assert produce(acl_broker, "alice", topic) is None


def test_prefixed_topic_read_and_group(acl_broker):
    prefix = _name("pre-") + "-"
    topic = prefix + "x"
    _make_topic(acl_broker, topic)
    allow(acl_broker, "User:alice", ResourceType.TOPIC, prefix, AclOperation.READ, ResourcePatternType.PREFIXED)
    allow(acl_broker, "User:alice", ResourceType.GROUP, prefix, AclOperation.READ, ResourcePatternType.PREFIXED)
    assert consume(acl_broker, "alice", topic, prefix + "g") == b"v"
    error = consume(acl_broker, "alice", topic, _name("other-group-"))
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    outside = _name("out-")
    _make_topic(acl_broker, outside)
    error = consume(acl_broker, "alice", outside, prefix + "g2")
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error


def test_deny_wins_over_allow(acl_broker):
    prefix = _name("d-") + "-"
    topic = prefix + "1"
    _make_topic(acl_broker, topic)
    _make_topic(acl_broker, prefix + "2")
    allow(acl_broker, "User:*", ResourceType.TOPIC, prefix, AclOperation.WRITE, ResourcePatternType.PREFIXED)
    allow(acl_broker, "User:bob", ResourceType.TOPIC, topic, AclOperation.WRITE,
          permission=AclPermissionType.DENY)
    assert produce(acl_broker, "alice", topic) is None
    assert produce(acl_broker, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(acl_broker, "bob", prefix + "2") is None


def test_metadata_lists_only_described_topics(acl_broker):
    seen, hidden = _name("seen-"), _name("hidden-")
    _make_topic(acl_broker, seen)
    _make_topic(acl_broker, hidden)
    allow(acl_broker, "User:bob", ResourceType.TOPIC, seen, AclOperation.DESCRIBE)
    topics = Producer(config(acl_broker, "bob")).list_topics(timeout=TIMEOUT).topics
    assert seen in topics and hidden not in topics
    assert {seen, hidden} <= set(admin(acl_broker).list_topics(timeout=TIMEOUT).topics)


def test_create_topics_needs_create(acl_broker):
    name = _name("new-")
    client = AdminClient(config(acl_broker, "alice"))
    with pytest.raises(KafkaException) as info:
        client.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(acl_broker, "User:alice", ResourceType.TOPIC, name, AclOperation.CREATE)
    client.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)


def test_transactional_id_needs_write(acl_broker):
    topic = _name("tx-")
    allow(acl_broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    producer = Producer(config(acl_broker, "alice", **{"transactional.id": _name("txn-")}))
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, info.value


def test_idempotent_producer_needs_a_topic_write(acl_broker):
    topic = _name("idem-")
    _make_topic(acl_broker, topic)
    error = produce(acl_broker, "bob", topic, **{"enable.idempotence": True})
    assert error is not None and error.code() in (KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                                  KafkaError.TOPIC_AUTHORIZATION_FAILED), error
    allow(acl_broker, "User:bob", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce(acl_broker, "bob", topic, **{"enable.idempotence": True}) is None


def test_only_cluster_alter_may_create_and_delete_acls(acl_broker):
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    client = AdminClient(config(acl_broker, "alice"))
    with pytest.raises(KafkaException) as info:
        client.create_acls([binding])[binding].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    allow(acl_broker, "User:alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    client.create_acls([binding])[binding].result(TIMEOUT)


def test_describe_and_delete_acls(acl_broker):
    topic = _name("del-")
    _make_topic(acl_broker, topic)
    binding = allow(acl_broker, "User:bob", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce(acl_broker, "bob", topic) is None
    client = admin(acl_broker)
    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    assert client.describe_acls(f).result(TIMEOUT) == [binding]
    match = AclBindingFilter(ResourceType.ANY, topic, ResourcePatternType.MATCH, "User:bob", None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert binding in client.describe_acls(match).result(TIMEOUT)
    assert client.delete_acls([f])[f].result(TIMEOUT) == [binding]
    assert client.describe_acls(f).result(TIMEOUT) == []
    assert produce(acl_broker, "bob", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_invalid_acl_is_refused(acl_broker):
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)  # the principal lacks "User:"
    client = admin(acl_broker)
    with pytest.raises(KafkaException) as info:
        client.create_acls([binding])[binding].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_acls_are_saved_and_kafka_python_sees_the_denial(acl_broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError
    topic = _name("kp-")
    _make_topic(acl_broker, topic)
    allow(acl_broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert '"resource_name": "%s"' % topic in (acl_broker.data_dir / "acls.json").read_text()
    producer = KafkaProducer(bootstrap_servers=acl_broker.addresses["kafka"], security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-pw",
                             max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"v").get(TIMEOUT)
    finally:
        producer.close(5)


def test_allow_everyone_if_no_acl_found(tmp_path):
    data_dir = tmp_path / "data"
    assert users_cli(data_dir, "add", "alice", "--password", "alice-pw").returncode == 0
    process = start_broker(data_dir, "--authorizer", "acl", "--allow-everyone-if-no-acl-found", "true",
                           "--super-users", "admin")
    try:
        broker = process
        open_topic, guarded = _name("open-"), _name("guarded-")
        assert produce(broker, "alice", open_topic) is None  # no ACL names it: allowed
        assert produce(broker, None, open_topic) is None
        binding = AclBinding(ResourceType.TOPIC, guarded, ResourcePatternType.LITERAL, "User:someone", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
        client = AdminClient(config(broker, "alice"))
        client.create_acls([binding])[binding].result(TIMEOUT)  # no ACL names the cluster: allowed too
        assert produce(broker, "alice", guarded).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        process.stop(signal.SIGTERM)


def test_authorized_operations_follow_the_acls(acl_broker):
    """What a principal may do, as the describing APIs report it when asked: READ implies
    DESCRIBE, as in Kafka's authorizer; nothing else is granted."""
    from confluent_kafka import TopicCollection
    topic = _name("ops-")
    _make_topic(acl_broker, topic)
    allow(acl_broker, "User:alice", ResourceType.TOPIC, topic, AclOperation.READ)
    client = AdminClient(config(acl_broker, "alice"))
    [described] = client.describe_topics(TopicCollection([topic]), include_authorized_operations=True).values()
    assert {op.name for op in described.result(TIMEOUT).authorized_operations} == {"READ", "DESCRIBE"}
    root = admin(acl_broker)  # kept: a client collected before its futures resolve fails them
    [full] = root.describe_topics(TopicCollection([topic]), include_authorized_operations=True).values()
    assert len(full.result(TIMEOUT).authorized_operations) == 8  # the super user: every topic operation


def test_produce_by_topic_id_is_authorized_by_name(acl_broker):
    """Produce v13 names the topic by id: the ACL check finds its name (anonymous may not write)."""
    import datetime

    from confluent_kafka import TopicCollection
    from kio.schema.errors import ErrorCode
    from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v13.response import ProduceResponse
    from kio.static.primitive import i16, i32

    from compat_tests.kafka.kio_call import kio_call
    topic = _name("byid-")
    _make_topic(acl_broker, topic)
    root = admin(acl_broker)
    [described] = root.describe_topics(TopicCollection([topic])).values()
    cid = described.result(TIMEOUT).topic_id  # librdkafka's Uuid: two signed 64-bit halves
    high, low = cid.get_most_significant_bits() % 2**64, cid.get_least_significant_bits() % 2**64
    topic_id = uuid.UUID(int=(high << 64) | low)
    host, port = acl_broker.addresses["kafka"].rsplit(":", 1)
    answer = kio_call((host, int(port)), 0, ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(topic_id=topic_id, partition_data=(
            PartitionProduceData(index=i32(0), records=b""),)),)), ProduceResponse, api_version=13)
    [result] = answer.responses
    assert result.topic_id == topic_id
    assert result.partition_responses[0].error_code == ErrorCode.topic_authorization_failed
