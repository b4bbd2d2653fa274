"""What a broker knows about its cluster, as immutable values, and the controller's decisions.

A :class:`ClusterView` is a snapshot of ZooKeeper: live brokers, the controller, every topic's
replica assignment and every partition's leader/ISR/leader epoch. The ZooKeeper agent
(core.cluster.zk) builds one after each change and hands it to the broker's own thread, which
compares it with the previous one; nothing else is shared between the two threads.

The functions at the bottom are the controller's choices (pure, so they are tested without
ZooKeeper): spreading replicas over brokers, and electing a leader after a broker is lost.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

NO_LEADER = -1
# outcomes of an ElectLeaders request (KIP-460) for one partition
ELECTED, NOT_NEEDED, NOT_AVAILABLE, UNKNOWN, NOT_CONTROLLER = (
    "elected", "not_needed", "not_available", "unknown", "not_controller")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int  # the advertised Kafka listener
    amqp_host: str = ""
    amqp_port: int = -1
    rack: str | None = None
    stream_host: str = ""  # the advertised RabbitMQ stream listener (-1: none)
    stream_port: int = -1
    stream_tls_host: str = ""  # the advertised stream-over-TLS listener (-1: none), told to TLS clients
    stream_tls_port: int = -1
    amqp_mode: str = ""  # its --amqp-cluster-mode ("" from a broker that does not say)

    def to_json(self) -> dict:
        return {"host": self.host, "port": self.port, "amqp_host": self.amqp_host, "amqp_port": self.amqp_port,
                "stream_host": self.stream_host, "stream_port": self.stream_port,
                "stream_tls_host": self.stream_tls_host, "stream_tls_port": self.stream_tls_port,
                "rack": self.rack, "amqp_cluster_mode": self.amqp_mode, "version": 1}

    @classmethod
    def from_json(cls, node_id: int, doc: Mapping) -> "BrokerInfo":
        return cls(node_id, doc["host"], int(doc["port"]), doc.get("amqp_host", ""), int(doc.get("amqp_port", -1)),
                   doc.get("rack"), doc.get("stream_host", ""), int(doc.get("stream_port", -1)),
                   doc.get("stream_tls_host", ""), int(doc.get("stream_tls_port", -1)),
                   str(doc.get("amqp_cluster_mode") or ""))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's LeaderAndIsr: ``version`` is the znode version, for conditional updates."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    version: int = -1

    def to_json(self) -> dict:
        return {"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                "controller_epoch": self.controller_epoch, "version": 1}

    @classmethod
    def from_json(cls, doc: Mapping, version: int) -> "PartitionState":
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(b) for b in doc["isr"]),
                   int(doc.get("controller_epoch", 0)), version)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    name: str
    replicas: tuple[tuple[int, ...], ...]  # per partition; the first replica is the preferred leader
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_id: str = ""
    created_ms: int = 0
    version: int = -1
    # leadership colocated with partition 0 of this topic (AMQP queues follow the AMQP home, see gateway.cluster)
    follows: str | None = None

    def to_json(self) -> dict:
        doc = {"version": 1, "partitions": {str(p): list(r) for p, r in enumerate(self.replicas)},
               "configs": dict(self.configs), "topic_id": self.topic_id, "created_ms": self.created_ms}
        if self.follows:
            doc["follows"] = self.follows
        return doc

    @classmethod
    def from_json(cls, name: str, doc: Mapping, version: int) -> "TopicAssignment":
        parts = doc.get("partitions", {})
        replicas = tuple(tuple(int(b) for b in parts[str(p)]) for p in range(len(parts)))
        return cls(name, replicas, dict(doc.get("configs", {})), doc.get("topic_id", ""),
                   int(doc.get("created_ms", 0)), version, doc.get("follows"))


@dataclass(frozen=True)
class Reassignment:
    """A partition moving from ``original`` replicas to ``target`` ones (KIP-455's adding/removing)."""
    topic: str
    partition: int
    target: tuple[int, ...]
    original: tuple[int, ...] = ()  # the replicas before it began: where a cancellation goes back to


@dataclass(frozen=True)
class ClusterView:
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    controller_id: int = NO_LEADER
    topics: Mapping[str, TopicAssignment] = field(default_factory=dict)
    states: Mapping[tuple[str, int], PartitionState] = field(default_factory=dict)
    reassignments: Mapping[tuple[str, int], Reassignment] = field(default_factory=dict)
    # documents every broker shares (client quotas, group configs): path -> (JSON document, version)
    configs: Mapping[str, tuple[object, int]] = field(default_factory=dict)

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.states.get((topic, partition))

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        t = self.topics.get(topic)
        return t.replicas[partition] if t and partition < len(t.replicas) else ()


class NotEnoughBrokersError(Exception):
    pass


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
                    start: int = 0, first_partition: int = 0) -> list[tuple[int, ...]]:
    """Spread ``partitions`` × ``replication_factor`` replicas over ``brokers`` (id -> rack).

    Kafka's scheme: partition p's leader is broker (start + p) in a list that alternates racks,
    its followers the next brokers in that list, shifted per round so that followers spread too.
    With racks, the alternating list puts consecutive replicas on different racks.
    """
    if replication_factor < 1:
        raise NotEnoughBrokersError(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > len(brokers):
        raise NotEnoughBrokersError(f"replication factor {replication_factor} is larger than the "
                                    f"{len(brokers)} live broker(s)")
    ordered = _rack_alternating(brokers)
    n = len(ordered)
    out = []
    for p in range(first_partition, first_partition + partitions):
        first = (start + p) % n
        shift = 1 + (p // n) % max(n - 1, 1)
        chosen = [ordered[first]]
        for r in range(1, replication_factor):
            chosen.append(ordered[(first + shift * r) % n] if n > 1 else ordered[first])
        # a shift that wraps onto a broker already chosen: fall back to the next unused ones
        if len(set(chosen)) < replication_factor:
            rest = [b for b in ordered[first:] + ordered[:first] if b not in chosen[:1]]
            chosen = [chosen[0]] + rest[: replication_factor - 1]
        out.append(tuple(chosen))
    return out


def _rack_alternating(brokers: Mapping[int, str | None]) -> list[int]:
    by_rack: dict[str | None, list[int]] = {}
    for node in sorted(brokers):
        by_rack.setdefault(brokers[node], []).append(node)
    if len(by_rack) <= 1:
        return sorted(brokers)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    ordered = []
    for i in range(max(len(v) for v in by_rack.values())):
        ordered.extend(by_rack[r][i] for r in racks if i < len(by_rack[r]))
    return ordered


def elect(state: PartitionState, replicas: Iterable[int], live: set[int], unclean: bool,
          controller_epoch: int, prefer: int | None = None) -> PartitionState | None:
    """The new state of a partition after broker changes, or None when it stays as it is.

    Dead brokers leave the ISR. A leader that is dead (or offline) is replaced by the first
    live replica in the ISR, in assignment order; with none, by any live replica if unclean
    election is on (the ISR becomes just that one), else the partition stays offline until an
    ISR member returns. ``prefer`` moves leadership to that replica if it is live and in sync.
    """
    replicas = tuple(replicas)
    isr = tuple(b for b in state.isr if b in live)
    leader = state.leader
    if prefer is not None and prefer != leader and prefer in isr:
        leader = prefer
    elif leader not in live or leader == NO_LEADER:
        candidates = [b for b in replicas if b in isr]
        if candidates:
            leader = candidates[0]
        elif unclean and any(b in live for b in replicas):
            leader = next(b for b in replicas if b in live)
            isr = (leader,)
        else:
            leader = NO_LEADER
            isr = state.isr  # keep the last ISR: only one of them may lead next (no unclean election)
    if leader == state.leader and isr == state.isr:
        return None
    epoch = state.leader_epoch + 1 if leader != state.leader else state.leader_epoch
    return replace(state, leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=controller_epoch)


def elect_on_request(state: PartitionState, replicas: Iterable[int], live: set[int], preferred: bool,
                     controller_epoch: int) -> tuple[str, PartitionState | None]:
    """An ElectLeaders request for one partition: (outcome, new state or None), Kafka's rules.

    Preferred: the first replica is to lead; NOT_NEEDED if it does, NOT_AVAILABLE unless it is
    live and in the ISR. Unclean: only a partition without a live leader gets one, from the ISR
    if any member is live, else any live replica; NOT_NEEDED while a live leader exists."""
    replicas = tuple(replicas)
    if preferred:
        if not replicas:
            return NOT_AVAILABLE, None
        want = replicas[0]
        if state.leader == want:
            return NOT_NEEDED, None
        if want not in live or want not in state.isr:
            return NOT_AVAILABLE, None
        new = elect(state, replicas, live, False, controller_epoch, prefer=want)
        return (ELECTED, new) if new is not None and new.leader == want else (NOT_AVAILABLE, None)
    if state.leader != NO_LEADER and state.leader in live:
        return NOT_NEEDED, None
    new = elect(state, replicas, live, True, controller_epoch)
    return (ELECTED, new) if new is not None and new.leader != NO_LEADER else (NOT_AVAILABLE, None)
