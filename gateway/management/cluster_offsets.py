"""Offsets of partitions this broker does not hold, asked of their leaders (ListOffsets over the
brokers' own connections), for the management API's topics and groups in a cluster: a topic's
partitions and message count, and a group's lag, are then the same on every broker.

A leader that does not answer within :data:`TIMEOUT_S` is named in the log and its partitions
are left out: the figures are unknown then, not made up.
"""
from __future__ import annotations

import logging

from twisted.internet import defer

from gateway.logs import fields
from gateway.management import views

log = logging.getLogger(__name__)

LIST_OFFSETS = 2
LATEST, EARLIEST = -1, -2  # ListOffsets' timestamps: the high watermark (or the LSO), the log start
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
TIMEOUT_S = 5.0


def elsewhere(broker, keys) -> dict[int, list[tuple[str, int]]]:
    """The partitions of ``keys`` this broker does not lead, by their leader (none: left out)."""
    cluster, me, by_leader = broker.cluster, broker.settings.node_id, {}
    for name, index in keys:
        state = cluster.view.state(name, index)
        if state is not None and state.leader >= 0 and state.leader != me:
            by_leader.setdefault(state.leader, []).append((name, index))
    return by_leader


@defer.inlineCallbacks
def ask(broker, by_leader: dict[int, list[tuple[str, int]]], timestamp: int = LATEST,
        isolation: int = READ_UNCOMMITTED):
    """{(topic, partition): offset} from each leader: with LATEST the high watermark (the last
    stable offset under READ_COMMITTED), with EARLIEST the log start offset."""
    out: dict[tuple[str, int], int] = {}
    for leader, keys in sorted(by_leader.items()):
        topics: dict[str, list[int]] = {}
        for name, index in keys:
            topics.setdefault(name, []).append(index)
        request = {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": name, "partitions": [{"partition_index": i, "current_leader_epoch": -1, "timestamp": timestamp}
                                          for i in sorted(parts)]} for name, parts in sorted(topics.items())]}
        try:
            answer = yield broker.kafka.peers.call(leader, LIST_OFFSETS, request, timeout=TIMEOUT_S)
        except Exception as exc:  # (PeerUnavailable and kin) these partitions' figures stay unknown
            log.warning("management API: no offsets from broker %d: %s", leader, exc, extra=fields(node=leader))
            continue
        for t in answer.topics:
            for p in t.partitions:
                if not p.error_code:
                    out[(t.name, p.partition_index)] = p.offset
    return out


@defer.inlineCallbacks
def figures(broker, keys):
    """{(topic, partition): {log_start_offset, high_watermark, last_stable_offset}} for the
    partitions of ``keys`` held by no log here, asked of their leaders."""
    missing = [key for key in keys if broker.kafka.partition(*key) is None]
    by_leader = elsewhere(broker, missing)
    if not by_leader:
        return {}
    starts = yield ask(broker, by_leader, EARLIEST)
    ends = yield ask(broker, by_leader, LATEST)
    stable = yield ask(broker, by_leader, LATEST, READ_COMMITTED)
    return {key: {"log_start_offset": starts[key], "high_watermark": ends[key],
                  "last_stable_offset": stable.get(key, ends[key])}
            for key in missing if key in starts and key in ends}


def topics(broker):
    """Every topic with its message count (a Deferred in a cluster: partitions held elsewhere are
    counted from their leaders' offsets)."""
    if broker.cluster is None:
        return views.topics(broker)
    keys = [(name, p) for name, md in broker.kafka.logs.store.topics().items() for p in range(md.partitions)]
    return figures(broker, keys).addCallback(lambda remote: views.topics(broker, remote))


def topic(broker, md):
    """One topic with every partition's offsets (from their leaders for those held elsewhere)."""
    if broker.cluster is None:
        return views.topic(broker, md)
    keys = [(md.name, p) for p in range(md.partitions)]
    return figures(broker, keys).addCallback(lambda remote: views.topic(broker, md, remote=remote))
