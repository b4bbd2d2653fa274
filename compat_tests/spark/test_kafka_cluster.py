"""Spark's Kafka source and sink against a three-broker cluster (compat_tests/cluster's brokers).

Both topics have three partitions replicated three times, so their leaders are spread over the
brokers: the source's admin client and its per-partition consumers, and the sink's producer,
must follow Metadata to each partition's leader. A Kafka-to-Kafka stream runs on one checkpoint,
stops (availableNow), runs again after more records arrive, and has copied each record exactly
once; a batch read of the copy sees the same rows as kafka-python.
"""
from __future__ import annotations

from confluent_kafka import Producer

from compat_tests.cluster.cluster import create_topic, partition_view
from compat_tests.cluster.conftest import cluster, zk_connect, zookeeper  # noqa: F401 (fixtures)
from compat_tests.conftest import unique_name
from spark.options import kafka_options

from .helpers import read_kafka_python, spark_rows


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=b"k%d" % (i % 7), partition=i % 3)
    assert producer.flush(30) == 0


def test_source_and_sink_on_three_brokers_restart_exactly_once(spark, cluster, tmp_path):
    bootstrap = cluster.bootstrap()
    source, sink = unique_name("spark-cl-in"), unique_name("spark-cl-out")
    for topic in (source, sink):
        create_topic(bootstrap, topic, 3, 3)
        md = cluster.wait_isr_full(topic)
    leaders = {leader for leader, _, _ in partition_view(md, sink).values()}
    assert len(leaders) > 1, f"the sink's partitions all have one leader: {partition_view(md, sink)}"

    def copy():
        df = spark.readStream.format("kafka").options(**kafka_options(
            bootstrap, topics=[source], starting_offsets="earliest", maxOffsetsPerTrigger="100")).load()
        query = (df.selectExpr("key", "concat(value, '!') AS value", "partition").writeStream.format("kafka")
                 .options(**kafka_options(bootstrap, topics=[sink], sink=True))
                 .option("kafka.acks", "all").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180), "availableNow did not finish"
        assert query.exception() is None

    first = [b"a%03d" % i for i in range(150)]
    produce(bootstrap, source, first)
    copy()
    second = [b"b%03d" % i for i in range(90)]
    produce(bootstrap, source, second)
    copy()

    over_protocol = read_kafka_python(bootstrap, sink)
    assert sorted(r[1] for r in over_protocol) == sorted(v + b"!" for v in first + second), "lost or doubled"
    assert {r[3] for r in over_protocol} == {0, 1, 2}  # each row went back to its source partition
    read = spark.read.format("kafka").options(**kafka_options(bootstrap, topics=[sink])).load()
    assert spark_rows(read) == over_protocol
