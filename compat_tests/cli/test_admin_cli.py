"""Every ``gateway`` admin command against a running broker, checked through real clients.

``topics``/``groups``/``acls`` go over the Kafka protocol, ``queues``/``exchanges`` over the
management HTTP API; each result is checked with confluent-kafka or pika, not with the CLI.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pika
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from compat_tests.conftest import unique_name
from tests.brokerproc import ROOT, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # ANONYMOUS (no SASL) is a super user: the ACL commands can run, and nothing else is restricted.
    proc = start_broker(tmp_path_factory.mktemp("cli") / "data", "--authorizer", "acl",
                        "--super-users", "User:ANONYMOUS")
    try:
        yield proc
    finally:
        proc.stop()


def gateway(broker, *argv: str, ok: bool = True) -> subprocess.CompletedProcess:
    kafka = "%s:%d" % broker.address("kafka")
    target = ["--http", broker.addresses["http"]] if argv[0] in ("queues", "exchanges") else ["--bootstrap", kafka]
    result = subprocess.run([sys.executable, "-m", "gateway", *argv, *target], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def as_json(broker, *argv: str):
    return json.loads(gateway(broker, *argv, "--json").stdout)


def bootstrap(broker) -> str:
    return "%s:%d" % broker.address("kafka")


def test_topics_lifecycle(broker):
    name = unique_name("cli-topic")
    out = gateway(broker, "topics", "create", name, "--partitions", "3", "--config", "retention.ms=7200000").stdout
    assert name in out.splitlines()[1]
    admin = AdminClient({"bootstrap.servers": bootstrap(broker)})
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3
    listed = {t["name"]: t for t in as_json(broker, "topics", "list")}
    assert listed[name]["partitions"] == 3 and listed["__consumer_offsets"]["internal"] is True
    p = Producer({"bootstrap.servers": bootstrap(broker)})
    for i in range(9):
        p.produce(name, value=b"x", partition=i % 3)
    p.flush(10)
    described = as_json(broker, "topics", "describe", name)
    assert [(r["partition"], r["end_offset"], r["isr"]) for r in described["partitions"]] == \
        [(0, 3, [0]), (1, 3, [0]), (2, 3, [0])]
    assert described["configs"] == {"retention.ms": "7200000"}
    table = gateway(broker, "topics", "describe", name).stdout
    assert table.splitlines()[0].split()[:3] == ["PARTITION", "LEADER", "REPLICAS"]
    gateway(broker, "topics", "alter-config", name, "--set", "cleanup.policy=compact", "--delete", "retention.ms")
    configs = admin.describe_configs([ConfigResource("topic", name)])
    entries = list(configs.values())[0].result(10)
    assert entries["cleanup.policy"].value == "compact" and entries["retention.ms"].is_default
    gateway(broker, "topics", "delete", name)
    assert name not in admin.list_topics(timeout=10).topics
    failed = gateway(broker, "topics", "delete", name, ok=False)
    assert failed.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in failed.stderr and name in failed.stderr
    assert "Traceback" not in failed.stderr


def test_groups_describe_and_reset_offsets(broker):
    topic, group = unique_name("cli-group-topic"), unique_name("cli-group")
    gateway(broker, "topics", "create", topic, "--partitions", "2")
    p = Producer({"bootstrap.servers": bootstrap(broker)})
    for i in range(20):
        p.produce(topic, value=b"v", partition=i % 2)
    p.flush(10)
    c = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)], asynchronous=False)
    c.close()
    assert group in {g["group"] for g in as_json(broker, "groups", "list")}
    described = as_json(broker, "groups", "describe", group)
    assert {(o["partition"], o["committed"], o["lag"]) for o in described["offsets"]} == {(0, 4, 6), (1, 10, 0)}
    dry = as_json(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert [(r["partition"], r["current"], r["new"]) for r in dry] == [(0, 4, 0), (1, 10, 0)]
    assert {(o["partition"], o["committed"]) for o in as_json(broker, "groups", "describe", group)["offsets"]} == \
        {(0, 4), (1, 10)}  # a dry run changes nothing
    done = gateway(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-offset", "7", "--execute")
    assert "2/2" in done.stderr  # progress
    c = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": group})
    committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    c.close()
    assert [tp.offset for tp in committed] == [7, 7]
    # An active group is refused.
    active = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": group, "session.timeout.ms": 6000})
    active.subscribe([topic])
    for _ in range(30):
        active.poll(0.2)
        if active.assignment():
            break
    refused = gateway(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute",
                      ok=False)
    active.close()
    assert refused.returncode == 1 and "stop its consumers" in refused.stderr


def test_acls(broker):
    topic = unique_name("cli-acl")
    gateway(broker, "acls", "create", "--principal", "User:alice", "--operation", "read", "--operation", "describe",
            "--topic", topic)
    gateway(broker, "acls", "create", "--principal", "User:bob", "--deny", "--operation", "write", "--topic",
            "cli-", "--prefixed")
    rows = as_json(broker, "acls", "list")
    assert {"resource_type": "topic", "name": topic, "pattern": "literal", "principal": "User:alice", "host": "*",
            "operation": "read", "permission": "allow"} in rows
    assert any(r["principal"] == "User:bob" and r["permission"] == "deny" and r["pattern"] == "prefixed"
               for r in rows)
    deleted = as_json(broker, "acls", "delete", "--principal", "User:alice", "--topic", topic)
    assert {r["operation"] for r in deleted} == {"read", "describe"}
    assert not any(r["principal"] == "User:alice" for r in as_json(broker, "acls", "list"))
    bad = gateway(broker, "acls", "create", "--operation", "fly", "--topic", topic, ok=False)
    assert bad.returncode == 1 and "unknown value 'fly'" in bad.stderr


def test_queues_and_exchanges(broker):
    name = unique_name("cli-q")
    declared = as_json(broker, "queues", "declare", name, "--argument", "x-max-length=5")
    assert declared["arguments"] == {"x-max-length": 5} and declared["durable"] is True
    gateway(broker, "exchanges", "declare", name + "-x", "--type", "fanout")
    host, port = broker.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    ch = conn.channel()
    ch.queue_bind(name, name + "-x")
    for i in range(3):
        ch.basic_publish(name + "-x", "", b"m%d" % i)
    assert ch.queue_declare(name, passive=True).method.message_count == 3
    assert {x["name"]: x["type"] for x in as_json(broker, "exchanges", "list")}[name + "-x"] == "fanout"
    assert [b["destination"] for b in as_json(broker, "exchanges", "bindings", name + "-x")] == [name]
    listed = {q["name"]: q for q in as_json(broker, "queues", "list")}
    assert listed[name]["messages"] == 3
    assert as_json(broker, "queues", "purge", name) == {"name": name, "purged": 3}
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    gateway(broker, "queues", "delete", name)
    gateway(broker, "exchanges", "delete", name + "-x")
    conn.close()
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        conn.channel().queue_declare(name, passive=True)
    conn.close()
    missing = gateway(broker, "queues", "purge", name, ok=False)
    assert missing.returncode == 1 and "404" in missing.stderr
