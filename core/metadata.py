"""Cluster metadata: which topics exist, their partition counts and configs.

:class:`MetadataStore` is the seam: single-node mode uses :class:`LocalMetadataStore`
(a JSON file in the data directory); cluster mode will put the same operations over
ZooKeeper. Callers go through the interface only.

``<data-dir>/metadata.json``::

    {"version": 1,
     "topics": {"orders": {"partitions": 3, "configs": {"retention.ms": "3600000"},
                           "topic_id": "<32 hex digits>", "created_ms": 1700000000000}}}

A change is one JSON line appended to ``<data-dir>/metadata.journal`` and fsync'd (the topic's
whole new state, or its deletion), so creating the 10,000th topic costs what the first did; a
whole-file rewrite per change made declaring N queues quadratic. Start-up replays the journal
over the snapshot and ignores a torn last line (a crash mid-append: that change was never
acknowledged). When the journal outgrows the snapshot, and at start-up, the snapshot is
rewritten atomically (core.checkpoint) and the journal emptied; replaying a journal that a crash
left behind a newer snapshot is harmless, because each line is a whole state, not a delta.
"""
from __future__ import annotations

import abc
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from core.checkpoint import fsync_dir, write_atomic, write_synced
from core.config import validate_configs
from core.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249


def check_topic_name(name: str) -> None:
    """Kafka's rules for topic names; raise InvalidTopicError saying which one is broken."""
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_LENGTH}")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'")


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_id: str = ""
    created_ms: int = 0
    # cluster mode: the broker ids holding each partition, preferred leader first; () in single-node mode
    replicas: tuple[tuple[int, ...], ...] = ()

    def is_replica(self, partition: int, node_id: int) -> bool:
        return not self.replicas or (partition < len(self.replicas) and node_id in self.replicas[partition])


def altered_configs(configs: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """``configs`` with ``changes`` applied (None removes a key) and validated."""
    out = dict(configs)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return validate_configs(out)


class MetadataStore(abc.ABC):
    """Topics and their settings. Implementations are safe to call from one thread."""

    @abc.abstractmethod
    def topics(self) -> dict[str, TopicMetadata]: ...

    def get_topic(self, name: str) -> TopicMetadata | None:
        return self.topics().get(name)

    @abc.abstractmethod
    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None, *,
                     replication_factor: int = -1, assignment: list[tuple[int, ...]] | None = None,
                     follows: str | None = None) -> TopicMetadata:
        """``replication_factor`` -1 means the store's default; ``assignment`` lists each partition's brokers;
        ``follows`` names a topic whose partition 0's leader should also lead this one's (cluster mode)."""

    @abc.abstractmethod
    def delete_topic(self, name: str) -> TopicMetadata: ...

    @abc.abstractmethod
    def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> TopicMetadata:
        """Set keys to values; a value of None removes the key (back to the default)."""

    @abc.abstractmethod
    def set_partitions(self, name: str, partitions: int) -> TopicMetadata:
        """Grow the topic to ``partitions`` partitions (never shrink)."""

    def partition_total(self) -> int:
        """Partitions of every topic together (the broker's partition budget counts them)."""
        return sum(t.partitions for t in self.topics().values())


class LocalMetadataStore(MetadataStore):
    FILE = "metadata.json"
    JOURNAL = "metadata.journal"
    VERSION = 1
    MIN_COMPACT_BYTES = 1 << 16  # below this a journal is never worth a snapshot rewrite

    def __init__(self, data_dir: Path, *, clock=time.time):
        self.path = Path(data_dir) / self.FILE
        self.journal_path = Path(data_dir) / self.JOURNAL
        self.clock = clock
        self._lock = threading.Lock()
        self._topics = self._read()
        self._replay_journal()
        self._partitions = sum(t.partitions for t in self._topics.values())  # kept by _put and delete_topic
        self._journal_fd: int | None = None
        self._snapshot_bytes = self._compact() if self.journal_path.exists() else self._snapshot_size()

    @staticmethod
    def _topic_doc(t: TopicMetadata) -> dict:
        return {"partitions": t.partitions, "configs": dict(t.configs), "topic_id": t.topic_id,
                "created_ms": t.created_ms}

    @staticmethod
    def _topic_of(name: str, t: dict) -> TopicMetadata:
        return TopicMetadata(name, t["partitions"], dict(t.get("configs", {})), t.get("topic_id", ""),
                             t.get("created_ms", 0))

    def _read(self) -> dict[str, TopicMetadata]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.path} is not valid JSON ({exc}); restore it from a backup") from None
        if doc.get("version") != self.VERSION:
            raise ValueError(f"{self.path} has version {doc.get('version')!r}; this broker reads version {self.VERSION}")
        return {name: self._topic_of(name, t) for name, t in doc.get("topics", {}).items()}

    def _replay_journal(self) -> None:
        try:
            lines = self.journal_path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return
        # Only the last line may be torn (no newline yet: its append never returned); a bad line
        # before it is damage this store did not make.
        for number, line in enumerate(lines[:-1], 1):
            try:
                change = json.loads(line)
                if "delete" in change:
                    self._topics.pop(change["delete"], None)
                else:
                    self._topics[change["name"]] = self._topic_of(change["name"], change["topic"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{self.journal_path} line {number} is damaged ({exc!r}); restore the data "
                                 "directory from a backup") from None

    def _snapshot_size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def _compact(self) -> int:
        """Write the whole state as the snapshot, then empty the journal; the snapshot's size."""
        doc = {"version": self.VERSION, "topics": {t.name: self._topic_doc(t) for t in self._topics.values()}}
        # compact separators: with indent, json falls back to its pure-Python encoder
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        write_atomic(self.path, data)
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None
        try:
            self.journal_path.unlink()
        except FileNotFoundError:
            pass
        return len(data)

    def _record(self, change: dict) -> None:
        """Make one change durable (a journal line, fsync'd) before the caller applies it in memory."""
        if self._journal_fd is None:
            self._journal_fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            fsync_dir(self.journal_path.parent)
        write_synced(self._journal_fd, json.dumps(change, sort_keys=True, separators=(",", ":")).encode() + b"\n")

    def _maybe_compact(self) -> None:
        if os.fstat(self._journal_fd).st_size > max(self.MIN_COMPACT_BYTES, self._snapshot_bytes):
            self._snapshot_bytes = self._compact()

    def _put(self, topic: TopicMetadata) -> None:
        self._record({"name": topic.name, "topic": self._topic_doc(topic)})
        old = self._topics.get(topic.name)
        self._partitions += topic.partitions - (old.partitions if old is not None else 0)
        self._topics[topic.name] = topic
        self._maybe_compact()

    def _existing(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return topic

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self._topics)

    def get_topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)  # not through topics(): a copy of every topic per lookup

    def partition_total(self) -> int:
        return self._partitions

    def create_topic(self, name, partitions, configs=None, *, replication_factor=-1, assignment=None, follows=None):
        check_topic_name(name)
        if replication_factor > 1 or any(len(a) != 1 for a in assignment or ()):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor if replication_factor > 1 else 'above 1'} is larger than "
                "the 1 broker of this single-node cluster; start brokers with --zookeeper for replication")
        if partitions < 1:
            raise InvalidPartitionsError(f"topic {name!r} needs at least 1 partition, not {partitions}")
        clean = validate_configs(configs or {})
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            topic = TopicMetadata(name, partitions, clean, uuid.uuid4().hex, int(self.clock() * 1000))
            self._put(topic)
        return topic

    def delete_topic(self, name):
        with self._lock:
            topic = self._existing(name)
            self._record({"delete": name})
            del self._topics[name]
            self._partitions -= topic.partitions
            self._maybe_compact()
        return topic

    def alter_topic_configs(self, name, changes):
        with self._lock:
            topic = self._existing(name)
            topic = replace(topic, configs=altered_configs(topic.configs, changes))
            self._put(topic)
        return topic

    def set_partitions(self, name, partitions):
        with self._lock:
            topic = self._existing(name)
            if partitions <= topic.partitions:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {topic.partitions} partitions; it can only grow, not go to {partitions}"
                )
            topic = replace(topic, partitions=partitions)
            self._put(topic)
        return topic
