"""``gateway spark archive|stats``: the pipelines from the command line.

Building the parser imports nothing of pyspark, so ``gateway serve`` never loads it; the
commands import it when they run (``pip install -e '.[spark]'``).
"""
from __future__ import annotations

import argparse
import sys


def add_commands(commands) -> None:
    """Add ``spark archive`` and ``spark stats`` to the ``gateway`` sub-command parser."""
    spark = commands.add_parser("spark", help="Spark pipelines over the log (needs the spark extra)",
                                description="Spark pipelines: archive topics to Parquet, statistics and a report.")
    jobs = spark.add_subparsers(dest="spark_command", metavar="JOB", required=True)

    archive = jobs.add_parser("archive", help="topics and queues -> a Parquet table, exactly once",
                              description="Stream topics (and AMQP queues) into a Parquet table partitioned by "
                                          "topic and date; restart it with the same --checkpoint to go on.")
    _source_arguments(archive, required=True)
    archive.add_argument("--out", required=True, metavar="PATH", help="the Parquet table's directory")
    archive.add_argument("--checkpoint", required=True, metavar="PATH", help="Spark's checkpoint directory")
    archive.add_argument("--once", action="store_true",
                         help="process what is there now and stop (availableNow); default: run until interrupted")
    archive.add_argument("--value-schema", metavar="DDL",
                         help='decode values as JSON into columns, e.g. "id long, name string"')
    archive.add_argument("--starting-offsets", default="earliest", metavar="SPEC",
                         help='where a new job starts: earliest (default), latest or {"topic": {"0": 42}}')
    archive.add_argument("--trigger-seconds", type=float, default=10.0, metavar="S",
                         help="micro-batch interval when not --once (default 10)")
    archive.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="records per micro-batch at most")

    stats = jobs.add_parser("stats", help="per topic/key/minute statistics and an HTML report",
                            description="Counts, bytes, first/last timestamps and per-minute rates, per topic and "
                                        "per key, over an archived table (--table) or topics; written as Parquet "
                                        "and OUT/report.html.")
    stats.add_argument("--table", metavar="PATH", help="an archive table written by `gateway spark archive`")
    _source_arguments(stats, required=False)
    stats.add_argument("--out", required=True, metavar="PATH", help="directory for the results and report.html")

    for job in (archive, stats):
        job.add_argument("--master", default=None, metavar="URL", help="Spark master (default local[2], env SPARK_MASTER)")


def _source_arguments(parser, *, required: bool) -> None:
    parser.add_argument("--topics", action="append", metavar="T[,T...]", help="topics to read (repeatable)")
    parser.add_argument("--queues", action="append", metavar="Q[,Q...]", help="AMQP queues to read (repeatable)")
    parser.add_argument("--vhost", default="/", help="vhost of --queues (default /)")
    where = parser.add_mutually_exclusive_group(required=required)
    where.add_argument("--bootstrap", metavar="HOST:PORT", help="read through Spark's Kafka source (format kafka)")
    where.add_argument("--data-dir", metavar="DIR", help="read the broker's segment files directly (format gatewaylog)")


def run(args: argparse.Namespace) -> int:
    from spark.archive import ArchiveSource, split_names

    source = ArchiveSource(topics=split_names(args.topics), queues=split_names(args.queues), vhost=args.vhost,
                           bootstrap=args.bootstrap, data_dir=args.data_dir)
    if args.spark_command == "stats" and bool(args.table) == bool(args.bootstrap or args.data_dir):
        print("gateway: error: give either --table or --bootstrap/--data-dir with --topics/--queues", file=sys.stderr)
        return 2
    reads_topics = args.spark_command == "archive" or not args.table
    if reads_topics and not (source.topics or source.queues):
        print("gateway: error: name at least one topic (--topics) or queue (--queues)", file=sys.stderr)
        return 2
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("gateway: error: pyspark is not installed: pip install -e '.[spark]'", file=sys.stderr)
        return 1
    from spark.session import spark_session

    # --bootstrap reads through format("kafka"), whose connector Spark fetches (or SPARK_KAFKA_JARS names)
    spark = spark_session(f"gateway-{args.spark_command}", master=args.master, kafka=bool(args.bootstrap))
    try:
        if args.spark_command == "archive":
            return _archive(spark, source, args)
        return _stats(spark, source, args)
    except Exception as exc:  # one line, as `gateway serve` reports errors
        print(f"gateway: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


def _archive(spark, source, args) -> int:
    from spark.archive import run_archive

    source.starting_offsets = args.starting_offsets
    source.max_offsets_per_trigger = args.max_offsets_per_trigger
    rows, seconds = run_archive(spark, source, args.out, args.checkpoint, once=args.once,
                                value_schema=args.value_schema, trigger_seconds=args.trigger_seconds)
    print(f"archived {rows} rows to {args.out} in {seconds:.1f} s", file=sys.stderr)
    return 0


def _stats(spark, source, args) -> int:
    from spark.stats import load_table, load_topics, run_stats

    if args.table:
        df, label = load_table(spark, args.table), f"table {args.table}"
    else:
        df = load_topics(spark, source)
        label = f"topics {', '.join(source.topics + source.queues)} via {args.bootstrap or args.data_dir}"
    result = run_stats(spark, df, args.out, source_label=label)
    total = sum(t["records"] for t in result.topics)
    print(f"{total} records in {len(result.topics)} topic(s); report: {result.report}", file=sys.stderr)
    return 0
