"""The archive pipeline: topics (AMQP queues included) into a Parquet table, exactly once.

A Structured Streaming query reads the topics, through Spark's Kafka source
(``format("kafka")``, over the network) or the direct ``gatewaylog`` source (the segment
files), and appends to ``OUT/topic=<topic>/date=<yyyy-mm-dd>/*.parquet`` with the columns

    key binary, value binary, [the value's JSON fields, when a schema is given,]
    partition int, offset long, timestamp timestamp, timestampType int,
    headers map<string,binary>, topic string, date date (the record's UTC day)

Exactly once: the offsets of each micro-batch are written to the checkpoint before it runs,
and the file sink lists the files of each committed batch in ``OUT/_spark_metadata``; a job
restarted from its checkpoint replays an unfinished batch into the same slot and skips
committed ones. Read the table with Spark (``spark.read.parquet(OUT)`` honours that log and
ignores files of a batch that died half-written).

The raw ``value`` is kept beside the decoded JSON fields so that the archive loses nothing:
a value that is not JSON of the given schema still has its bytes (and null fields).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from spark.options import gatewaylog_options, kafka_options

FIXED_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers", "date")


@dataclass
class ArchiveSource:
    """Where to read: ``bootstrap`` (Spark's Kafka source) or ``data_dir`` (the gatewaylog source)."""

    topics: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    vhost: str = "/"
    bootstrap: str | None = None
    data_dir: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None

    def options(self) -> tuple[str, dict[str, str]]:
        if bool(self.bootstrap) == bool(self.data_dir):
            raise ValueError("read either through the Kafka protocol (--bootstrap HOST:PORT) or the log files "
                             "(--data-dir DIR), not both or neither")
        extra = {"maxOffsetsPerTrigger": str(self.max_offsets_per_trigger)} if self.max_offsets_per_trigger else {}
        common = dict(topics=self.topics, queues=self.queues, vhost=self.vhost,
                      starting_offsets=self.starting_offsets, include_headers=True, **extra)
        if self.bootstrap:
            return "kafka", kafka_options(self.bootstrap, **common)
        return "gatewaylog", gatewaylog_options(self.data_dir, **common)


def archive_columns(df, value_schema: str | None = None):
    """The Kafka-source rows ``df`` as archive rows (see the module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    columns = [F.col("key"), F.col("value")]
    if value_schema:
        schema = StructType.fromDDL(value_schema)
        clash = sorted(set(schema.fieldNames()) & set(FIXED_COLUMNS))
        if clash:
            raise ValueError(f"the value schema's fields {clash} clash with the archive's own columns; rename them")
        parsed = F.from_json(F.col("value").cast("string"), schema, {"mode": "PERMISSIVE"})
        columns += [parsed.getField(name).alias(name) for name in schema.fieldNames()]
    columns += [
        F.col("partition"), F.col("offset"), F.col("timestamp"), F.col("timestampType"),
        F.map_from_entries("headers").alias("headers"),  # null stays null (a record without headers)
        F.col("topic"), F.to_date("timestamp").alias("date"),
    ]
    return df.select(*columns)


def start_archive(spark, source: ArchiveSource, out: str, checkpoint: str, *, once: bool,
                  value_schema: str | None = None, trigger_seconds: float = 10.0):
    """Start the streaming query; ``once`` processes what is there now (availableNow) and stops."""
    fmt, options = source.options()
    rows = archive_columns(spark.readStream.format(fmt).options(**options).load(), value_schema)
    writer = (rows.writeStream.format("parquet").outputMode("append")
              .option("path", out).option("checkpointLocation", checkpoint)
              .partitionBy("topic", "date").queryName("gateway-archive"))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def progress_dict(progress) -> dict:
    return progress if isinstance(progress, dict) else json.loads(progress.json)


def _offsets(text) -> dict:
    """A progress report's offsets (JSON text, or "null" when a replayed batch fetched none) as a dict."""
    return (json.loads(text) if isinstance(text, str) else text) or {}


def lag(progress: dict) -> int | None:
    """Records between where the batch ended and the latest offsets its sources reported."""
    total, known = 0, False
    for source in progress.get("sources", []):
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        for topic, parts in latest.items():
            for partition, offset in parts.items():
                total += max(int(offset) - int(end.get(topic, {}).get(partition, 0)), 0)
                known = True
    return total if known else None


def describe(progress: dict, total_rows: int) -> str:
    """One line per micro-batch: rows, speed, where each topic got to, and the lag."""
    ends = {}
    for source in progress.get("sources", []):
        for topic, parts in _offsets(source.get("endOffset")).items():
            ends[topic] = sum(int(o) for o in parts.values())
    behind = lag(progress)
    where = ", ".join(f"{t}@{o}" for t, o in sorted(ends.items())) or "-"
    return (f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0)} rows "
            f"({progress.get('processedRowsPerSecond', 0) or 0:.0f}/s), {total_rows} in all; "
            f"offsets {where}; lag {'?' if behind is None else behind}")


def watch(query, report: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
          poll_seconds: float = 1.0) -> int:
    """Report each finished micro-batch until the query stops; return the rows it wrote."""
    seen, total = -1, 0
    try:
        while True:
            stopped = query.awaitTermination(poll_seconds)
            for progress in map(progress_dict, query.recentProgress):
                if progress.get("batchId", -1) > seen:
                    seen = progress["batchId"]
                    total += progress.get("numInputRows", 0)
                    report(describe(progress, total))
            if stopped:
                return total
    except KeyboardInterrupt:
        query.stop()
        return total


def run_archive(spark, source: ArchiveSource, out: str, checkpoint: str, *, once: bool,
                value_schema: str | None = None, trigger_seconds: float = 10.0,
                report: Callable[[str], None] | None = None) -> tuple[int, float]:
    """Run the pipeline with progress lines; return (rows written, seconds)."""
    started = time.monotonic()
    query = start_archive(spark, source, out, checkpoint, once=once, value_schema=value_schema,
                          trigger_seconds=trigger_seconds)
    rows = watch(query, report) if report else watch(query)
    if query.exception() is not None:
        raise RuntimeError(f"the archive query failed: {query.exception()}")
    return rows, time.monotonic() - started


def split_names(values: Iterable[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``: options may be repeated or comma-separated."""
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]
