"""A streams group's topology (KIP-1071) and what the broker makes of it against the topics that exist.

The first member of a Kafka Streams application to join sends its topology: subtopologies, each
with its source topics (names or regexes), the repartition topics it writes to and reads from,
its state changelog topics and its copartition groups. The broker *configures* it:

* every source topic must exist (a regex must match one topic at least), or the group is
  ``MISSING_SOURCE_TOPICS`` and gets no tasks;
* a repartition topic without a fixed partition count gets the largest partition count of the
  topics feeding the subtopology that writes to it (repeated until nothing changes, as
  subtopologies chain); the topics of a copartition group must agree, a repartition topic in one
  takes the group's count, source topics that disagree make ``INCORRECTLY_PARTITIONED_TOPICS``;
* a subtopology has as many tasks as its largest source (or repartition source) topic has
  partitions; its changelog topics get that many partitions;
* internal topics (repartition and changelog) that do not exist are created by the broker, with
  the configs the client sent; until they are there the group is ``MISSING_INTERNAL_TOPICS``.

Pure functions over plain values; ``core.groups.streams_group`` runs the group.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS = 0, 1, 2
MISSING_INTERNAL_TOPICS, SHUTDOWN_APPLICATION = 3, 4
INTERNAL = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass
class TopicInfo:
    name: str
    partitions: int = 0  # 0: not fixed by the application
    replication_factor: int = 0  # 0: the broker's default
    configs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> list:
        return [self.name, self.partitions, self.replication_factor, self.configs]

    @classmethod
    def from_json(cls, doc: list) -> "TopicInfo":
        return cls(doc[0], doc[1], doc[2], dict(doc[3]))


@dataclass
class Subtopology:
    subtopology_id: str
    source_topics: list[str] = field(default_factory=list)
    source_regexes: list[str] = field(default_factory=list)
    repartition_sinks: list[str] = field(default_factory=list)
    repartition_sources: list[TopicInfo] = field(default_factory=list)
    changelogs: list[TopicInfo] = field(default_factory=list)
    copartition_groups: list[list[str]] = field(default_factory=list)  # topic names

    def to_json(self) -> dict:
        return {"id": self.subtopology_id, "sources": self.source_topics, "regexes": self.source_regexes,
                "sinks": self.repartition_sinks, "repartition": [t.to_json() for t in self.repartition_sources],
                "changelogs": [t.to_json() for t in self.changelogs], "copartition": self.copartition_groups}

    @classmethod
    def from_json(cls, doc: dict) -> "Subtopology":
        return cls(doc["id"], list(doc["sources"]), list(doc["regexes"]), list(doc["sinks"]),
                   [TopicInfo.from_json(t) for t in doc["repartition"]],
                   [TopicInfo.from_json(t) for t in doc["changelogs"]], [list(g) for g in doc["copartition"]])


@dataclass
class Topology:
    epoch: int
    subtopologies: list[Subtopology]

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "subtopologies": [s.to_json() for s in self.subtopologies]}

    @classmethod
    def from_json(cls, doc: dict) -> "Topology":
        return cls(doc["epoch"], [Subtopology.from_json(s) for s in doc["subtopologies"]])


@dataclass
class Configured:
    """What a topology comes to against the existing topics."""
    tasks: dict[str, int]  # subtopology id -> task count; empty unless ready
    sources: dict[str, list[str]]  # subtopology id -> its (resolved) source and repartition source topics
    status: list[tuple[int, str]]  # (status code, detail)
    to_create: list[TopicInfo]  # internal topics missing, with the partition counts they need
    partitions: dict[str, int]  # every topic the topology involves that exists -> partitions (the epoch input)

    @property
    def ready(self) -> bool:
        return not self.status


def _sources(sub: Subtopology, topics: dict[str, int]) -> tuple[list[str], list[str]]:
    """(existing source topic names, what is missing) of a subtopology, regexes resolved."""
    found, missing = [], []
    for name in sub.source_topics:
        (found if name in topics else missing).append(name)
    for regex in sub.source_regexes:
        try:
            pattern = re.compile(regex)
        except re.error:
            missing.append(regex)
            continue
        matched = sorted(t for t in topics if t not in INTERNAL and pattern.fullmatch(t))
        found.extend(matched)
        if not matched:
            missing.append(regex)
    return found, missing


def configure(topology: Topology, topics: dict[str, int]) -> Configured:
    """Resolve ``topology`` against ``topics`` (name -> partition count of every existing topic)."""
    status: list[tuple[int, str]] = []
    sources: dict[str, list[str]] = {}
    missing: list[str] = []
    for sub in topology.subtopologies:
        found, lost = _sources(sub, topics)
        sources[sub.subtopology_id] = found
        missing.extend(lost)
    involved = {t: topics[t] for ts in sources.values() for t in ts}
    for sub in topology.subtopologies:
        for info in sub.repartition_sources + sub.changelogs:
            if info.name in topics:
                involved[info.name] = topics[info.name]
    if missing:
        status.append((MISSING_SOURCE_TOPICS, f"Source topics {', '.join(sorted(set(missing)))} are missing."))
        return Configured({}, sources, status, [], involved)
    # partition counts of repartition topics: fixed, or derived from what feeds their writer
    counts = {t: topics[t] for ts in sources.values() for t in ts}
    for sub in topology.subtopologies:
        for info in sub.repartition_sources:
            if info.partitions > 0:
                counts[info.name] = info.partitions
    changed = True
    while changed:
        changed = False
        for sub in topology.subtopologies:
            feeding = [counts[t] for t in sources[sub.subtopology_id] + [r.name for r in sub.repartition_sources]
                       if t in counts]
            if not feeding:
                continue
            for sink in sub.repartition_sinks:
                if counts.get(sink, 0) < max(feeding) and not _fixed(topology, sink):
                    counts[sink] = max(feeding)
                    changed = True
    wrong: list[str] = []
    for sub in topology.subtopologies:
        for group in sub.copartition_groups:
            fixed = {counts[t] for t in group if t in counts and (t in topics and t not in _repartition(topology)
                                                                   or _fixed(topology, t))}
            if len(fixed) > 1:
                wrong.extend(t for t in group)
            elif fixed:
                for t in group:
                    if t in _repartition(topology) and not _fixed(topology, t):
                        counts[t] = next(iter(fixed))
    tasks: dict[str, int] = {}
    for sub in topology.subtopologies:
        names = sources[sub.subtopology_id] + [r.name for r in sub.repartition_sources]
        tasks[sub.subtopology_id] = max((counts.get(t, 0) for t in names), default=0)
        sources[sub.subtopology_id] = names
    to_create: list[TopicInfo] = []
    for sub in topology.subtopologies:
        wanted = [(r, counts.get(r.name, 0)) for r in sub.repartition_sources]
        wanted += [(c, tasks[sub.subtopology_id]) for c in sub.changelogs]
        for info, n in wanted:
            if n < 1:
                wrong.append(info.name)  # nothing feeds it: no count can be derived
            elif info.name not in topics:
                to_create.append(TopicInfo(info.name, n, info.replication_factor, info.configs))
            elif topics[info.name] != n:
                wrong.append(info.name)
    if wrong:
        status.append((INCORRECTLY_PARTITIONED_TOPICS,
                       f"Following topics are not copartitioned or have the wrong number of partitions: "
                       f"{', '.join(sorted(set(wrong)))}."))
    if to_create:
        status.append((MISSING_INTERNAL_TOPICS,
                       f"Internal topics are missing: {', '.join(sorted(t.name for t in to_create))}."))
    return Configured(tasks if not status else {}, sources, status, to_create, involved)


def _repartition(topology: Topology) -> set[str]:
    return {r.name for s in topology.subtopologies for r in s.repartition_sources}


def _fixed(topology: Topology, name: str) -> bool:
    return any(r.name == name and r.partitions > 0 for s in topology.subtopologies for r in s.repartition_sources)
