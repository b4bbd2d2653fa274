"""``gatewaylog``: a PySpark data source over the broker's segment files, batch and streaming.

For jobs that run beside the data directory and backfills that should not load the broker:
it reads the files directly (spark/logfiles.py), never a socket. Rows, schema and options
are Spark's Kafka source's, so a job switches between ``format("kafka")`` and
``format("gatewaylog")`` by changing the format and adding ``path``::

    from spark.session import register
    register(spark)
    df = (spark.read.format("gatewaylog").option("path", "/var/lib/gateway")
          .option("subscribe", "orders,payments").option("includeHeaders", "true").load())

Options (Kafka's names and meanings unless noted):

* ``path`` (or ``load(PATH)``): the broker's data directory. Spark's executors must see it.
* ``subscribe`` (alias ``topics``), ``subscribePattern`` or ``assign``; ``queues`` (ours):
  AMQP queue names of ``vhost`` (default ``/``), turned into their topics by
  core.names.queue_topic, read as if subscribed.
* ``startingOffsets`` (batch default earliest, streaming default latest), ``endingOffsets``
  (batch only, default latest): ``earliest``, ``latest`` or ``{"topic": {"0": 23}}`` with -2/-1.
* ``includeHeaders`` (default false, as Kafka's): adds the ``headers`` column.
* ``failOnDataLoss`` (default true): fail, rather than skip, when offsets to read were
  deleted by retention meanwhile.
* ``maxRecordsPerPartition`` (default 200000 here; Kafka's has none) and ``minPartitions``:
  a topic partition is read by several Spark tasks, by offset range.
* ``maxOffsetsPerTrigger``: streaming, at most this many records per micro-batch.

"Latest" is what the broker's ``high-watermarks.json`` says is committed (written every
second), and never past the last complete batch on disk. ``kafka.*`` options are ignored, so
the option map of spark.options.kafka_options works here too.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from core.hw_checkpoint import FILE as HW_FILE
from core.hw_checkpoint import read_high_watermarks
from core.names import DEFAULT_VHOST, queue_topic
from spark import offsets
from spark.logfiles import read_batches, readable_range
from spark.offsets import OffsetRange, Positions

NAME = "gatewaylog"
DEFAULT_MAX_RECORDS_PER_PARTITION = 200_000
_ROWS_PER_ARROW_BATCH = 10_000

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
KAFKA_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def kafka_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source (KafkaRecordToRowConverter), with or without headers."""
    return StructType(KAFKA_FIELDS + ([StructField("headers", HEADERS_TYPE)] if include_headers else []))


def _flag(value: str | None, default: bool) -> bool:
    return default if value is None else value.strip().lower() == "true"


def _number(value: str | None) -> int | None:
    return None if value in (None, "") else int(value)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The options, parsed once on the driver; pickled to the executors with each partition."""

    data_dir: str
    subscribe: str | None
    pattern: str | None
    assign: str | None
    starting: str | None
    ending: str | None
    include_headers: bool
    fail_on_data_loss: bool
    max_records: int | None
    min_partitions: int | None
    max_offsets: int | None

    @classmethod
    def parse(cls, options) -> "Settings":
        path = options.get("path")
        if not path:
            raise ValueError(f"the {NAME} data source needs the broker's data directory: .option('path', DIR) or .load(DIR)")
        topics = [t.strip() for t in (options.get("subscribe") or options.get("topics") or "").split(",") if t.strip()]
        vhost = options.get("vhost") or DEFAULT_VHOST
        topics += [queue_topic(vhost, q.strip()) for q in (options.get("queues") or "").split(",") if q.strip()]
        return cls(
            data_dir=path,
            subscribe=",".join(topics) or None,
            pattern=options.get("subscribePattern"),
            assign=options.get("assign"),
            starting=options.get("startingOffsets"),
            ending=options.get("endingOffsets"),
            include_headers=_flag(options.get("includeHeaders"), False),
            fail_on_data_loss=_flag(options.get("failOnDataLoss"), True),
            max_records=_number(options.get("maxRecordsPerPartition")) or DEFAULT_MAX_RECORDS_PER_PARTITION,
            min_partitions=_number(options.get("minPartitions")),
            max_offsets=_number(options.get("maxOffsetsPerTrigger")),
        )

    def available(self, *, streaming: bool) -> tuple[Positions, Positions]:
        """(earliest, latest) readable offset of every selected partition, now.

        A batch read of a topic the broker has not checkpointed is an error; a stream
        waits for it (a topic may be created after the query starts).
        """
        hws = read_high_watermarks(self.data_dir)
        if hws is None:
            raise FileNotFoundError(
                f"{self.data_dir}/{HW_FILE} does not exist: is this a broker data directory? A running broker "
                "writes it within a second of starting, and a cleanly stopped one leaves it behind")
        selected = offsets.select_topics(list(hws), subscribe=self.subscribe, pattern=self.pattern, assign=self.assign)
        earliest: Positions = {}
        latest: Positions = {}
        for topic, partitions in selected.items():
            known = hws.get(topic)
            if known is None:
                if streaming:
                    continue
                raise ValueError(f"topic {topic!r} is not in {self.data_dir}/{HW_FILE}: it does not exist "
                                 "(or was created less than a second ago)")
            for partition in (sorted(known) if partitions is None else partitions):
                first, end = readable_range(self.data_dir, topic, partition, known.get(partition, 0))
                earliest.setdefault(topic, {})[partition] = first
                latest.setdefault(topic, {})[partition] = end
        return earliest, latest

    def plan(self, start: Positions, end: Positions, earliest: Positions) -> list["LogPartition"]:
        ranges = offsets.plan(start, end, earliest, max_records=self.max_records, min_partitions=self.min_partitions)
        return [LogPartition(r) for r in ranges]


class LogPartition(InputPartition):
    """One offset range of one topic partition: the work of one Spark task."""

    def __init__(self, offset_range: OffsetRange):
        super().__init__(offset_range)
        self.range = offset_range


def read_range(settings: Settings, r: OffsetRange) -> Iterator:
    """The rows of ``r`` as Arrow record batches, in the Kafka source's schema (runs on executors)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(kafka_schema(settings.include_headers), timezone="UTC")
    keys, values, offs, stamps, types, headers = [], [], [], [], [], []

    def arrow_batch():
        n = len(offs)
        columns = [
            pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array([r.topic] * n, pa.string()),
            pa.array([r.partition] * n, pa.int32()), pa.array(offs, pa.int64()),
            pa.array(stamps, schema.field("timestamp").type), pa.array(types, pa.int32()),
        ]
        if settings.include_headers:
            columns.append(pa.array(headers, schema.field("headers").type))
        for column in (keys, values, offs, stamps, types, headers):
            column.clear()
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    for batch in read_batches(settings.data_dir, r.topic, r.partition, r.start, r.end,
                              fail_on_data_loss=settings.fail_on_data_loss):
        timestamp_type = batch.timestamp_type
        for record in batch.records:
            if not r.start <= record.offset < r.end:
                continue
            keys.append(record.key)
            values.append(record.value)
            offs.append(record.offset)
            stamps.append(record.timestamp * 1000)  # ms -> the microseconds of Spark's TimestampType
            types.append(timestamp_type)
            if settings.include_headers:  # Kafka's source gives null, not [], for a record without headers
                headers.append([{"key": h.key, "value": h.value} for h in record.headers] if record.headers else None)
        if len(offs) >= _ROWS_PER_ARROW_BATCH:
            yield arrow_batch()
    if offs:
        yield arrow_batch()


class GatewayLogBatchReader(DataSourceReader):
    def __init__(self, settings: Settings):
        self.settings = settings

    def partitions(self) -> list[LogPartition]:
        earliest, latest = self.settings.available(streaming=False)
        start = offsets.resolve(self.settings.starting, "earliest", earliest, latest)
        end = offsets.resolve(self.settings.ending, "latest", earliest, latest)
        end = {t: {p: min(o, latest[t][p]) for p, o in parts.items()} for t, parts in end.items()}
        return self.settings.plan(start, end, earliest)

    def read(self, partition: LogPartition):
        return read_range(self.settings, partition.range)


class GatewayLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the log; offsets are Kafka-source JSON ({"topic": {"0": next offset}})."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._target: Positions | None = None  # Trigger.AvailableNow: never read past what was there at start

    def initialOffset(self) -> dict:
        earliest, latest = self.settings.available(streaming=True)
        return offsets.to_json(offsets.resolve(self.settings.starting, "latest", earliest, latest))

    def _latest(self) -> tuple[Positions, Positions]:
        earliest, latest = self.settings.available(streaming=True)
        if self._target is not None:
            latest = {t: {p: min(o, self._target[t][p]) for p, o in parts.items() if p in self._target.get(t, {})}
                      for t, parts in latest.items()}
        return earliest, latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        earliest, latest = self._latest()
        begin = offsets.from_json(start)
        for topic, parts in latest.items():  # offsets never go back, whatever the files say
            for partition, end in parts.items():
                parts[partition] = max(end, begin.get(topic, {}).get(partition, end))
        if isinstance(limit, ReadMaxRows):
            latest = offsets.cap(begin, latest, earliest, limit.max_rows)
        merged = {t: dict(parts) for t, parts in begin.items()}  # keep partitions that vanished
        for topic, parts in latest.items():
            merged.setdefault(topic, {}).update(parts)
        return offsets.to_json(merged)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.max_offsets) if self.settings.max_offsets else ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        return offsets.to_json(self.settings.available(streaming=True)[1])

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.settings.available(streaming=True)[1]

    def partitions(self, start: dict, end: dict) -> list[LogPartition]:
        earliest, _ = self.settings.available(streaming=True)
        return self.settings.plan(offsets.from_json(start), offsets.from_json(end), earliest)

    def read(self, partition: LogPartition):
        return read_range(self.settings, partition.range)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: the broker keeps the log by its own retention, not by readers


class GatewayLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return kafka_schema(_flag(self.options.get("includeHeaders"), False))

    def reader(self, schema: StructType) -> GatewayLogBatchReader:
        return GatewayLogBatchReader(Settings.parse(self.options))

    def streamReader(self, schema: StructType) -> GatewayLogStreamReader:
        return GatewayLogStreamReader(Settings.parse(self.options))
