"""What every Kafka API handler needs: the logs, groups, producer state, this node's identity."""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable

from kio.schema.errors import ErrorCode

from core.errors import LogError
from core.group_configs import GroupConfigFileError, GroupConfigs
from core.log import PartitionLog
from core.log_manager import LogManager
from core.metadata import check_topic_name
from core.producers import ProducerStates
from gateway.cluster import shared_docs
from gateway.kafka.waiters import Waiters
from gateway.logs import fields

log = logging.getLogger(__name__)

SINGLE_NODE_EPOCH = 0  # one node has been leader of everything since epoch 0


@dataclass
class KafkaContext:
    logs: LogManager
    producers: ProducerStates
    groups: object  # core.groups.GroupCoordinator
    transactions: object  # core.transactions.TransactionCoordinator
    waiters: Waiters
    node_id: int
    cluster_id: str
    advertised: Callable[[], tuple[str, int]]  # (host, port) clients should connect to
    request_flush: Callable[[], None] = lambda: None
    auto_create_topics: bool = True
    num_partitions: int = 1
    max_request_bytes: int = 100 * 1024 * 1024
    reactor: object = None
    users: dict = field(default_factory=dict)
    accepting: bool = True  # False once shutdown begins: requests still arriving are refused
    topic_deleted: Callable[[str], None] = lambda name: None  # the AMQP side drops a queue on it
    connections: set = field(default_factory=set)  # open KafkaConnections, for the management API
    too_many_connections: Callable[[], bool] = lambda: False  # the global limit, both protocols
    max_connections_per_user: int = 0  # checked at SASL login; 0 = no limit
    throttle_ms: Callable[[], int] = lambda: 0  # > 0 while a resource alarm is on: Produce is slowed down
    storage_failed: Callable[[], bool] = lambda: True  # a log write failed (disk full): the disk alarm goes on
    # topic -> [records in, bytes in, bytes out]: running totals for the management API and /metrics
    traffic: dict[str, list[int]] = field(default_factory=dict)
    cluster: object = None  # gateway.cluster.node.ClusterNode in cluster mode; None on a single node
    peers: object = None  # cluster mode: gateway.cluster.peers.PeerClients, calls to other brokers
    quotas: object = None  # gateway.kafka.quotas.Quotas, made on first use (its file is in the data dir)
    group_configs: object = None  # core.group_configs.GroupConfigs, made on first use: see group_configs()
    router: Callable[[], object] = lambda: None  # the AMQP model (routing.broker.Router): share partitions live there
    share_sessions: dict = field(default_factory=dict)  # (group, member) -> share session (apis.share_groups)
    group_defaults: dict = field(default_factory=dict)  # broker settings behind group configs (share.*...)
    share_delivery_count_limit: int = 5  # group.share.delivery.count.limit
    share_remote: object = None  # cluster mode: gateway.cluster.share_state.RemoteShareState
    amqp_links: object = None  # spread cluster: gateway.cluster.link_server.LinkServer (AmqpLink)
    management_view: Callable | None = None  # cluster mode: gateway.management.cluster_clients.answer
    stream_consumers: object = None  # spread cluster: gateway.stream.sac.ClusterActiveConsumers (StreamConsumer)
    _names_by_id: dict = field(default_factory=dict, repr=False)  # topic id -> name (Fetch v13+)

    def leader_log(self, topic: str, index: int, current_epoch: int = -1) -> tuple[PartitionLog | None, int, ErrorCode]:
        """(log, leader epoch, error) of a partition whose leader must serve the request."""
        if self.cluster is not None:
            return self.cluster.leader_log(topic, index, current_epoch)
        plog = self.partition(topic, index)
        if plog is None:
            return None, -1, ErrorCode.unknown_topic_or_partition
        if current_epoch > SINGLE_NODE_EPOCH:
            return None, SINGLE_NODE_EPOCH, ErrorCode.unknown_leader_epoch
        return plog, SINGLE_NODE_EPOCH, ErrorCode.none

    def partition(self, topic: str, index: int) -> PartitionLog | None:
        return self.logs.logs.get((topic, index))

    def count_in(self, topic: str, records: int, size: int) -> None:
        totals = self.traffic.get(topic)
        if totals is None:
            totals = self.traffic[topic] = [0, 0, 0]
        totals[0] += records
        totals[1] += size

    def count_out(self, topic: str, size: int) -> None:
        totals = self.traffic.get(topic)
        if totals is None:
            totals = self.traffic[topic] = [0, 0, 0]
        totals[2] += size

    def delete_topic(self, name: str) -> None:
        """Delete a topic and everything kept about it (producers, transactions, the queue it stored)."""
        self.logs.delete_topic(name)
        self.forget_topic(name)

    def forget_topic(self, name: str) -> None:
        """Drop what this broker keeps of a deleted topic (cluster mode: deleted through another broker)."""
        for topic, index in [k for k in self.logs.logs if k[0] == name]:
            self.logs.drop_partition(topic, index)
        self.producers.forget(name)
        self.transactions.forget_topic(name)
        self.traffic.pop(name, None)
        self.topic_deleted(name)

    def last_stable_offset(self, topic: str, index: int, plog: PartitionLog) -> int:
        """What read_committed consumers may read below: the HW, or the oldest open transaction's start."""
        return self.producers.partition(topic, index, plog).last_stable_offset(plog.high_watermark)

    def topic_or_create(self, name: str, allow_create: bool = True):
        """The topic's metadata; auto-created (if allowed and enabled) when it does not exist."""
        topic = self.logs.store.get_topic(name)
        if topic is None and allow_create and self.auto_create_topics:
            try:
                check_topic_name(name)
                topic = self.logs.create_topic(name, self.num_partitions)
                log.info("auto-created topic", extra=fields(topic=name, partitions=self.num_partitions))
            except LogError as exc:
                log.warning("topic not auto-created: %s", exc, extra=fields(topic=name))
                return self.logs.store.get_topic(name)
        return topic

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The topic with this id, or None. A cached map, rebuilt when an id misses or went stale."""
        if topic_id is None or topic_id.int == 0:
            return None
        name = self._names_by_id.get(topic_id)
        if name is not None and self.topic_id(name) == topic_id:
            return name
        names = {}
        for n, t in self.logs.store.topics().items():
            try:
                names[uuid.UUID(t.topic_id)] = n
            except ValueError:  # a topic without an id cannot be asked for by id
                continue
        self._names_by_id = names
        return names.get(topic_id)

    def topic_id(self, name: str) -> uuid.UUID:
        topic = self.logs.store.get_topic(name)
        try:
            return uuid.UUID(topic.topic_id) if topic and topic.topic_id else uuid.UUID(int=0)
        except ValueError:
            return uuid.UUID(int=0)


def group_configs(ctx: KafkaContext) -> GroupConfigs:
    """The broker's per-group configs (core.group_configs.GroupConfigs), loaded on first use from
    the data directory (cluster mode: ZooKeeper); the KIP-848 keys default to the broker's own settings. Raises
    core.group_configs.GroupConfigFileError (and makes nothing) while the file is damaged."""
    gc = ctx.group_configs
    if gc is None:
        consumer = getattr(ctx.groups, "consumer", None)
        defaults = {} if consumer is None else {
            "consumer.session.timeout.ms": consumer.session_timeout_ms,
            "consumer.heartbeat.interval.ms": consumer.heartbeat_interval_ms}
        gc = ctx.group_configs = GroupConfigs(ctx.logs.data_dir, {**defaults, **getattr(ctx, "group_defaults", {})},
                                              shared_docs.document(ctx, shared_docs.GROUP_CONFIGS))
    return gc


def group_config(ctx: KafkaContext, group_id: str, name: str) -> str:
    """One group's value of a group config; the broker's default while the configs file is damaged
    (the admin APIs report that file; consumers keep going)."""
    try:
        return group_configs(ctx).get(group_id, name)
    except GroupConfigFileError:
        return str(ctx.group_defaults.get(name, GroupConfigs.default(name)))
