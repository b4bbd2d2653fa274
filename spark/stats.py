"""The stats pipeline: a batch job over the archived table or over topics.

Writes, under ``OUT/``:

* ``by_topic/``   topic, records, bytes, keys (distinct), first/last timestamp, records_per_second
* ``by_key/``     topic, key, key_text, records, bytes, first/last timestamp
* ``per_minute/`` topic, minute (UTC), records, bytes, records_per_second
* ``report.html`` one page a person can open: bars per topic, a per-minute rate chart, the
  busiest keys (spark/report.py)

Bytes are key bytes plus value bytes. The input is either the archive's Parquet table
(``--table``, spark/archive.py) or topics read in one batch, through Spark's Kafka source or
the direct gatewaylog source, from earliest to latest.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spark.archive import ArchiveSource
from spark.report import render

TOP_KEYS_PER_TOPIC = 10
MAX_CHART_POINTS = 50_000


@dataclass
class StatsResult:
    out: Path
    topics: list[dict]

    @property
    def report(self) -> Path:
        return self.out / "report.html"


def load_table(spark, table: str):
    return spark.read.parquet(table).select("topic", "key", "value", "timestamp")


def load_topics(spark, source: ArchiveSource):
    fmt, options = source.options()
    options = {**options, "startingOffsets": "earliest", "endingOffsets": "latest"}
    return spark.read.format(fmt).options(**options).load().select("topic", "key", "value", "timestamp")


def compute(df) -> dict:
    """The three aggregate DataFrames of ``df`` (columns topic, key, value, timestamp)."""
    from pyspark.sql import functions as F

    rows = df.select("topic", "key", "timestamp",
                     (F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))).alias("size"))
    common = [F.count(F.lit(1)).alias("records"), F.sum("size").alias("bytes"),
              F.min("timestamp").alias("first_timestamp"), F.max("timestamp").alias("last_timestamp")]
    seconds = F.greatest(F.col("last_timestamp").cast("double") - F.col("first_timestamp").cast("double"), F.lit(1.0))
    by_topic = (rows.groupBy("topic").agg(*common, F.count_distinct("key").alias("keys"))
                .withColumn("records_per_second", F.col("records") / seconds).orderBy("topic"))
    by_key = (rows.groupBy("topic", "key").agg(*common)
              .withColumn("key_text", F.coalesce(F.col("key").cast("string"), F.lit("(null)")))  # UTF-8, for people
              .select("topic", "key", "key_text", "records", "bytes", "first_timestamp", "last_timestamp"))
    per_minute = (rows.groupBy("topic", F.date_trunc("minute", "timestamp").alias("minute"))
                  .agg(F.count(F.lit(1)).alias("records"), F.sum("size").alias("bytes"))
                  .withColumn("records_per_second", F.col("records") / 60.0).orderBy("topic", "minute"))
    return {"by_topic": by_topic, "by_key": by_key, "per_minute": per_minute}


def run_stats(spark, df, out: str, *, source_label: str) -> StatsResult:
    """Aggregate ``df``, write the Parquet outputs and the HTML report under ``out``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out_path = Path(out)
    out_path.mkdir(parents=True, exist_ok=True)
    df = df.persist()
    try:
        frames = compute(df)
        for name, frame in frames.items():
            frame.write.mode("overwrite").parquet(str(out_path / name))
        # The report reads back the small written results, not the input again.
        by_topic = [r.asDict() for r in spark.read.parquet(str(out_path / "by_topic")).orderBy("topic").collect()]
        rank = Window.partitionBy("topic").orderBy(F.desc("records"), F.asc("key_text"))
        top_keys = [r.asDict() for r in (spark.read.parquet(str(out_path / "by_key"))
                                         .withColumn("rank", F.row_number().over(rank))
                                         .where(F.col("rank") <= TOP_KEYS_PER_TOPIC)
                                         .orderBy("topic", "rank").collect())]
        per_minute = [r.asDict() for r in (spark.read.parquet(str(out_path / "per_minute"))
                                           .orderBy(F.desc("minute")).limit(MAX_CHART_POINTS).collect())]
    finally:
        df.unpersist()
    page = render("Topic statistics", source_label, by_topic, top_keys, per_minute)
    (out_path / "report.html").write_text(page, encoding="utf-8")
    return StatsResult(out_path, by_topic)
