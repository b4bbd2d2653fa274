"""Topics kept in ZooKeeper: the cluster-mode :class:`~core.metadata.MetadataStore`.

Reads come from the latest :class:`ClusterView` the agent published, plus this broker's own
writes that no view has shown yet (so a topic created here is visible to the next request at
once). Writes go to ZooKeeper; creating a topic picks its replicas from the live brokers.
"""
from __future__ import annotations

import random
import time
import uuid
from dataclasses import replace
from typing import Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from core.cluster.view import ClusterView, NotEnoughBrokersError, TopicAssignment, assign_replicas
from core.cluster.zk import ZkAgent
from core.config import validate_configs
from core.errors import (InvalidPartitionsError, InvalidReplicationFactorError, TopicExistsError,
                         UnknownTopicError)
from core.metadata import MetadataStore, TopicMetadata, altered_configs, check_topic_name


def as_metadata(t: TopicAssignment) -> TopicMetadata:
    return TopicMetadata(t.name, len(t.replicas), dict(t.configs), t.topic_id, t.created_ms, t.replicas)


class ZkMetadataStore(MetadataStore):
    def __init__(self, agent: ZkAgent, default_replication_factor: int = 3, *, clock=time.time):
        self.agent = agent
        self.default_replication_factor = default_replication_factor
        self.clock = clock
        self.view = ClusterView()
        self._mine: dict[str, TopicAssignment | None] = {}  # our writes not yet in a view (None: deleted)
        # get_topic's answers, each beside the (frozen) assignment it was made from: every Produce
        # asks once per topic, and building one (configs copied) cost a few microseconds
        self._metadata: dict[str, tuple[TopicAssignment, TopicMetadata]] = {}

    def update(self, view: ClusterView) -> None:
        self.view = view
        for name, written in list(self._mine.items()):
            seen = view.topics.get(name)
            if (written is None and seen is None) or (written is not None and seen is not None
                                                      and seen.version >= written.version):
                del self._mine[name]

    def assignments(self) -> dict[str, TopicAssignment]:
        out = dict(self.view.topics)
        for name, written in self._mine.items():
            if written is None:
                out.pop(name, None)
            else:
                out[name] = written
        return out

    def assignment(self, name: str) -> TopicAssignment | None:
        """One topic's entry of :meth:`assignments`, without copying them all (hot paths ask)."""
        if name in self._mine:
            return self._mine[name]
        return self.view.topics.get(name)

    def topics(self) -> dict[str, TopicMetadata]:
        return {name: as_metadata(t) for name, t in self.assignments().items()}

    def get_topic(self, name: str) -> TopicMetadata | None:
        t = self.assignment(name)
        if t is None:
            return None
        cache = self._metadata
        hit = cache.get(name)
        if hit is not None and hit[0] is t:  # the same assignment object: nothing about the topic changed
            return hit[1]
        if len(cache) > 2 * len(self.view.topics) + 100:  # entries of deleted topics: start over
            cache.clear()
        entry = cache[name] = (t, as_metadata(t))
        return entry[1]

    def _existing(self, name: str) -> TopicAssignment:
        t = self.assignment(name)
        if t is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return t

    def _racks(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in self.view.brokers.values()}

    def create_topic(self, name, partitions, configs=None, *, replication_factor=-1, assignment=None, follows=None):
        check_topic_name(name)
        if partitions < 1 and not assignment:
            raise InvalidPartitionsError(f"topic {name!r} needs at least 1 partition, not {partitions}")
        clean = validate_configs(configs or {})
        live = self._racks()
        if assignment:
            unknown = sorted({b for a in assignment for b in a} - set(live))
            if unknown:
                raise InvalidReplicationFactorError(f"brokers {unknown} in the assignment of {name!r} are not live")
            replicas = [tuple(a) for a in assignment]
        else:
            rf = replication_factor if replication_factor > 0 else min(self.default_replication_factor, len(live))
            if name.startswith("__") and replication_factor <= 0 and len(live) < self.default_replication_factor:
                # as Kafka's offsets.topic.replication.factor: an internal topic is never created under-replicated
                raise InvalidReplicationFactorError(
                    f"{name} needs {self.default_replication_factor} live brokers (--default-replication-factor); "
                    f"{len(live)} registered so far")
            try:
                replicas = assign_replicas(live, partitions, rf, start=random.randrange(max(len(live), 1)))
            except NotEnoughBrokersError as exc:
                raise InvalidReplicationFactorError(f"topic {name!r}: {exc}") from None
        if name in self.assignments():
            raise TopicExistsError(f"topic {name!r} already exists")
        topic = TopicAssignment(name, tuple(replicas), clean, uuid.uuid4().hex, int(self.clock() * 1000),
                                follows=follows)
        try:
            topic = self.agent.create_topic(topic)
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        self._mine[name] = topic
        return as_metadata(topic)

    def delete_topic(self, name):
        topic = self._existing(name)
        try:
            self.agent.delete_topic(name)
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} does not exist") from None
        self._mine[name] = None
        return as_metadata(topic)

    def _rewrite(self, topic: TopicAssignment, new_partitions: Mapping[int, tuple[int, ...]] = {}) -> TopicMetadata:
        try:
            written = self.agent.set_topic(topic, new_partitions)
        except BadVersionError:
            raise InvalidPartitionsError(f"topic {topic.name!r} was changed by another broker meanwhile; "
                                         "try again") from None
        except NoNodeError:
            raise UnknownTopicError(f"topic {topic.name!r} does not exist") from None
        self._mine[topic.name] = written
        return as_metadata(written)

    def alter_topic_configs(self, name, changes):
        topic = self._existing(name)
        return self._rewrite(replace(topic, configs=altered_configs(topic.configs, changes)))

    def set_partitions(self, name, partitions):
        topic = self._existing(name)
        have = len(topic.replicas)
        if partitions <= have:
            raise InvalidPartitionsError(f"topic {name!r} has {have} partitions; it can only grow, not go to {partitions}")
        rf = len(topic.replicas[0]) if topic.replicas else 1
        try:
            extra = assign_replicas(self._racks(), partitions - have, rf, start=random.randrange(max(len(self.view.brokers), 1)),
                                    first_partition=have)
        except NotEnoughBrokersError as exc:
            raise InvalidReplicationFactorError(f"topic {name!r}: {exc}") from None
        new = dict(enumerate(extra, start=have))
        return self._rewrite(replace(topic, replicas=topic.replicas + tuple(extra)), new)
