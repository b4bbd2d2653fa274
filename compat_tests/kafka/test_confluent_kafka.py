"""confluent-kafka (librdkafka) against the broker, over real sockets.

Every test creates its own topics and asserts exact values, offsets and error codes.
"""
from __future__ import annotations

import threading
import time
import warnings

import pytest
from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaError, KafkaException,
                             Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import (GROUP_MESSAGES, GROUP_PARTITIONS, ConsumerLog, Produced,
                                        check_group_consumption, covered, group_message, wait_until)

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000}


def make_producer(bootstrap, **conf) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 60000, **COMMON, **conf})


def make_consumer(bootstrap, group=None, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group or unique_name("ck-reader"),
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **COMMON, **conf})


def make_admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **COMMON})


def create_topic(bootstrap, name, partitions=1, config=None):
    admin = make_admin(bootstrap)
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})], operation_timeout=15)
    futures[name].result(timeout=30)
    wait_until(lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == partitions
               and admin.list_topics(name, timeout=10).topics[name].error is None, 15, f"topic {name} in metadata")


def consume_n(consumer, count, timeout=30.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} messages within {timeout}s"
        for m in consumer.consume(num_messages=min(1000, count - len(out)), timeout=0.5):
            assert m.error() is None, f"consumer error: {m.error()}"
            out.append(m)
    return out


def read_assigned(bootstrap, topic, partitions, count, timeout=30.0):
    consumer = make_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return consume_n(consumer, count, timeout)
    finally:
        consumer.close()


class Deliveries:
    def __init__(self):
        self.reports = []
        self.errors = []

    def __call__(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.reports.append(msg)


def produce_all(producer, topic, records, deliveries):
    for r in records:
        while True:
            try:
                producer.produce(topic, on_delivery=deliveries, **r)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0, "messages still undelivered after 60s"
    assert not deliveries.errors, deliveries.errors[:5]


# --------------------------------------------------------------------------- produce/consume

def _records(base_ts):
    out = []
    for i in range(60):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        value = None if i == 2 else (b"" if i == 1 else (bytes(range(256)) * 40 if i == 3
                                                         else (f"value {i} " * (i % 5 + 1)).encode()))
        headers = [("h", b"x"), ("bin", bytes([i, 0, 255]))] if i % 2 == 0 else []
        if i % 7 == 0:
            headers += [("dup", b"1"), ("dup", b"2")]
        r = dict(partition=i % 2, key=key, value=value, headers=headers)
        if i % 3 == 0:
            r["timestamp"] = base_ts + i
        out.append(r)
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_produce_and_read_back(bootstrap, topic_name, codec):
    create_topic(bootstrap, topic_name, partitions=2)
    base_ts = int(time.time() * 1000) - 3_600_000
    records = _records(base_ts)
    producer = make_producer(bootstrap, **{"enable.idempotence": True, "compression.type": codec,
                                           "linger.ms": 5})
    deliveries = Deliveries()
    before = int(time.time() * 1000)
    produce_all(producer, topic_name, records, deliveries)
    after = int(time.time() * 1000)

    # delivery reports carry the offsets: dense per partition, in produce order
    assert len(deliveries.reports) == len(records)
    by_value_order = {0: [], 1: []}
    for msg in deliveries.reports:
        assert msg.error() is None and msg.topic() == topic_name
        by_value_order[msg.partition()].append(msg.offset())
    for p in (0, 1):
        assert by_value_order[p] == list(range(30)), f"partition {p} delivery offsets {by_value_order[p]}"
    offset_of = {}
    counters = {0: 0, 1: 0}
    for i, r in enumerate(records):
        offset_of[i] = (r["partition"], counters[r["partition"]])
        counters[r["partition"]] += 1
    delivered = {(m.partition(), m.offset()): (m.key(), m.value()) for m in deliveries.reports}
    for i, r in enumerate(records):
        assert delivered[offset_of[i]] == (r["key"], r["value"])

    # the default consumer (isolation.level=read_committed) sees everything
    got = read_assigned(bootstrap, topic_name, 2, len(records))
    by_pos = {(m.partition(), m.offset()): m for m in got}
    assert len(by_pos) == len(records)
    for i, r in enumerate(records):
        m = by_pos[offset_of[i]]
        assert m.key() == r["key"] and m.value() == r["value"]
        assert (m.headers() or []) == r["headers"]
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_CREATE_TIME
        if "timestamp" in r:
            assert ts == r["timestamp"]
        else:
            assert before - 1000 <= ts <= after + 1000


def test_watermarks_and_offsets_for_times(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    base = (int(time.time() * 1000) // 1000) * 1000 - 3_600_000
    producer = make_producer(bootstrap, **{"linger.ms": 5})
    deliveries = Deliveries()
    produce_all(producer, topic_name, [dict(partition=0, value=f"v{i}".encode(), timestamp=base + i * 1000)
                                       for i in range(100)], deliveries)
    assert sorted(m.offset() for m in deliveries.reports) == list(range(100))

    consumer = make_consumer(bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15) == (0, 100)
        res = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 5500)], timeout=15)
        assert [(tp.partition, tp.offset, tp.error) for tp in res] == [(0, 6, None)]
        res = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 7000)], timeout=15)
        assert res[0].offset == 7
        res = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 100_000)], timeout=15)
        assert res[0].offset == -1  # no record at or after that time: the end (OFFSET_END)
        consumer.assign([TopicPartition(topic_name, 0, 42)])
        got = consume_n(consumer, 3)
        assert [(m.offset(), m.value(), m.timestamp()[1]) for m in got] == [
            (o, f"v{o}".encode(), base + o * 1000) for o in range(42, 45)]
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------ admin

def test_admin_create_describe_delete_topics_and_metadata(bootstrap, topic_name):
    admin = make_admin(bootstrap)
    create_topic(bootstrap, topic_name, partitions=3)

    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)])[topic_name].result(30)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    md = admin.list_topics(timeout=15)
    assert md.brokers, "metadata lists no broker"
    broker_ids = set(md.brokers)
    for b in md.brokers.values():
        assert b.host and b.port > 0
    tmd = md.topics[topic_name]
    assert tmd.error is None
    assert sorted(tmd.partitions) == [0, 1, 2]
    for pid, pmd in tmd.partitions.items():
        assert pmd.id == pid and pmd.error is None
        assert pmd.leader in broker_ids
        assert pmd.replicas == [pmd.leader] and pmd.isrs == [pmd.leader]

    desc = admin.describe_topics(TopicCollection([topic_name]))[topic_name].result(30)
    assert desc.name == topic_name and not desc.is_internal
    assert [p.id for p in desc.partitions] == [0, 1, 2]
    for p in desc.partitions:
        assert p.leader.id in broker_ids
        assert [r.id for r in p.replicas] == [p.leader.id] and [r.id for r in p.isr] == [p.leader.id]

    admin.delete_topics([topic_name], operation_timeout=15)[topic_name].result(30)
    wait_until(lambda: topic_name not in admin.list_topics(timeout=10).topics, 15, "deleted topic gone")
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([topic_name], operation_timeout=15)[topic_name].result(30)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_describe_configs(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config={"retention.ms": "3600000", "cleanup.policy": "compact"})
    admin = make_admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert int(configs["max.message.bytes"].value) > 0


def test_admin_takes_every_kafka_topic_config_and_list_operations(bootstrap, topic_name):
    """Valid Kafka topic configs this broker does not act on are kept, not refused; APPEND and
    SUBTRACT work on list configs from their current (or default) value, and only on those."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    create_topic(bootstrap, topic_name, config={"file.delete.delay.ms": "30000", "min.cleanable.dirty.ratio": "0.3",
                                                "preallocate": "true"})
    admin = make_admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["file.delete.delay.ms"].value == "30000" and configs["min.cleanable.dirty.ratio"].value == "0.3"
    assert configs["segment.index.bytes"].value == "10485760"  # a default, shown
    append = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([append])[append].result(30)
    # Apache Kafka applies an alter through its controller; the broker answering DescribeConfigs sees
    # it a moment later, so each read-back waits for the value
    policy = lambda: admin.describe_configs([res])[res].result(30)["cleanup.policy"].value  # noqa: E731
    wait_until(lambda: policy() == "delete,compact", 15, "cleanup.policy delete,compact after APPEND")
    subtract = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([subtract])[subtract].result(30)
    wait_until(lambda: policy() == "compact", 15, "cleanup.policy compact after SUBTRACT")
    wrong = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([wrong])[wrong].result(30)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    bad = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "1.5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_admin_delete_records_moves_low_watermark(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    producer = make_producer(bootstrap)
    deliveries = Deliveries()
    produce_all(producer, topic_name, [dict(partition=0, value=f"r{i}".encode()) for i in range(50)], deliveries)
    admin = make_admin(bootstrap)
    tp = TopicPartition(topic_name, 0, 20)
    result = admin.delete_records([tp], operation_timeout=15)
    [(rtp, fut)] = list(result.items())
    deleted = fut.result(30)
    assert deleted.low_watermark == 20
    consumer = make_consumer(bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15) == (20, 50)
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got = consume_n(consumer, 30)
        assert [(m.offset(), m.value()) for m in got] == [(o, f"r{o}".encode()) for o in range(20, 50)]
    finally:
        consumer.close()


def test_admin_list_and_describe_groups(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    producer = make_producer(bootstrap)
    deliveries = Deliveries()
    produce_all(producer, topic_name, [dict(partition=0, value=b"one")], deliveries)
    group = unique_name("ck-admin-group")
    consumer = make_consumer(bootstrap, group, **{"client.id": "ck-member"})
    admin = make_admin(bootstrap)
    try:
        consumer.subscribe([topic_name])
        assert [m.value() for m in consume_n(consumer, 1, timeout=90)] == [b"one"]
        consumer.commit(asynchronous=False)

        listed = admin.list_consumer_groups(request_timeout=15).result(30)
        assert not listed.errors, listed.errors
        assert group in {g.group_id for g in listed.valid}

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the legacy call, still widely used
            legacy = admin.list_groups(group, timeout=15)
        assert [(g.id, g.protocol_type, g.state) for g in legacy] == [(group, "consumer", "Stable")]

        desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)
        assert desc.group_id == group and not desc.is_simple_consumer_group
        assert desc.state.name == "STABLE"
        assert [m.client_id for m in desc.members] == ["ck-member"]
        [member] = desc.members
        assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [(topic_name, 0)]
        assert desc.coordinator.id in admin.list_topics(timeout=10).brokers
    finally:
        consumer.close()


# ------------------------------------------------------------------------------ group at scale

def _group_member(bootstrap, topic, group, log: ConsumerLog, stop: threading.Event):
    try:
        consumer = make_consumer(bootstrap, group, **{
            "client.id": log.name, "enable.auto.commit": True, "auto.commit.interval.ms": 500,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
        consumer.subscribe([topic], on_assign=lambda c, ps: log.on_assign(tp.partition for tp in ps),
                           on_revoke=lambda c, ps: log.on_revoke(tp.partition for tp in ps))
        try:
            while not stop.is_set():
                for m in consumer.consume(num_messages=1000, timeout=0.2):
                    if m.error() is not None:
                        log.errors.append(str(m.error()))
                        continue
                    log.record(m.partition(), m.offset(), m.key(), m.value())
        finally:
            consumer.close()  # commits the final offsets (auto commit) and leaves the group
    except Exception as e:  # reported by the checks in the main thread
        log.errors.append(repr(e))


def test_group_of_three_rebalancing_under_load(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=GROUP_PARTITIONS)
    group = unique_name("ck-group3")
    logs = [ConsumerLog(f"member-{i}") for i in range(3)]
    stops = [threading.Event() for _ in logs]
    threads = [threading.Thread(target=_group_member, args=(bootstrap, topic_name, group, log, stop), daemon=True)
               for log, stop in zip(logs, stops)]
    all_partitions = list(range(GROUP_PARTITIONS))

    def owned(members):
        return sorted(p for log in members for p in log.owned())

    produced = Produced()

    def delivered(err, msg):
        if err is not None:
            raise KafkaException(err)
        produced.add(msg.partition(), msg.offset(), msg.key(), msg.value())

    try:
        threads[0].start()
        threads[1].start()
        wait_until(lambda: owned(logs[:2]) == all_partitions and all(l.owned() for l in logs[:2]),
                   90, "two members sharing all 6 partitions")
        producer = make_producer(bootstrap, **{"enable.idempotence": True, "linger.ms": 5})
        for i in range(GROUP_MESSAGES):
            key, value = group_message(i)
            while True:
                try:
                    producer.produce(topic_name, key=key, value=value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            if i == GROUP_MESSAGES * 3 // 10:  # a third member joins mid-stream
                threads[2].start()
                wait_until(lambda: logs[2].owned() and owned(logs) == all_partitions, 90,
                           "third member assigned partitions")
            if i == GROUP_MESSAGES * 6 // 10:  # the first member leaves mid-stream
                assert logs[0].count > 0, "first member consumed nothing before leaving"
                stops[0].set()
                threads[0].join(30)
                wait_until(lambda: owned(logs[1:]) == all_partitions, 90,
                           "remaining two members owning all partitions after a leave")
        assert producer.flush(60) == 0
        assert len(produced.records) == GROUP_MESSAGES
        wait_until(lambda: covered(logs) >= set(produced.records), 180, "all messages consumed", interval=0.5)
    finally:
        for stop in stops:
            stop.set()
        for t in threads:
            if t.ident:
                t.join(30)

    assert len(logs[1].assignments) >= 3, f"member-1 saw no rebalance: {logs[1].assignments}"
    stats = check_group_consumption(produced, logs, GROUP_PARTITIONS)

    checker = make_consumer(bootstrap, group)
    try:
        committed = checker.committed([TopicPartition(topic_name, p) for p in all_partitions], timeout=15)
        assert {tp.partition: tp.offset for tp in committed} == stats["ends"]
    finally:
        checker.close()
