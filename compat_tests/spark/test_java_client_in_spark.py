"""The Java kafka-clients (the version Spark's Kafka connector brings, the client inside its
source), driven from Spark's own JVM through py4j in the calls the source makes, against a
real broker process:

* KafkaOffsetReaderAdmin: ``Admin.describeTopics`` then ``listOffsets`` (earliest, latest;
  read_uncommitted) for every partition;
* KafkaDataConsumer: a ``KafkaConsumer`` (byte-array deserializers, ``auto.offset.reset=none``,
  no auto commit, a ``spark-kafka-source-...-executor`` group id) that ``assign``s one partition,
  ``seek``s to an offset and ``poll``s a range, as each Spark task does.

What the JVM sees must equal what the gatewaylog data source reads from the files: the same
partition ranges and, record for record, the same rows.
"""
from __future__ import annotations

import time

from py4j.java_gateway import get_field

from compat_tests.conftest import unique_name
from compat_tests.support import wait_until
from core.hw_checkpoint import read_high_watermarks
from spark.options import gatewaylog_options

from .helpers import Produced, around_last_midnight, create_topic, produce_kafka, spark_rows

PARTITIONS = 3
RECORDS = 3_000
SLICE = 300  # records fetched from each seek position


def test_spark_jvm_kafka_clients_see_what_the_files_hold(spark, kafka_broker):
    bootstrap, topic = kafka_broker.bootstrap, unique_name("spark-jvm")
    create_topic(bootstrap, topic, PARTITIONS)
    produce_kafka(bootstrap, topic, RECORDS, Produced(), partitions=PARTITIONS,
                  first_ms=around_last_midnight(RECORDS))
    wait_until(lambda: sum((read_high_watermarks(kafka_broker.data_dir) or {}).get(topic, {}).values()) == RECORDS,
               timeout=30, what="the high-watermark checkpoint")
    direct = spark.read.format("gatewaylog").options(**gatewaylog_options(str(kafka_broker.data_dir),
                                                                          topics=[topic])).load()
    files = {(r[3], r[4]): r for r in spark_rows(direct)}

    jvm = spark._jvm
    kafka = jvm.org.apache.kafka
    seconds = jvm.java.util.concurrent.TimeUnit.SECONDS

    def properties(**extra):
        p = jvm.java.util.Properties()
        for key, value in {"bootstrap.servers": bootstrap, "request.timeout.ms": "15000",
                           "default.api.timeout.ms": "30000", **extra}.items():
            p.put(key, value)
        return p

    # KafkaOffsetReaderAdmin
    admin = kafka.clients.admin.Admin.create(properties())
    try:
        names = jvm.java.util.Collections.singletonList(topic)
        description = admin.describeTopics(names).allTopicNames().get(30, seconds).get(topic)
        partitions = sorted(info.partition() for info in description.partitions())
        assert partitions == list(range(PARTITIONS))
        tps = {p: kafka.common.TopicPartition(topic, p) for p in partitions}
        options = kafka.clients.admin.ListOffsetsOptions(kafka.common.IsolationLevel.READ_UNCOMMITTED)
        listed = {}
        for name, spec in (("earliest", kafka.clients.admin.OffsetSpec.earliest()),
                           ("latest", kafka.clients.admin.OffsetSpec.latest())):
            request = jvm.java.util.HashMap()
            for tp in tps.values():
                request.put(tp, spec)
            result = admin.listOffsets(request, options).all().get(30, seconds)
            listed[name] = {p: result.get(tp).offset() for p, tp in tps.items()}
    finally:
        admin.close()
    per_partition = {p: sorted(o for (q, o) in files if q == p) for p in partitions}
    assert listed["earliest"] == {p: offs[0] for p, offs in per_partition.items()}
    assert listed["latest"] == {p: offs[-1] + 1 for p, offs in per_partition.items()}

    # KafkaDataConsumer: assign, seek, poll a slice from the start, the middle and the end of each partition
    deserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    consumer = kafka.clients.consumer.KafkaConsumer(properties(**{
        "key.deserializer": deserializer, "value.deserializer": deserializer,
        "group.id": f"spark-kafka-source-{unique_name('g')}-executor",
        "auto.offset.reset": "none", "enable.auto.commit": "false"}))
    checked = 0
    try:
        for p, tp in tps.items():
            consumer.assign(jvm.java.util.Collections.singletonList(tp))
            latest = listed["latest"][p]
            for start in (listed["earliest"][p], latest // 2, max(latest - SLICE // 2, 0)):
                consumer.seek(tp, start)
                want, got, deadline = min(start + SLICE, latest), [], time.monotonic() + 30
                while not got or got[-1][4] < want - 1:
                    assert time.monotonic() < deadline, f"poll from {tp.toString()}@{start} stalled"
                    for r in consumer.poll(jvm.java.time.Duration.ofMillis(512)).records(tp):
                        if r.offset() < want:
                            got.append(_row(r))
                assert [g[4] for g in got] == list(range(start, want))
                for row in got:
                    assert row == files[(p, row[4])]
                checked += len(got)
    finally:
        consumer.close()
    assert checked >= PARTITIONS * SLICE * 2


def _row(r) -> tuple:
    """A Java ConsumerRecord as the tuples of helpers.spark_rows."""
    def b(x):
        return None if x is None else bytes(x)

    headers = [(h.key(), b(h.value())) for h in r.headers().toArray()] or None
    return (b(r.key()), b(r.value()), r.topic(), r.partition(), r.offset(), r.timestamp(), get_field(r.timestampType(), "id"),
            headers)
