"""kafka-python (pure-Python client) against the broker, over real sockets.

Every test creates its own topics (the broker is shared by the module, or by the whole run when
KAFKA_COMPAT_BOOTSTRAP points at an external broker) and asserts exact values, offsets and
error types.
"""
from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import MessageSizeTooLargeError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from kafka.structs import OffsetAndMetadata

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import (GROUP_MESSAGES, GROUP_PARTITIONS, ConsumerLog, Produced,
                                        check_group_consumption, covered, group_message, wait_until)

TIMEOUTS = dict(request_timeout_ms=15000, retry_backoff_ms=100, reconnect_backoff_max_ms=1000)


def make_producer(bootstrap, **kw) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=30000, **TIMEOUTS, **kw)


def make_consumer(bootstrap, **kw) -> KafkaConsumer:
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("enable_auto_commit", False)
    return KafkaConsumer(bootstrap_servers=bootstrap, **TIMEOUTS, **kw)


def make_admin(bootstrap) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, **TIMEOUTS)


def create_topic(bootstrap, name, partitions=1, configs=None):
    admin = make_admin(bootstrap)
    try:
        result = admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1,
                                             "configs": configs or {}}})
        assert [t["error_code"] for t in result["topics"]] == [0], result
        wait_until(lambda: _partition_count(admin, name) == partitions, 15, f"topic {name} in metadata")
    finally:
        admin.close()


def _partition_count(admin, name):
    topics = [t for t in admin.describe_topics([name]) if t["name"] == name and t["error_code"] == 0]
    return len(topics[0]["partitions"]) if topics else 0


def read_records(consumer, count, timeout=30.0):
    """Poll until ``count`` records arrived (more is an error the caller sees)."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} records within {timeout}s"
        for recs in consumer.poll(timeout_ms=500).values():
            out.extend(recs)
    return out


def read_assigned(bootstrap, topic, partitions, count, timeout=30.0):
    consumer = make_consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        return read_records(consumer, count, timeout)
    finally:
        consumer.close()


# --------------------------------------------------------------------------- produce/consume

def _roundtrip_records(n=60, base_ts=None):
    """A varied set: null and empty keys/values, binary, 10 KB values, headers (repeated keys),
    explicit and producer-assigned timestamps, explicit partitions."""
    out = []
    for i in range(n):
        key = None if i % 10 == 0 else (b"" if i == 5 else f"key-{i}".encode())
        if i == 1:
            value = b""
        elif i == 2:
            value = None  # tombstone
        elif i == 3:
            value = bytes(range(256)) * 40
        else:
            value = (f"value {i} " * (i % 5 + 1)).encode()
        headers = []
        if i % 2 == 0:
            headers = [("h1", b"x"), ("bin", bytes([i, 0, 255]))]
        if i % 7 == 0:
            headers += [("dup", b"1"), ("dup", b"2"), ("empty", b"")]
        ts = base_ts + i if (base_ts is not None and i % 3 == 0) else None
        out.append(dict(partition=i % 2, key=key, value=value, headers=headers, timestamp_ms=ts))
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_roundtrip(bootstrap, topic_name, codec):
    create_topic(bootstrap, topic_name, partitions=2)
    base_ts = int(time.time() * 1000) - 3_600_000
    records = _roundtrip_records(base_ts=base_ts)
    producer = make_producer(bootstrap, compression_type=codec)
    assert producer.config["enable_idempotence"] is True, "default producer fell back to non-idempotent"
    assert producer.config["acks"] == -1
    before = int(time.time() * 1000)
    futures = [producer.send(topic_name, **r) for r in records]
    producer.flush(timeout=30)
    metas = [f.get(timeout=30) for f in futures]
    after = int(time.time() * 1000)
    producer.close(timeout=10)

    next_offset = {0: 0, 1: 0}
    for r, md in zip(records, metas):
        assert md.topic == topic_name and md.partition == r["partition"]
        assert md.offset == next_offset[md.partition], "offsets must be dense, in send order"
        next_offset[md.partition] += 1

    got = read_assigned(bootstrap, topic_name, 2, len(records))
    assert len(got) == len(records)
    by_pos = {(m.partition, m.offset): m for m in got}
    assert len(by_pos) == len(records), "a record was delivered twice"
    for r, md in zip(records, metas):
        m = by_pos[(md.partition, md.offset)]
        assert m.key == r["key"]
        assert m.value == r["value"]
        assert [(k, v) for k, v in m.headers] == r["headers"]
        assert m.timestamp_type == 0  # CreateTime
        if r["timestamp_ms"] is not None:
            assert m.timestamp == r["timestamp_ms"]
        else:
            assert before - 1000 <= m.timestamp <= after + 1000
        assert md.timestamp in (m.timestamp, -1)


def test_produce_to_unknown_topic_auto_creates(bootstrap, topic_name):
    producer = make_producer(bootstrap)
    md = producer.send(topic_name, key=b"k", value=b"first").get(timeout=30)
    assert (md.topic, md.offset) == (topic_name, 0)
    md2 = producer.send(topic_name, key=b"k", value=b"second").get(timeout=30)
    assert (md2.partition, md2.offset) == (md.partition, 1)
    producer.close(timeout=10)
    admin = make_admin(bootstrap)
    try:
        assert topic_name in admin.list_topics()
        partitions = _partition_count(admin, topic_name)
        assert partitions >= 1
    finally:
        admin.close()
    got = read_assigned(bootstrap, topic_name, partitions, 2)
    assert [(m.partition, m.offset, m.key, m.value) for m in got] == [
        (md.partition, 0, b"k", b"first"), (md.partition, 1, b"k", b"second")]


def test_oversize_message_rejected_by_broker(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, configs={"max.message.bytes": "1000"})
    producer = make_producer(bootstrap, max_request_size=1_000_000)
    with pytest.raises(MessageSizeTooLargeError):
        producer.send(topic_name, value=b"x" * 5000).get(timeout=30)
    # kafka-python's idempotent producer treats any non-retriable batch error as fatal to the
    # producer, so the partition's health is checked with a new one: the rejected record left no trace
    producer.close(timeout=10)
    producer = make_producer(bootstrap)
    md = producer.send(topic_name, value=b"small").get(timeout=30)
    assert md.offset == 0
    producer.close(timeout=10)
    got = read_assigned(bootstrap, topic_name, 1, 1)
    assert [(m.offset, m.value) for m in got] == [(0, b"small")]


# ------------------------------------------------------------------------- offsets and seeking

def test_seek_offsets_for_times_beginning_end(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    base = (int(time.time() * 1000) // 1000) * 1000 - 3_600_000
    producer = make_producer(bootstrap, linger_ms=5)
    futures = [producer.send(topic_name, partition=0, value=f"v{i}".encode(), timestamp_ms=base + i * 1000)
               for i in range(100)]
    producer.flush(timeout=30)
    assert [f.get(timeout=30).offset for f in futures] == list(range(100))
    producer.close(timeout=10)

    tp = TopicPartition(topic_name, 0)
    consumer = make_consumer(bootstrap)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 100}
        consumer.assign([tp])
        consumer.seek(tp, 42)
        assert consumer.position(tp, timeout_ms=15000) == 42
        got = read_records(consumer, 5)
        assert [(m.offset, m.value, m.timestamp) for m in got[:5]] == [
            (o, f"v{o}".encode(), base + o * 1000) for o in range(42, 47)]
        consumer.seek_to_end(tp)
        assert consumer.position(tp, timeout_ms=15000) == 100
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp, timeout_ms=15000) == 0
        assert read_records(consumer, 1)[0].offset == 0

        found = consumer.offsets_for_times({tp: base + 5500})[tp]
        assert (found.offset, found.timestamp) == (6, base + 6000)
        found = consumer.offsets_for_times({tp: base + 7000})[tp]
        assert (found.offset, found.timestamp) == (7, base + 7000)
        found = consumer.offsets_for_times({tp: 0})[tp]
        assert (found.offset, found.timestamp) == (0, base)
        assert consumer.offsets_for_times({tp: base + 100_000})[tp] is None
    finally:
        consumer.close()


def test_commit_then_new_consumer_resumes(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2)
    group = unique_name("resume")
    producer = make_producer(bootstrap)
    for i in range(40):
        producer.send(topic_name, partition=i % 2, value=f"m{i}".encode())
    producer.flush(timeout=30)
    producer.close(timeout=10)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    first = make_consumer(bootstrap, group_id=group)
    try:
        first.subscribe([topic_name])
        assert len(read_records(first, 40, timeout=90)) == 40
        assert first.assignment() == {tp0, tp1}
        first.commit({tp0: OffsetAndMetadata(12, "meta-0", -1), tp1: OffsetAndMetadata(5, "", -1)})
        assert first.committed(tp0, timeout_ms=15000) == 12
        assert first.committed(tp1, timeout_ms=15000) == 5
    finally:
        first.close(autocommit=False)

    second = make_consumer(bootstrap, group_id=group)
    try:
        assert second.committed(tp0, timeout_ms=15000) == 12
        assert second.committed(tp0, metadata=True, timeout_ms=15000).metadata == "meta-0"
        second.subscribe([topic_name])
        got = read_records(second, (20 - 12) + (20 - 5), timeout=90)
        seen = {0: [], 1: []}
        for m in got:
            seen[m.partition].append((m.offset, m.value))
        assert seen[0] == [(o, f"m{o * 2}".encode()) for o in range(12, 20)]
        assert seen[1] == [(o, f"m{o * 2 + 1}".encode()) for o in range(5, 20)]
        assert second.poll(timeout_ms=1000) == {}
        second.commit()
        assert (second.committed(tp0, timeout_ms=15000), second.committed(tp1, timeout_ms=15000)) == (20, 20)
    finally:
        second.close(autocommit=False)


# ------------------------------------------------------------------------------------ admin

def test_admin_create_list_describe_delete_topics(bootstrap, topic_name):
    admin = make_admin(bootstrap)
    try:
        result = admin.create_topics({topic_name: {"num_partitions": 3, "replication_factor": 1}})
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic_name, 0)]
        wait_until(lambda: topic_name in admin.list_topics(), 15, "created topic listed")
        [desc] = admin.describe_topics([topic_name])
        assert desc["name"] == topic_name and desc["error_code"] == 0 and not desc["is_internal"]
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2]
        for p in desc["partitions"]:
            assert p["error_code"] == 0 and p["leader_id"] >= 0
            assert p["replica_nodes"] == [p["leader_id"]] and p["isr_nodes"] == [p["leader_id"]]

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})

        result = admin.delete_topics([topic_name])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic_name, 0)]
        wait_until(lambda: topic_name not in admin.list_topics(), 15, "deleted topic gone from list")
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic_name])
    finally:
        admin.close()


def test_admin_create_partitions(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2)
    admin = make_admin(bootstrap)
    try:
        admin.create_partitions({topic_name: 5})
        wait_until(lambda: _partition_count(admin, topic_name) == 5, 15, "5 partitions after create_partitions")
    finally:
        admin.close()
    producer = make_producer(bootstrap)
    assert producer.send(topic_name, partition=4, value=b"new").get(timeout=30).offset == 0
    assert producer.send(topic_name, partition=1, value=b"old").get(timeout=30).offset == 0
    producer.close(timeout=10)
    got = read_assigned(bootstrap, topic_name, 5, 2)
    assert sorted((m.partition, m.offset, m.value) for m in got) == [(1, 0, b"old"), (4, 0, b"new")]


def _topic_config(admin, topic, key):
    res = admin.describe_configs([ConfigResource("topic", topic)], config_filter="all")
    return res["topic"][topic][key]


def test_admin_describe_and_alter_configs(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, configs={"retention.ms": "3600000", "cleanup.policy": "delete"})
    admin = make_admin(bootstrap)
    try:
        entry = _topic_config(admin, topic_name, "retention.ms")
        assert entry["value"] == "3600000"
        assert _topic_config(admin, topic_name, "cleanup.policy")["value"] == "delete"

        result = admin.alter_configs([ConfigResource("topic", topic_name, configs={"retention.ms": "7200000"})])
        assert result == {"topic": {topic_name: "OK"}}
        # Apache Kafka applies it through its controller: the answering broker sees it a moment later
        wait_until(lambda: _topic_config(admin, topic_name, "retention.ms")["value"] == "7200000", 15,
                   "retention.ms 7200000 after the alter")
        assert _topic_config(admin, topic_name, "cleanup.policy")["value"] == "delete"

        # a topic override is reported as such; defaults are listed too
        assert _topic_config(admin, topic_name, "retention.ms")["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert int(_topic_config(admin, topic_name, "max.message.bytes")["value"]) > 0
    finally:
        admin.close()


def _group_with_commit(bootstrap, topic, group, client_id):
    """A subscribed consumer that has read the topic's one record and committed offset 1."""
    consumer = make_consumer(bootstrap, group_id=group, client_id=client_id)
    consumer.subscribe([topic])
    assert len(read_records(consumer, 1, timeout=90)) == 1
    consumer.commit()
    assert consumer.committed(TopicPartition(topic, 0), timeout_ms=15000) == 1
    return consumer


def _one_record_topic(bootstrap, topic):
    create_topic(bootstrap, topic)
    producer = make_producer(bootstrap)
    producer.send(topic, value=b"one").get(timeout=30)
    producer.close(timeout=10)


def test_admin_list_and_describe_groups(bootstrap, topic_name):
    _one_record_topic(bootstrap, topic_name)
    group = unique_name("admin-group")
    tp = TopicPartition(topic_name, 0)
    admin = make_admin(bootstrap)
    consumer = _group_with_commit(bootstrap, topic_name, group, "compat-member")
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert group in listed and listed[group]["protocol_type"] == "consumer"
        assert admin.list_group_offsets([group])[group][tp].offset == 1
        described = admin.describe_groups([group])[group]
        assert described["error"] is None
        assert described["group_state"] == "Stable"
        assert described["protocol_type"] == "consumer"
        assert [m["client_id"] for m in described["members"]] == ["compat-member"]
        consumer.close(autocommit=False)
        wait_until(lambda: admin.describe_groups([group])[group]["group_state"] == "Empty", 15,
                   "group Empty after its only member left")
    finally:
        consumer.close(autocommit=False)
        admin.close()


def test_admin_delete_group(bootstrap, topic_name):
    _one_record_topic(bootstrap, topic_name)
    group = unique_name("deleted-group")
    tp = TopicPartition(topic_name, 0)
    _group_with_commit(bootstrap, topic_name, group, "compat-member").close(autocommit=False)
    admin = make_admin(bootstrap)
    try:
        assert group in {g["group_id"] for g in admin.list_groups()}
        assert admin.delete_groups([group]) == {group: "OK"}
        assert group not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
    fresh = make_consumer(bootstrap, group_id=group)
    try:
        assert fresh.committed(tp, timeout_ms=15000) is None, "committed offsets survived delete_groups"
    finally:
        fresh.close(autocommit=False)


# ------------------------------------------------------------------------------ group at scale

class _Listener(ConsumerRebalanceListener):
    def __init__(self, log: ConsumerLog):
        self.log = log

    def on_partitions_revoked(self, revoked):
        self.log.on_revoke(tp.partition for tp in revoked)

    def on_partitions_assigned(self, assigned):
        self.log.on_assign(tp.partition for tp in assigned)


def _group_member(bootstrap, topic, group, log: ConsumerLog, stop: threading.Event):
    try:
        consumer = make_consumer(bootstrap, group_id=group, client_id=log.name, enable_auto_commit=True,
                                 auto_commit_interval_ms=500, session_timeout_ms=30000,
                                 heartbeat_interval_ms=1000, max_poll_records=2000)
        # the topic's partitions known before the join: a leader whose first assignment missed them
        # re-joins when they arrive, and kafka-python 3.0 then stopped heartbeating after the next
        # assignment (removed by Apache Kafka after the session timeout; seen with a new topic)
        wait_until(lambda: consumer.partitions_for_topic(topic), 30, f"{topic}'s partitions known to {log.name}",
                   interval=0.1)
        consumer.subscribe([topic], listener=_Listener(log))
        try:
            while not stop.is_set():
                # 1 s, not less: kafka-python 3.0 gives its auto-commit before a rejoin the poll's
                # time; at 200 ms a loaded machine's commit timed out at every poll, and the member
                # never rejoined (removed after the rebalance timeout)
                for tp, recs in consumer.poll(timeout_ms=1000).items():
                    for m in recs:
                        log.record(tp.partition, m.offset, m.key, m.value)
        finally:
            consumer.close(autocommit=True)
    except Exception as e:  # reported by the checks in the main thread
        log.errors.append(repr(e))


def test_group_of_three_rebalancing_under_load(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=GROUP_PARTITIONS)
    group = unique_name("group3")
    logs = [ConsumerLog(f"member-{i}") for i in range(3)]
    stops = [threading.Event() for _ in logs]
    threads = [threading.Thread(target=_group_member, args=(bootstrap, topic_name, group, log, stop), daemon=True)
               for log, stop in zip(logs, stops)]

    def owned(members):
        return sorted(p for log in members for p in log.owned())

    try:
        threads[0].start()
        threads[1].start()
        wait_until(lambda: owned(logs[:2]) == list(range(GROUP_PARTITIONS)) and all(l.owned() for l in logs[:2]),
                   90, "two members sharing all 6 partitions")

        produced = Produced()
        producer = make_producer(bootstrap, linger_ms=5)
        futures = []
        for i in range(GROUP_MESSAGES):
            key, value = group_message(i)
            futures.append((key, value, producer.send(topic_name, key=key, value=value)))
            if i == GROUP_MESSAGES * 3 // 10:  # a third member joins mid-stream
                threads[2].start()
                wait_until(lambda: logs[2].owned() and owned(logs) == list(range(GROUP_PARTITIONS)),
                           90, "third member assigned partitions")
            if i == GROUP_MESSAGES * 6 // 10:  # the first member leaves mid-stream
                assert logs[0].count > 0, "first member consumed nothing before leaving"
                stops[0].set()
                threads[0].join(30)
                wait_until(lambda: owned(logs[1:]) == list(range(GROUP_PARTITIONS)), 90,
                           "remaining two members owning all partitions after a leave")
        producer.flush(timeout=60)
        for key, value, f in futures:
            md = f.get(timeout=60)
            produced.add(md.partition, md.offset, key, value)
        producer.close(timeout=10)

        wait_until(lambda: covered(logs) >= set(produced.records), 180, "all messages consumed", interval=0.5)
    finally:
        for stop in stops:
            stop.set()
        for t in threads:
            if t.is_alive() or t.ident:
                t.join(30)

    assert len(logs[0].assignments) >= 1 and len(logs[2].assignments) >= 1
    assert len(logs[1].assignments) >= 3, f"member-1 saw no rebalance: {logs[1].assignments}"
    stats = check_group_consumption(produced, logs, GROUP_PARTITIONS)
    assert sum(stats["ends"].values()) == GROUP_MESSAGES

    # the group's committed offsets are the end offsets: nothing is left to read
    checker = make_consumer(bootstrap, group_id=group)
    try:
        for p, end in stats["ends"].items():
            assert checker.committed(TopicPartition(topic_name, p), timeout_ms=15000) == end
    finally:
        checker.close(autocommit=False)


# ------------------------------------------------------------------------------------ restart

def test_restart_keeps_data_and_committed_offsets(kafka_broker, topic_name):
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    group = unique_name("restart")
    producer = make_producer(bootstrap, compression_type="lz4")
    sent = [(i % 2, f"k{i}".encode(), f"before restart {i}".encode()) for i in range(100)]
    for p, k, v in sent:
        producer.send(topic_name, partition=p, key=k, value=v, headers=[("i", k)])
    producer.flush(timeout=30)
    producer.close(timeout=10)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    consumer = make_consumer(bootstrap, group_id=group)
    consumer.assign([tp0, tp1])
    consumer.commit({tp0: OffsetAndMetadata(30, "", -1), tp1: OffsetAndMetadata(45, "", -1)})
    consumer.close(autocommit=False)

    bootstrap = kafka_broker.restart()

    expect = {0: [(k, v) for p, k, v in sent if p == 0], 1: [(k, v) for p, k, v in sent if p == 1]}
    got = read_assigned(bootstrap, topic_name, 2, 100)
    for p in (0, 1):
        recs = [m for m in got if m.partition == p]
        assert [m.offset for m in recs] == list(range(50))
        assert [(m.key, m.value) for m in recs] == expect[p]
        assert all([(k, v) for k, v in m.headers] == [("i", m.key)] for m in recs)

    resumed = make_consumer(bootstrap, group_id=group)
    try:
        assert (resumed.committed(tp0, timeout_ms=15000), resumed.committed(tp1, timeout_ms=15000)) == (30, 45)
        resumed.subscribe([topic_name])
        recs = read_records(resumed, 20 + 5, timeout=90)
        assert sorted((m.partition, m.offset) for m in recs) == \
            [(0, o) for o in range(30, 50)] + [(1, o) for o in range(45, 50)]
    finally:
        resumed.close(autocommit=False)

    producer = make_producer(bootstrap)
    assert producer.send(topic_name, partition=0, value=b"after restart").get(timeout=30).offset == 50
    producer.close(timeout=10)
