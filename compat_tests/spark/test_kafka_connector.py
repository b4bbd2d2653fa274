"""Spark's own Kafka connector (``format("kafka")``, source and sink) against one broker process.

The archive pipelines of test_pipelines.py already stream through the source with a checkpoint,
a stop mid-stream and a restart (exactly once into Parquet), batch-read a topic and compare it
with the direct log reader. This module covers the connector's other contracts, on a few hundred
records each:

* ``kafka.isolation.level=read_committed``: aborted transactions and an open one are invisible,
  committed ones appear once, and read_uncommitted sees all of them;
* ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (ListOffsets by timestamp);
* ``minOffsetsPerTrigger`` with ``maxTriggerDelay``, and ``maxOffsetsPerTrigger``, in a stream;
* the sink: a batch ``write.format("kafka")`` (keys, values, headers, explicit partitions) and a
  Kafka-to-Kafka stream run twice on one checkpoint, which copies every record exactly once.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import Producer

from compat_tests.conftest import unique_name
from compat_tests.support import wait_until
from spark.archive import progress_dict
from spark.options import kafka_options
from spark.session import KAFKA_PACKAGE_EXCLUDES

from .connector import artifact_of, pyspark_artifacts, resolved_jars
from .helpers import create_topic, read_kafka_python

PARTITIONS = 2


def test_spark_session_excludes_exactly_the_dependencies_pyspark_ships():
    """spark_session(kafka=True) leaves PySpark's own copies out of the package resolution: each
    excluded artifact must be one PySpark has, and each connector dependency it has, excluded."""
    shipped = pyspark_artifacts()
    excluded = {coordinate.split(":")[1] for coordinate in KAFKA_PACKAGE_EXCLUDES}
    assert excluded <= shipped, f"excluded but not in PySpark's jars: {excluded - shipped}"
    dependencies = {artifact_of(Path(jar).name) for jar in resolved_jars()}
    # Spark's resolver itself leaves out Spark's modules (spark-tags...) and the Scala library
    dependencies -= {"scala-library", "spark-tags_2.13"}
    assert dependencies & shipped <= excluded, f"fetched twice: {(dependencies & shipped) - excluded}"
    assert "spark-sql-kafka-0-10_2.13" in dependencies - excluded


def produce_plain(bootstrap: str, topic: str, values: list[str], *, first_ms: int | None = None, step_ms: int = 1000):
    """``values`` round-robin over the partitions, with timestamps ``first_ms + i * step_ms`` when given."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i, value in enumerate(values):
        kw = {} if first_ms is None else {"timestamp": first_ms + i * step_ms}
        producer.produce(topic, value=value.encode(), key=b"k%d" % i, partition=i % PARTITIONS, **kw)
    assert producer.flush(30) == 0


def read_values(spark, bootstrap: str, topic: str, **extra) -> list[str]:
    df = spark.read.format("kafka").options(**kafka_options(bootstrap, topics=[topic], **extra)).load()
    return sorted(bytes(r.value).decode() for r in df.select("value").collect())


def test_read_committed_hides_aborted_and_open_transactions(spark, kafka_broker):
    bootstrap, topic = kafka_broker.bootstrap, unique_name("spark-txn")
    create_topic(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("spark-tid"),
                         "transaction.timeout.ms": 30000})
    producer.init_transactions(30)

    def transaction(tag: str, n: int, commit: bool | None):
        producer.begin_transaction()
        for i in range(n):
            producer.produce(topic, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS)
        producer.flush(30)
        if commit is True:
            producer.commit_transaction(30)
        elif commit is False:
            producer.abort_transaction(30)

    transaction("c1", 40, True)
    transaction("a1", 30, False)
    transaction("c2", 20, True)
    transaction("a2", 10, False)
    transaction("open", 5, None)  # left open: beyond the last stable offset
    committed = sorted([f"c1-{i}" for i in range(40)] + [f"c2-{i}" for i in range(20)])

    assert read_values(spark, bootstrap, topic, **{"kafka.isolation.level": "read_committed"}) == committed
    everything = read_values(spark, bootstrap, topic)  # read_uncommitted: aborted and open records too
    assert len(everything) == 40 + 30 + 20 + 10 + 5 and set(committed) <= set(everything)

    producer.commit_transaction(30)
    assert read_values(spark, bootstrap, topic, **{"kafka.isolation.level": "read_committed"}) == \
        sorted(committed + [f"open-{i}" for i in range(5)])


def test_starting_and_ending_offsets_by_timestamp(spark, kafka_broker):
    bootstrap, topic = kafka_broker.bootstrap, unique_name("spark-ts")
    create_topic(bootstrap, topic, PARTITIONS)
    first_ms = int(time.time() * 1000) - 3_600_000
    values = [f"v{i:03d}" for i in range(100)]
    produce_plain(bootstrap, topic, values, first_ms=first_ms)  # record i at first_ms + i s
    start, end = first_ms + 30_000, first_ms + 70_000
    per_partition = lambda ms: json.dumps({topic: {str(p): ms for p in range(PARTITIONS)}})  # noqa: E731
    got = read_values(spark, bootstrap, topic, startingOffsetsByTimestamp=per_partition(start),
                      endingOffsetsByTimestamp=per_partition(end))
    assert got == values[30:70]  # starts at the first record at or after `start`, ends before `end`
    got = read_values(spark, bootstrap, topic, startingTimestamp=str(first_ms + 90_500))
    assert got == values[91:]


def test_min_and_max_offsets_per_trigger(spark, kafka_broker, tmp_path):
    bootstrap, topic = kafka_broker.bootstrap, unique_name("spark-limits")
    create_topic(bootstrap, topic, PARTITIONS)
    name = f"limits_{unique_name('q').replace('-', '_')}"
    opts = kafka_options(bootstrap, topics=[topic], starting_offsets="earliest", minOffsetsPerTrigger="50",
                         maxOffsetsPerTrigger="80", maxTriggerDelay="10m")
    query = (spark.readStream.format("kafka").options(**opts).load().selectExpr("CAST(value AS STRING) AS v")
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="300 milliseconds").start())
    def batches() -> list[int]:
        """Rows of each micro-batch that read any."""
        return [n for n in (progress_dict(p)["numInputRows"] for p in query.recentProgress) if n]

    try:
        # the first trigger over the empty topic starts maxTriggerDelay's clock; records come after it
        wait_until(lambda: query.status["message"].startswith("Waiting for"), timeout=60,
                   what="the stream's first trigger")
        produce_plain(bootstrap, topic, [f"a{i}" for i in range(30)])
        time.sleep(3)  # ten triggers: 30 new records stay below minOffsetsPerTrigger
        assert batches() == [], "a batch ran below minOffsetsPerTrigger before maxTriggerDelay"
        produce_plain(bootstrap, topic, [f"b{i}" for i in range(60)])
        wait_until(lambda: batches(), timeout=60, what="a batch once 90 records wait")
        time.sleep(3)  # the 10 left over are below the minimum again
        assert batches() == [80], "one batch, cut at maxOffsetsPerTrigger"
        assert spark.sql(f"SELECT count(DISTINCT v) FROM {name}").first()[0] == 80
    finally:
        query.stop()


def test_sink_batch_write_keys_values_headers_partitions(spark, kafka_broker):
    bootstrap, topic = kafka_broker.bootstrap, unique_name("spark-sink")
    create_topic(bootstrap, topic, 3)
    rows = [(f"k{i}", f"value {i}", i % 3, [("n", str(i).encode())]) for i in range(90)]
    df = spark.createDataFrame(rows, "key string, value string, partition int, headers array<struct<key: string, "
                                     "value: binary>>")
    df.write.format("kafka").options(**kafka_options(bootstrap, topics=[topic], sink=True)).save()
    got = read_kafka_python(bootstrap, topic)
    assert sorted((r[0].decode(), r[1].decode(), r[3], r[7]) for r in got) == \
        sorted((k, v, p, [("n", h[0][1])]) for k, v, p, h in rows)
    per_partition = {}
    for r in got:
        per_partition.setdefault(r[3], []).append(r[4])
    assert all(offsets == list(range(30)) for offsets in per_partition.values()) and len(per_partition) == 3


def test_kafka_to_kafka_stream_restarts_from_its_checkpoint_exactly_once(spark, kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap
    source, sink = unique_name("spark-in"), unique_name("spark-out")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 1)
    checkpoint = str(tmp_path / "ck")

    def run_once():
        """Everything available now, then stop (availableNow), on the same checkpoint each time."""
        df = spark.readStream.format("kafka").options(**kafka_options(bootstrap, topics=[source],
                                                                      starting_offsets="earliest",
                                                                      maxOffsetsPerTrigger="40")).load()
        query = (df.selectExpr("key", "upper(CAST(value AS STRING)) AS value").writeStream.format("kafka")
                 .options(**kafka_options(bootstrap, topics=[sink], sink=True))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert query.awaitTermination(120), "availableNow did not finish"
        assert query.exception() is None

    produce_plain(bootstrap, source, [f"x{i}" for i in range(100)])
    run_once()
    assert sorted(r[1] for r in read_kafka_python(bootstrap, sink)) == sorted(b"X%d" % i for i in range(100))
    produce_plain(bootstrap, source, [f"y{i}" for i in range(50)])
    run_once()
    expected = sorted([b"X%d" % i for i in range(100)] + [b"Y%d" % i for i in range(50)])
    copied = read_kafka_python(bootstrap, sink)
    assert sorted(r[1] for r in copied) == expected, "lost or copied twice across the restart"
