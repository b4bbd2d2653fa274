"""Spark benchmark: rows/s of the direct ``gatewaylog`` data source beside a kafka-python read.

One broker (``gateway serve``) gets ``--messages`` records (JSON values of about 100 B, keys,
one header each) on a topic of ``--partitions`` partitions, produced with confluent-kafka.
Then, alternating, ``--repeat`` times each:

* ``gatewaylog batch read``: ``spark.read.format("gatewaylog")`` of the whole topic, every row
  materialised (``write.format("noop")``), Spark ``local[2]``, default split (200,000 offsets
  per task); the time includes planning and the Python workers, not the session's start;
* ``kafka-python read``: one kafka-python consumer reading the same records over the Kafka
  protocol from the same broker (assigned partitions, from the beginning to the end offsets);
* ``kafka source batch read``: Spark's own ``format("kafka")`` (the connector is fetched by Spark
  from Maven Central, or taken from ``SPARK_KAFKA_JARS``).

With ``--archive`` it also times the archive pipeline (``--once``, direct source -> Parquet).
The table gives medians; "peer" is kafka-python, the ratio is gatewaylog / kafka-python.

    python -m bench spark [--messages 200000] [--partitions 2] [--repeat 3] [--archive] [--json PATH]

Results go to ``.cache/bench/results/spark.json``.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from bench import peers


def produce(bootstrap: str, topic: str, messages: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 512 * 1024,
                         "queue.buffering.max.messages": 1_000_000, "acks": "1"})
    now_ms = int(time.time() * 1000)
    for i in range(messages):
        value = json.dumps({"i": i, "user": f"u{i % 5000}", "amount": i % 977, "note": "x" * 40}).encode()
        while True:
            try:
                producer.produce(topic, value, key=b"u%d" % (i % 5000), partition=i % partitions,
                                 timestamp=now_ms - messages + i, headers=[("seq", str(i).encode())])
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("not every record was delivered within 120 s")


def wait_for_checkpoint(data_dir: Path, topic: str, messages: int, timeout: float = 60) -> None:
    from core.hw_checkpoint import read_high_watermarks

    deadline = time.monotonic() + timeout
    while sum((read_high_watermarks(data_dir) or {}).get(topic, {}).values()) < messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"high-watermarks.json did not reach {messages} records of {topic}")
        time.sleep(0.2)


def kafka_python_read(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_bytes=16 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        rows = 0
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for records in consumer.poll(timeout_ms=500, max_records=100_000).values():
                rows += len(records)
        return rows
    finally:
        consumer.close()


def spark_read(spark, fmt: str, options: dict) -> None:
    spark.read.format(fmt).options(**options).load().write.format("noop").mode("overwrite").save()


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--archive", action="store_true", help="also time the archive pipeline (--once)")


def run(args) -> peers.SuiteResult:
    from spark.archive import ArchiveSource, run_archive
    from spark.options import gatewaylog_options, kafka_options
    from spark.session import spark_session

    print("starting our broker ...", flush=True)
    ours = peers.OurBroker("spark")
    scratch = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=peers.CACHE))
    try:
        bootstrap, topic = ours.address("kafka"), "bench-spark"
        started = time.monotonic()
        produce(bootstrap, topic, args.messages, args.partitions)
        wait_for_checkpoint(ours.data_dir, topic, args.messages)
        print(f"produced {args.messages:,} records in {time.monotonic() - started:.1f} s", flush=True)
        spark = spark_session("bench-spark", kafka=True)
        direct = gatewaylog_options(str(ours.data_dir), topics=[topic])
        cases = {"gatewaylog batch read": lambda: spark_read(spark, "gatewaylog", direct),
                 "kafka source batch read": lambda: spark_read(spark, "kafka", kafka_options(bootstrap, topics=[topic]))}
        spark_read(spark, "gatewaylog", direct)  # warm-up: Python workers started, classes loaded
        samples = peers.Samples("spark", "kafka-python")
        for rep in range(args.repeat):
            order = [*cases.items(), ("kafka-python read", None)]
            if rep % 2:
                order.reverse()
            for case, run in order:
                t0 = time.monotonic()
                if run is None:
                    rows = kafka_python_read(bootstrap, topic)
                    assert rows == args.messages, f"kafka-python read {rows} records of {args.messages}"
                else:
                    run()
                rate = args.messages / (time.monotonic() - t0)
                if run is None:
                    samples.add("gatewaylog batch read", "peer", rate, unit="rows/s")
                else:
                    samples.add(case, "broker", rate, unit="rows/s")
                print(f"  rep {rep + 1} {case:<26} {rate:>12,.0f} rows/s", flush=True)
        if args.archive:
            source = ArchiveSource(topics=[topic], data_dir=str(ours.data_dir))
            rows, seconds = run_archive(spark, source, str(scratch / "table"), str(scratch / "checkpoint"),
                                        once=True, report=lambda line: print(f"  {line}", flush=True))
            samples.add("archive --once (gatewaylog -> parquet)", "broker", rows / seconds, unit="rows/s")
            print(f"  archive --once: {rows:,} rows in {seconds:.1f} s", flush=True)
        spark.stop()
    finally:
        ours.close()
        shutil.rmtree(scratch, ignore_errors=True)
    meta = {"peer": "kafka-python", "unit": "rows/s", "messages": args.messages, "partitions": args.partitions,
            "repeat": args.repeat}
    notes = [f"{args.messages:,} records on {args.partitions} partitions; the peer is one kafka-python consumer "
             "reading the same records from the same broker"]
    return peers.SuiteResult("spark", samples.rows(), notes,
                             {"kafka-python": "one kafka-python consumer on the same broker"}, meta)


def main(argv=None) -> int:
    return peers.suite_main("spark", __doc__, add_arguments, run, argv)

