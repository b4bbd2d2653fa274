"""The Spark pipelines against a real broker process, in ``local[2]``.

20,000 records from kafka-python (two partitions, half gzip, keys, headers, a null key or value
now and then, timestamps across a UTC midnight, segments rolling every 128 KiB) and 500 AMQP
messages from pika into a queue whose name is not a legal topic name. Then:

* the archive pipeline (direct log source, and Spark's Kafka source) turns them into a Parquet
  table that matches what was produced row for row; a job stopped mid-stream and restarted
  from its checkpoint adds the new records and nothing twice;
* the gatewaylog data source returns exactly the rows kafka-python reads over the protocol, and
  Spark's Kafka source exactly the rows of the gatewaylog source;
* ``gateway spark archive --once`` and the stats report work from the command line.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from compat_tests.conftest import unique_name
from compat_tests.support import wait_until
from core.hw_checkpoint import read_high_watermarks
from core.names import queue_topic
from spark.archive import ArchiveSource, progress_dict, run_archive, start_archive
from spark.options import gatewaylog_options
from spark.stats import load_table, run_stats

from .helpers import Produced, around_last_midnight, create_topic, produce_kafka, publish_amqp, read_kafka_python, spark_rows

# Small enough for CI (the suite shares two cores), large enough that segments roll, a partition
# is split into several tasks and the records straddle midnight; SPARK_COMPAT_RECORDS scales it up.
RECORDS = int(os.environ.get("SPARK_COMPAT_RECORDS", "20000"))
AMQP_MESSAGES = 500
SEGMENT_BYTES = 128 * 1024
SPLIT = max(RECORDS // 8, 1)  # gatewaylog maxRecordsPerPartition: about four tasks per partition
PARTITIONS = 2
SOURCES = ["gatewaylog", "kafka"]


@pytest.fixture(scope="module")
def loaded(kafka_broker):
    """The broker with the records in, and the high-watermark checkpoint covering them."""
    bootstrap = kafka_broker.bootstrap
    topic, queue = unique_name("spark-events"), f"spark in/box {unique_name('q')}"
    create_topic(bootstrap, topic, PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES)})
    produced = Produced()
    first_ms = around_last_midnight(RECORDS)
    produce_kafka(bootstrap, topic, RECORDS, produced, partitions=PARTITIONS, first_ms=first_ms)
    host, port = kafka_broker.process.address("amqp")
    bodies = publish_amqp(host, port, queue, AMQP_MESSAGES)
    state = dict(first_ms=first_ms, bootstrap=bootstrap, data_dir=str(kafka_broker.data_dir), topic=topic, queue=queue,
                 queue_topic=queue_topic("/", queue), produced=produced, bodies=bodies)
    wait_for_checkpoint(state, {topic: RECORDS, state["queue_topic"]: AMQP_MESSAGES})
    return state


def wait_for_checkpoint(state, totals: dict[str, int]) -> None:
    def covered():
        hws = read_high_watermarks(state["data_dir"]) or {}
        return all(sum(hws.get(t, {}).values()) >= n for t, n in totals.items())

    wait_until(covered, timeout=30, what=f"high-watermarks.json to cover {totals}")


def source_for(kind: str, state, **kw) -> ArchiveSource:
    where = {"bootstrap": state["bootstrap"]} if kind == "kafka" else {"data_dir": state["data_dir"]}
    return ArchiveSource(topics=[state["topic"]], queues=[state["queue"]], **where, **kw)


def check_table(spark, out: str, state, produced: Produced) -> None:
    """The table holds every produced record once, with its key, value, headers, time and date."""
    table = spark.read.parquet(out)
    total = expected_rows(state)
    keys = table.select("topic", "partition", "offset")
    assert keys.count() == total, "rows missing or doubled"
    assert keys.distinct().count() == total, "a record was archived twice"
    got = {}
    for r in table.select("topic", "partition", "offset", "key", "value", "i", "name", "headers", "timestamp",
                          "date").toLocalIterator():
        got[(r.topic, r.partition, r.offset)] = r
    for where, (key, value, ts, headers) in produced.of_topic(state["topic"]).items():
        row = got[where]
        assert (row.key, row.value) == (key, value), where
        assert row.headers == (None if headers is None else dict(headers)), where
        assert int(row.timestamp.timestamp() * 1000) == ts
        assert row.date.isoformat() == time.strftime("%Y-%m-%d", time.gmtime(ts / 1000))
        if value is not None:
            assert (row.i, row.name) == (int(value.split(b":")[1].split(b",")[0]), f"n{row.i % 13}")
    queue_rows = sorted((o, r) for (t, _p, o), r in got.items() if t == state["queue_topic"])
    assert [o for o, _ in queue_rows] == list(range(AMQP_MESSAGES))
    assert [bytes(r.value) for _, r in queue_rows] == state["bodies"]
    assert {bytes(r.key) for _, r in queue_rows} == {b"spark-rk"}
    assert all(r.headers["amqp.content-type"] == b"application/json" and r.i is not None for _, r in queue_rows)
    dates = {r.date.isoformat() for r in got.values() if r.topic == state["topic"]}
    assert len(dates) == 2  # the records straddle a UTC midnight


def expected_rows(state) -> int:
    """Every Kafka record produced so far plus the AMQP messages."""
    return len(state["produced"].rows) + AMQP_MESSAGES


@pytest.mark.parametrize("kind", SOURCES)
def test_archive_once_matches_what_was_produced_and_restarts_exactly_once(spark, loaded, tmp_path, kind):
    out, checkpoint = str(tmp_path / "table"), str(tmp_path / "checkpoint")
    lines = []
    source = source_for(kind, loaded, max_offsets_per_trigger=expected_rows(loaded) // 3 + 1)  # >= 3 batches
    rows, _ = run_archive(spark, source, out, checkpoint, once=True, value_schema="i long, name string",
                          report=lines.append)
    assert rows == expected_rows(loaded)
    assert len(lines) >= 3 and lines[-1].endswith("lag 0"), lines  # progress: rows, offsets, lag
    check_table(spark, out, loaded, loaded["produced"])

    # Continuous mode, stopped in the middle of the stream, then restarted from the checkpoint.
    more = Produced()
    produce_kafka(loaded["bootstrap"], loaded["topic"], 6_000, more, partitions=PARTITIONS, start=RECORDS,
                  first_ms=loaded["first_ms"])
    loaded["produced"].rows.update(more.rows)
    wait_for_checkpoint(loaded, {loaded["topic"]: len(loaded["produced"].rows)})
    slow = source_for(kind, loaded, max_offsets_per_trigger=1_000)
    query = start_archive(spark, slow, out, checkpoint, once=False, value_schema="i long, name string",
                          trigger_seconds=0.2)
    try:
        wait_until(lambda: any(progress_dict(p)["numInputRows"] for p in query.recentProgress), timeout=60,
                   what="a continuous micro-batch")
    finally:
        query.stop()
    assert spark.read.parquet(out).count() < expected_rows(loaded), "stopped before the end, as intended"
    rows, _ = run_archive(spark, source, out, checkpoint, once=True, value_schema="i long, name string",
                          report=lines.append)
    check_table(spark, out, loaded, loaded["produced"])


def test_gatewaylog_rows_equal_a_kafka_protocol_read(spark, loaded):
    for topic in (loaded["topic"], loaded["queue_topic"]):
        over_protocol = read_kafka_python(loaded["bootstrap"], topic)
        options = gatewaylog_options(loaded["data_dir"], topics=[topic], maxRecordsPerPartition=str(SPLIT))
        df = spark.read.format("gatewaylog").options(**options).load()
        per_partition = {}
        for row in over_protocol:
            per_partition[row[3]] = per_partition.get(row[3], 0) + 1
        assert df.rdd.getNumPartitions() == sum(-(-n // SPLIT) for n in per_partition.values())  # split by offsets
        direct = spark_rows(df)
        assert len(direct) == len(over_protocol) > 0
        for a, b in zip(direct, over_protocol):
            assert a == b


def test_kafka_source_rows_equal_the_gatewaylog_source(spark, loaded):
    from spark.options import kafka_options

    for topic in (loaded["topic"], loaded["queue_topic"]):
        via_kafka = spark.read.format("kafka").options(**kafka_options(loaded["bootstrap"], topics=[topic])).load()
        direct = spark.read.format("gatewaylog").options(**gatewaylog_options(loaded["data_dir"], topics=[topic])).load()
        assert via_kafka.schema == direct.schema
        assert spark_rows(via_kafka) == spark_rows(direct)


def test_cli_archive_and_stats_report(spark, loaded, tmp_path):
    out, checkpoint, stats = tmp_path / "table", tmp_path / "checkpoint", tmp_path / "stats"
    cmd = [sys.executable, "-m", "gateway", "spark", "archive", "--queues", loaded["queue"],
           "--data-dir", loaded["data_dir"], "--out", str(out), "--checkpoint", str(checkpoint), "--once"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"archived {AMQP_MESSAGES} rows" in proc.stderr
    assert "lag 0" in proc.stderr
    assert spark.read.parquet(str(out)).count() == AMQP_MESSAGES

    result = run_stats(spark, load_table(spark, str(out)), str(stats), source_label="test")
    assert [(t["topic"], t["records"]) for t in result.topics] == [(loaded["queue_topic"], AMQP_MESSAGES)]
    assert result.topics[0]["bytes"] == sum(len(b) for b in loaded["bodies"]) + AMQP_MESSAGES * len(b"spark-rk")
    page = result.report.read_text()
    assert "<svg" in page and ("<polyline" in page or "<circle" in page)
    assert loaded["queue_topic"] in page and "spark-rk" in page
    assert spark.read.parquet(str(stats / "per_minute")).groupBy().sum("records").first()[0] == AMQP_MESSAGES
