"""Offset bookkeeping of the ``gatewaylog`` data source, in Spark Kafka source terms (no pyspark).

Offsets travel as Spark's Kafka source writes them in its checkpoints and options:
``{"topic": {"0": 23, "1": -2}}``, partition numbers as strings, ``-2`` for earliest and
``-1`` for latest in a starting/ending spec. A position (:data:`Positions`) is the same
with int partitions: ``{"topic": {0: 23}}``, the next offset to read per partition.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

EARLIEST, LATEST = -2, -1

Positions = dict[str, dict[int, int]]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(positions: Positions) -> dict:
    """The Kafka-source JSON shape (string partition keys), sorted so equal offsets compare equal."""
    return {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(positions.items())}


def from_json(doc: dict | str) -> Positions:
    doc = json.loads(doc) if isinstance(doc, str) else doc
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in doc.items()}


def select_topics(available: list[str], *, subscribe: str | None = None, pattern: str | None = None,
                  assign: str | None = None) -> dict[str, list[int] | None]:
    """Topics to read (-> their partitions, or None for all), from exactly one of Kafka's three options."""
    given = [name for name, v in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign)) if v]
    if len(given) != 1:
        raise ValueError("give exactly one of the options subscribe (or topics/queues), subscribePattern "
                         f"and assign; got {given or 'none'}")
    if subscribe:
        return {t.strip(): None for t in subscribe.split(",") if t.strip()}
    if pattern:
        regex = re.compile(pattern)
        return {t: None for t in sorted(available) if regex.fullmatch(t)}
    return {t: [int(p) for p in parts] for t, parts in json.loads(assign).items()}


def resolve(spec: str | None, default: str, earliest: Positions, latest: Positions) -> Positions:
    """A startingOffsets/endingOffsets option ("earliest", "latest" or JSON) as positions.

    Partitions the JSON leaves out take the default; -2 and -1 resolve against the given
    earliest and latest positions (the readable range of each partition now).
    """
    spec = (spec or default).strip()
    if spec in ("earliest", "latest"):
        return {t: dict((earliest if spec == "earliest" else latest)[t]) for t in latest}
    wanted = from_json(spec)
    fallback = resolve(default, default, earliest, latest)
    out = {}
    for topic, parts in latest.items():
        out[topic] = {}
        for partition in parts:
            offset = wanted.get(topic, {}).get(partition, fallback[topic][partition])
            if offset == EARLIEST:
                offset = earliest[topic][partition]
            elif offset == LATEST:
                offset = latest[topic][partition]
            out[topic][partition] = offset
    return out


def plan(start: Positions, end: Positions, earliest: Positions, *, max_records: int | None = None,
         min_partitions: int | None = None) -> list[OffsetRange]:
    """The offset ranges between two positions, split so that Spark reads big partitions in parallel.

    A partition missing from ``start`` (new since) is read from its earliest offset, as
    Spark's Kafka source does. Each range holds at most ``max_records`` offsets
    (maxRecordsPerPartition); with ``min_partitions`` the ranges are cut smaller until
    there are at least that many (minPartitions).
    """
    whole = []
    for topic, parts in sorted(end.items()):
        for partition, stop in sorted(parts.items()):
            begin = start.get(topic, {}).get(partition, earliest.get(topic, {}).get(partition, 0))
            if stop > begin:
                whole.append(OffsetRange(topic, partition, begin, stop))
    limit = max_records or math.inf
    total = sum(r.size for r in whole)
    if min_partitions and total:
        limit = min(limit, max(1, math.ceil(total / min_partitions)))
    out = []
    for r in whole:
        pieces = max(1, math.ceil(r.size / limit))
        step = math.ceil(r.size / pieces)
        out.extend(OffsetRange(r.topic, r.partition, s, min(s + step, r.end)) for s in range(r.start, r.end, step))
    return out


def cap(start: Positions, latest: Positions, earliest: Positions, max_offsets: int) -> Positions:
    """Spark's maxOffsetsPerTrigger: move at most ``max_offsets`` in total, shared in proportion to lag."""
    lag = {}
    for topic, parts in latest.items():
        for partition, stop in parts.items():
            begin = start.get(topic, {}).get(partition, earliest.get(topic, {}).get(partition, 0))
            lag[(topic, partition)] = (begin, max(stop - begin, 0))
    total = sum(n for _, n in lag.values())
    out: Positions = {t: dict(parts) for t, parts in latest.items()}
    if total <= max_offsets:
        return out
    moved = 0
    for (topic, partition), (begin, n) in lag.items():
        out[topic][partition] = begin + math.floor(n * max_offsets / total)
        moved += out[topic][partition] - begin
    if not moved:  # every share rounded down to nothing: let the longest lag go first
        (topic, partition), (begin, n) = max(lag.items(), key=lambda item: item[1][1])
        out[topic][partition] = begin + min(n, max(max_offsets, 1))
    return out
