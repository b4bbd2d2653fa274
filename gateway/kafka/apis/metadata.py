"""Metadata: brokers (just this one in single-node mode) and topics with their partitions.

In cluster mode every broker answers for the whole cluster from its latest ZooKeeper view:
the live brokers' advertised listeners, and each partition's leader, replicas and ISR (a
partition whose leader is gone says LEADER_NOT_AVAILABLE until one is elected).
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.errors import InvalidTopicError
from core.metadata import check_topic_name
from core.names import is_internal_topic
from gateway.kafka.apis.registry import handles
from gateway.kafka.authz import CLUSTER_NAME
from gateway.kafka.operations import authorized_operations
from wire.kafka import respond

UNKNOWN_OPERATIONS = -(2**31)  # "authorized operations not requested"
LEADER_EPOCH = 0  # single node: the one leader has been leader since epoch 0


def broker_list(ctx) -> list[dict]:
    if ctx.cluster is not None:
        return [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in ctx.cluster.brokers()]
    host, port = ctx.advertised()
    return [{"node_id": ctx.node_id, "host": host, "port": port, "rack": None}]


def controller_id(ctx) -> int:
    return ctx.cluster.view.controller_id if ctx.cluster is not None else ctx.node_id


def partition_entry(ctx, name: str, index: int, topic) -> dict:
    if ctx.cluster is None:
        node = ctx.node_id
        return {"error_code": ErrorCode.none, "partition_index": index, "leader_id": node,
                "leader_epoch": LEADER_EPOCH, "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
    view = ctx.cluster.view
    replicas = list(topic.replicas[index]) if index < len(topic.replicas) else []
    state = view.state(name, index)
    live = view.brokers
    leader = state.leader if state is not None and state.leader in live else -1
    return {"error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": index, "leader_id": leader, "leader_epoch": state.leader_epoch if state else -1,
            "replica_nodes": replicas, "isr_nodes": list(state.isr) if state else [],
            "offline_replicas": [b for b in replicas if b not in live]}


def topic_entry(ctx, name: str, topic) -> dict:
    partitions = [partition_entry(ctx, name, i, topic) for i in range(topic.partitions)]
    return {"error_code": ErrorCode.none, "name": name, "topic_id": ctx.topic_id(name),
            "is_internal": is_internal_topic(name), "partitions": partitions,
            "topic_authorized_operations": UNKNOWN_OPERATIONS}


def _error_entry(name: str, error: ErrorCode) -> dict:
    return {"error_code": error, "name": name, "topic_id": 0, "is_internal": False, "partitions": [],
            "topic_authorized_operations": UNKNOWN_OPERATIONS}


@handles(3)
def metadata(ctx, conn, h, req):
    requested = req.topics
    if requested is None or (h.api_version == 0 and not requested):
        topics = [topic_entry(ctx, name, t) for name, t in sorted(ctx.logs.store.topics().items())]
    else:
        allow_create = getattr(req, "allow_auto_topic_creation", True)
        topics = []
        for item in requested:
            name = item.name
            topic_id = getattr(item, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int:  # v10+: by topic id (KIP-516)
                name = ctx.topic_name(topic_id)
                if name is None:
                    topics.append({**_error_entry(None, ErrorCode.unknown_topic_id), "topic_id": topic_id})
                    continue
                topics.append(topic_entry(ctx, name, ctx.logs.store.get_topic(name)))
                continue
            try:
                check_topic_name(name)
            except InvalidTopicError:
                topics.append(_error_entry(name, ErrorCode.invalid_topic_exception))
                continue
            topic = ctx.topic_or_create(name, allow_create)
            topics.append(topic_entry(ctx, name, topic) if topic else
                          _error_entry(name, ErrorCode.unknown_topic_or_partition))
    if getattr(req, "include_topic_authorized_operations", False):  # v8+, as Kafka: errors included
        for t in topics:
            if t["name"] is not None:
                t["topic_authorized_operations"] = authorized_operations(conn, "topic", t["name"])
    cluster_ops = (authorized_operations(conn, "cluster", CLUSTER_NAME)
                   if getattr(req, "include_cluster_authorized_operations", False) else UNKNOWN_OPERATIONS)
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "brokers": broker_list(ctx),
                       "cluster_id": ctx.cluster_id,
                       "controller_id": controller_id(ctx), "topics": topics,
                       "cluster_authorized_operations": cluster_ops})
